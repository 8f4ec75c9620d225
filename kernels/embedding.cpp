// kernels/embedding.cpp — kernels/embedding.h: checks the layouts and that the tensors share one
// device, then forwards to kernels/cpu/embedding.cpp or kernels/cuda/embedding.cu (on the
// device's current stream). The backends rely on these checks and do not repeat them.
#include "multigrad/kernels/embedding.h"

#include "multigrad/kernels/device_dispatch.h"

namespace mg::kernels {
namespace {

// table (V, D) and rows (n, D): contiguous, one floating dtype; indices contiguous Int64 (n).
void check_layout(const Tensor& table, const Tensor& indices, const Tensor& rows, const char* name) {
  MG_CHECK(table.dim() == 2 && table.is_contiguous() && (table.dtype() == DType::Float32 || table.dtype() == DType::Float64),
           name, ": the table must be contiguous (V, D) Float32 or Float64, got ", table.shape(), " ", table.dtype());
  MG_CHECK(indices.dtype() == DType::Int64 && indices.dim() == 1 && indices.is_contiguous(), name,
           ": indices must be contiguous 1-d Int64, got ", indices.shape(), " ", indices.dtype());
  const Shape want{indices.size(0), table.size(1)};
  MG_CHECK(rows.shape() == want && rows.is_contiguous() && rows.dtype() == table.dtype(), name,
           ": rows must be contiguous ", table.dtype(), " ", want, ", got ", rows.shape(), " ", rows.dtype());
}

}  // namespace

void embedding_fwd(const Tensor& weight, const Tensor& indices, const Tensor& out) {
  const Device device = one_device("embedding", {&weight, &indices, &out});
  check_layout(weight, indices, out, "embedding");
  if (device.is_cpu()) return cpu::embedding_fwd(weight, indices, out);
#if MG_WITH_CUDA
  cuda::embedding_fwd(weight, indices, out, stream_for(device));
#else
  MG_ERROR("embedding: multigrad was built without CUDA (tensor on ", device, ")");
#endif
}

void embedding_bwd(const Tensor& grad_out, const Tensor& indices, const Tensor& grad_weight) {
  const Device device = one_device("embedding backward", {&grad_out, &indices, &grad_weight});
  check_layout(grad_weight, indices, grad_out, "embedding backward");
  if (device.is_cpu()) return cpu::embedding_bwd(grad_out, indices, grad_weight);
#if MG_WITH_CUDA
  cuda::embedding_bwd(grad_out, indices, grad_weight, stream_for(device));
#else
  MG_ERROR("embedding backward: multigrad was built without CUDA (tensor on ", device, ")");
#endif
}

}  // namespace mg::kernels

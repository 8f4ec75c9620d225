// kernels/cuda/copy.cu — dst = src between two devices, at least one of them CUDA.
//
// What it computes: a byte copy of a contiguous tensor (same shape and dtype on both sides; the
// functional API converts and makes contiguous before calling). No kernel: the copy engines do it.
//
// Ordering and lifetime, per direction:
//   host -> cuda   cudaMemcpyAsync on `stream` (the CUDA side's current stream), then the stream
//                  is synchronised, so the host buffer may be freed or reused at once: a pinned
//                  block goes back to its cache when its tensor dies, and the next pinned tensor
//                  of that size would overwrite it under a copy still queued. Only a pinned
//                  source with `non_blocking` skips the wait, and so truly overlaps compute (the
//                  data loader, which keeps its source alive until an event says the copy ran).
//   cuda -> host   cudaMemcpyAsync on `stream`, then the stream is synchronised: the host reads
//                  dst as soon as this returns (to_vector, item).
//   cuda -> cuda   on `stream`, which is the current stream of one of the two devices. The other
//                  device's current stream is joined with events on both sides (the copy waits
//                  for its earlier work; its later work waits for the copy), so the copy is
//                  ordered as if it ran on both streams and the caching allocators of both
//                  devices may reuse the blocks safely. Logical devices on one physical GPU copy
//                  with cudaMemcpyAsync; different GPUs with cudaMemcpyPeerAsync (staged through
//                  the host by the driver when peer access is not enabled).
#include <cuda_runtime.h>

#include "multigrad/core/cuda_check.h"
#include "multigrad/core/stream.h"
#include "multigrad/kernels/cuda/cuda_kernels.h"

namespace mg::kernels::cuda {
namespace {

void copy_cuda_to_cuda(const Tensor& src, const Tensor& dst, size_t nbytes, cudaStream_t stream) {
  Stream src_stream = current_stream(src.device());
  Stream dst_stream = current_stream(dst.device());
  MG_CHECK(stream == src_stream.handle() || stream == dst_stream.handle(), "copy ", src.device(), " -> ",
           dst.device(), ": the stream is the current stream of neither device");
  Stream own = stream == dst_stream.handle() ? dst_stream : src_stream;
  Stream other = stream == dst_stream.handle() ? src_stream : dst_stream;

  Event other_ready(other.device());
  other_ready.record(other);
  other_ready.wait(own);

  set_cuda_device(own.device());
  int src_gpu = cuda_physical_index(src.device().index());
  int dst_gpu = cuda_physical_index(dst.device().index());
  if (src_gpu == dst_gpu)
    MG_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), nbytes, cudaMemcpyDeviceToDevice, stream));
  else
    MG_CUDA_CHECK(cudaMemcpyPeerAsync(dst.data_ptr(), dst_gpu, src.data_ptr(), src_gpu, nbytes, stream));

  Event copied(own.device());
  copied.record(own);
  copied.wait(other);
}

}  // namespace

void copy_across_devices(const Tensor& src, const Tensor& dst, bool non_blocking, cudaStream_t stream) {
  MG_CHECK(src.device().is_cuda() || dst.device().is_cuda(), "copy_across_devices (CUDA): ", src.device(),
           " -> ", dst.device(), " involves no CUDA device");
  MG_CHECK(src.shape() == dst.shape() && src.dtype() == dst.dtype(), "copy ", src.device(), " -> ",
           dst.device(), ": expected one shape and dtype, got ", src.shape(), " ", src.dtype(), " and ",
           dst.shape(), " ", dst.dtype());
  MG_CHECK(src.is_contiguous() && dst.is_contiguous(), "copy ", src.device(), " -> ", dst.device(),
           ": both sides must be contiguous");
  size_t nbytes = size_t(src.numel()) * src.element_size();
  if (nbytes == 0) return;

  if (src.device().is_cuda() && dst.device().is_cuda()) return copy_cuda_to_cuda(src, dst, nbytes, stream);

  bool to_device = dst.device().is_cuda();
  const Tensor& host = to_device ? src : dst;
  set_cuda_device(to_device ? dst.device() : src.device());
  MG_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), nbytes,
                                to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, stream));
  if (!(to_device && non_blocking && host.storage()->pinned())) MG_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace mg::kernels::cuda

// kernels/index.cpp — kernels/index.h: checks the layouts and that the tensors share one device,
// then forwards to kernels/cpu/index.cpp or kernels/cuda/index.cu (on the device's current
// stream). The backends rely on these checks and do not repeat them.
#include "multigrad/kernels/index.h"

#include "multigrad/kernels/device_dispatch.h"

namespace mg::kernels {
namespace {

bool is_indexable(DType dtype) { return dtype == DType::Float32 || dtype == DType::Float64 || dtype == DType::Int64; }

void check_3d(const Tensor& t, DType dtype, const char* name, const char* what) {
  MG_CHECK(t.dim() == 3 && t.is_contiguous() && t.dtype() == dtype, name, ": ", what, " must be contiguous 3-d ",
           dtype, ", got ", t.shape(), " ", t.dtype(), t.is_contiguous() ? "" : " (strided)");
}

// table (O, S, I) and rows (O, n, I) of one Float32/Float64/Int64 dtype; index contiguous (n)
// Int64, or (O, n, I) when `per_element`.
void check_layout(const Tensor& table, const Tensor& index, const Tensor& rows, bool per_element, const char* name) {
  MG_CHECK(is_indexable(table.dtype()), name, ": expected Float32, Float64 or Int64, got ", table.dtype());
  check_3d(table, table.dtype(), name, "the indexed tensor");
  check_3d(rows, table.dtype(), name, "the rows");
  MG_CHECK(rows.size(0) == table.size(0) && rows.size(2) == table.size(2), name, ": rows ", rows.shape(),
           " and table ", table.shape(), " differ outside the indexed dim");
  if (per_element) {
    check_3d(index, DType::Int64, name, "index");
    MG_CHECK(index.shape() == rows.shape(), name, ": index ", index.shape(), " must have the rows' shape ",
             rows.shape());
  } else {
    MG_CHECK(index.dtype() == DType::Int64 && index.dim() == 1 && index.is_contiguous() &&
                 index.size(0) == rows.size(1),
             name, ": index must be contiguous 1-d Int64 of ", rows.size(1), " elements, got ", index.shape(), " ",
             index.dtype());
  }
}

}  // namespace

void index_select(const Tensor& src, const Tensor& index, const Tensor& out, bool check_indices, const char* name) {
  const Device device = one_device(name, {&src, &index, &out});
  check_layout(src, index, out, false, name);
  MG_RUN_ON_DEVICE(device, name, index_select, src, index, out, check_indices, name);
}

void index_add(const Tensor& src, const Tensor& index, const Tensor& out, bool check_indices, const char* name) {
  const Device device = one_device(name, {&src, &index, &out});
  check_layout(out, index, src, false, name);
  MG_RUN_ON_DEVICE(device, name, index_add, src, index, out, check_indices, name);
}

void gather(const Tensor& src, const Tensor& index, const Tensor& out, bool check_indices) {
  const Device device = one_device("gather", {&src, &index, &out});
  check_layout(src, index, out, true, "gather");
  MG_RUN_ON_DEVICE(device, "gather", gather, src, index, out, check_indices);
}

void scatter_add(const Tensor& src, const Tensor& index, const Tensor& out, bool check_indices) {
  const Device device = one_device("scatter_add", {&src, &index, &out});
  check_layout(out, index, src, true, "scatter_add");
  MG_RUN_ON_DEVICE(device, "scatter_add", scatter_add, src, index, out, check_indices);
}

void cumsum(const Tensor& in, const Tensor& out, bool reverse) {
  const Device device = one_device("cumsum", {&in, &out});
  MG_CHECK(is_indexable(in.dtype()), "cumsum: expected Float32, Float64 or Int64, got ", in.dtype());
  check_3d(in, in.dtype(), "cumsum", "the input");
  check_3d(out, in.dtype(), "cumsum", "the output");
  MG_CHECK(out.shape() == in.shape(), "cumsum: output ", out.shape(), " differs from the input ", in.shape());
  MG_RUN_ON_DEVICE(device, "cumsum", cumsum, in, out, reverse);
}

void sort(const Tensor& in, const Tensor& values, const Tensor& indices, bool descending) {
  const Device device = one_device("sort", {&in, &values, &indices});
  MG_CHECK(is_indexable(in.dtype()), "sort: expected Float32, Float64 or Int64, got ", in.dtype());
  for (const Tensor* t : {&in, &values, &indices})
    MG_CHECK(t->dim() == 2 && t->is_contiguous() && t->shape() == in.shape(), "sort: expected contiguous (R, L) ",
             in.shape(), " tensors, got ", t->shape());
  MG_CHECK(values.dtype() == in.dtype() && indices.dtype() == DType::Int64, "sort: values must be ", in.dtype(),
           " and indices Int64, got ", values.dtype(), " and ", indices.dtype());
  MG_RUN_ON_DEVICE(device, "sort", sort, in, values, indices, descending);
}

}  // namespace mg::kernels

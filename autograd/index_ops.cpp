// autograd/index_ops.cpp — ops that read, add or order by index along one dim (kernels/index.h),
// cumsum, and nonzero / where(cond) composed of them.
//
// Each op makes its operands contiguous and views them around `dim` as 3-d (O, S, I) for the
// kernels. An index smaller than the input outside `dim` (gather, scatter_add) addresses the
// input's leading part there: that part is what the kernels see. The gradients are the ops'
// duals, built from these same differentiable ops:
//   index_select(x, d, i)      dx = index_add(0, d, i, g)
//   index_add(x, d, i, s)      dx = g, ds = index_select(g, d, i)
//   gather(x, d, i)            dx = scatter_add(0, d, i, g)
//   scatter_add(x, d, i, s)    dx = g, ds = gather(g, d, i)
//   cumsum(x, d)               dx = the reverse cumsum of g
//   sort / topk values         dx = scatter_add(0, d, indices, g)
#include <algorithm>

#include "multigrad/autograd/derivatives.h"
#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/op_common.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/kernels/index.h"
#include "multigrad/kernels/kernels.h"

namespace mg {
namespace {

bool is_indexable(DType dtype) { return dtype == DType::Float32 || dtype == DType::Float64 || dtype == DType::Int64; }

// The (O, S, I) view of a contiguous tensor around its dim d.
Tensor as_3d(const Tensor& t, int64_t d) {
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= t.shape()[size_t(k)];
  for (int64_t k = d + 1; k < t.dim(); ++k) inner *= t.shape()[size_t(k)];
  const int64_t size = t.shape()[size_t(d)];
  return t.as_strided({outer, size, inner}, {size * inner, inner, 1}, t.offset());
}

void check_operand(const Tensor& x, const char* name) {
  detail::check_defined(x, name);
  MG_CHECK(is_indexable(x.dtype()), name, ": expected Float32, Float64 or Int64, got ", x.dtype());
}

void check_indexed(const Tensor& x, const char* name) {
  check_operand(x, name);
  MG_CHECK(x.dim() > 0, name, ": expected a tensor of at least 1 dim, got a 0-d one");
}

// A 1-d Int64 index on x's device, x at least 1-d.
void check_list_index(const Tensor& x, const Tensor& index, const char* name) {
  detail::check_defined(index, name);
  detail::check_same_device(x, index, name);
  MG_CHECK(index.dtype() == DType::Int64 && index.dim() == 1, name, ": expected a 1-d Int64 index, got ",
           index.shape(), " ", index.dtype());
}

// An Int64 index of x's rank on x's device, no larger than x outside dim d (PyTorch's rule).
void check_element_index(const Tensor& x, const Tensor& index, int64_t d, const char* name) {
  detail::check_defined(index, name);
  detail::check_same_device(x, index, name);
  MG_CHECK(index.dtype() == DType::Int64, name, ": expected an Int64 index, got ", index.dtype());
  MG_CHECK(index.dim() == x.dim(), name, ": index ", index.shape(), " must have the input's rank, ", x.shape());
  for (int64_t k = 0; k < x.dim(); ++k)
    MG_CHECK(k == d || index.shape()[size_t(k)] <= x.shape()[size_t(k)], name, ": index ", index.shape(),
             " is larger than the input ", x.shape(), " in dim ", k, " (only dim ", d, " may be)");
}

// The part of x an index of `index_shape` addresses: along every dim but d, the first
// index_shape[k] positions (a view; x itself when the sizes agree), as PyTorch's gather and
// scatter_add read an index smaller than the input.
Tensor addressed_part(const Tensor& x, const Shape& index_shape, int64_t d) {
  Shape shape = index_shape;
  shape[size_t(d)] = x.shape()[size_t(d)];
  return shape == x.shape() ? x : x.as_strided(shape, x.strides(), x.offset());
}

Tensor dense(const Tensor& t) { return detail::contiguous_as(t, t.dtype()); }

// x with dim d moved last, contiguous: (R, L) rows for sort.
Tensor dim_last(const Tensor& x, int64_t d) { return dense(transpose(x, d, -1)); }

// Reverse = false: out[i] = x[0] + ... + x[i]; true: x[i] + ... + x[L-1]. Each is the other's
// gradient.
Tensor cumsum_along(const Tensor& x, int64_t d, bool reverse) {
  return detail::differentiable("cumsum", {&x}, [&] {
    const Tensor in = dense(x);
    Tensor out = Tensor::empty(x.shape(), in.options());
    kernels::cumsum(as_3d(in, d), as_3d(out, d), reverse);
    return out;
  }, [&] {
    return [d, reverse](const Tensor& g, const Tensor&) -> TensorList { return {cumsum_along(g, d, !reverse)}; };
  }, Saves::None, true);
}

// The four ops as nodes, their arguments checked by the public functions. `check`: whether the
// kernels check the indices (on CUDA a synchronisation); the backwards, whose forwards checked
// them, pass false.
Tensor index_select_node(const Tensor& x, int64_t d, const Tensor& index, bool check);
Tensor index_add_node(const Tensor& x, int64_t d, const Tensor& index, const Tensor& source, bool check);
Tensor gather_node(const Tensor& x, int64_t d, const Tensor& index, bool check);
Tensor scatter_add_node(const Tensor& x, int64_t d, const Tensor& index, const Tensor& source, bool check);

Tensor index_select_node(const Tensor& x, int64_t d, const Tensor& index, bool check) {
  return detail::differentiable("index_select", {&x, &index}, [&] {
    const Tensor src = dense(x);
    Shape shape = x.shape();
    shape[size_t(d)] = index.numel();
    Tensor out = Tensor::empty(shape, src.options());
    kernels::index_select(as_3d(src, d), dense(index), as_3d(out, d), check, "index_select");
    return out;
  }, [&] {
    return [d, index, shape = x.shape()](const Tensor& g, const Tensor&) -> TensorList {
      return {index_add_node(zeros(shape, g.options()), d, index, g, false), Tensor()};
    };
  }, Saves::Inputs, true);
}

Tensor index_add_node(const Tensor& x, int64_t d, const Tensor& index, const Tensor& source, bool check) {
  return detail::differentiable("index_add", {&x, &index, &source}, [&] {
    Tensor out = dense(clone(x));
    kernels::index_add(as_3d(dense(source), d), dense(index), as_3d(out, d), check, "index_add");
    return out;
  }, [&] {
    return [d, index](const Tensor& g, const Tensor&) -> TensorList {
      return {g, Tensor(), index_select_node(g, d, index, false)};
    };
  }, Saves::Inputs, true);
}

Tensor gather_node(const Tensor& x, int64_t d, const Tensor& index, bool check) {
  return detail::differentiable("gather", {&x, &index}, [&] {
    const Tensor src = dense(addressed_part(x, index.shape(), d));
    Tensor out = Tensor::empty(index.shape(), src.options());
    kernels::gather(as_3d(src, d), as_3d(dense(index), d), as_3d(out, d), check);
    return out;
  }, [&] {
    return [d, index, shape = x.shape()](const Tensor& g, const Tensor&) -> TensorList {
      return {scatter_add_node(zeros(shape, g.options()), d, index, g, false), Tensor()};
    };
  }, Saves::Inputs, true);
}

Tensor scatter_add_node(const Tensor& x, int64_t d, const Tensor& index, const Tensor& source, bool check) {
  return detail::differentiable("scatter_add", {&x, &index, &source}, [&] {
    Tensor out = dense(clone(x));
    // The addressed part of out, scattered into in place, or into a copy written back.
    const Tensor part = addressed_part(out, index.shape(), d), into = dense(part);
    kernels::scatter_add(as_3d(dense(source), d), as_3d(dense(index), d), as_3d(into, d), check);
    if (!into.is_same(part)) kernels::copy(into, part);
    return out;
  }, [&] {
    return [d, index](const Tensor& g, const Tensor&) -> TensorList {
      return {g, Tensor(), gather_node(g, d, index, false)};
    };
  }, Saves::Inputs, true);
}

}  // namespace

Tensor detail::index_add_unchecked(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source) {
  return index_add_node(x, dim, index, source, false);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  check_indexed(x, "index_select");
  check_list_index(x, index, "index_select");
  return index_select_node(x, wrap_dim(dim, x.dim(), "index_select"), index, true);
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source) {
  check_indexed(x, "index_add");
  check_list_index(x, index, "index_add");
  detail::check_defined(source, "index_add");
  detail::check_same_device(x, source, "index_add");
  const int64_t d = wrap_dim(dim, x.dim(), "index_add");
  Shape want = x.shape();
  want[size_t(d)] = index.numel();
  MG_CHECK(source.shape() == want, "index_add: source ", source.shape(), " must have shape ", want,
           " (the input's, with dim ", d, " the index's length)");
  MG_CHECK(source.dtype() == x.dtype(), "index_add: source ", source.dtype(), " and input ", x.dtype(), " differ");
  return index_add_node(x, d, index, source, true);
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  check_indexed(x, "gather");
  const int64_t d = wrap_dim(dim, x.dim(), "gather");
  check_element_index(x, index, d, "gather");
  return gather_node(x, d, index, true);
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source) {
  check_indexed(x, "scatter_add");
  const int64_t d = wrap_dim(dim, x.dim(), "scatter_add");
  check_element_index(x, index, d, "scatter_add");
  detail::check_defined(source, "scatter_add");
  detail::check_same_device(x, source, "scatter_add");
  MG_CHECK(source.dim() == index.dim(), "scatter_add: source ", source.shape(), " must have the index's rank, ",
           index.shape());
  // Only source's part the index addresses is added (PyTorch's rule): a view, whose backward pads.
  Tensor addressed = source;
  for (int64_t k = 0; k < source.dim(); ++k) {
    MG_CHECK(index.shape()[size_t(k)] <= source.shape()[size_t(k)], "scatter_add: index ", index.shape(),
             " is larger than the source ", source.shape(), " in dim ", k);
    if (index.shape()[size_t(k)] < source.shape()[size_t(k)])
      addressed = slice(addressed, k, 0, index.shape()[size_t(k)]);
  }
  MG_CHECK(source.dtype() == x.dtype(), "scatter_add: source ", source.dtype(), " and input ", x.dtype(),
           " differ");
  return scatter_add_node(x, d, index, addressed, true);
}

Tensor cumsum(const Tensor& x, int64_t dim) {
  detail::check_defined(x, "cumsum");
  MG_CHECK(x.dtype() != DType::BFloat16 && x.dtype() != DType::Float16, "cumsum: expected Float32, Float64, Int64 or "
           "Bool, got ", x.dtype());
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "cumsum");
  // As PyTorch: integers and Bool sum in Int64; a 0-d tensor is its own running sum.
  const Tensor in = x.dtype() == DType::Bool ? to(x, DType::Int64) : x;
  return reshape(cumsum_along(x.dim() == 0 ? reshape(in, {1}) : in, d, false), x.shape());
}

ValuesIndices sort(const Tensor& x, int64_t dim, bool descending) {
  check_operand(x, "sort");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "sort");
  if (x.dim() == 0) return {clone(x), zeros({}, {.dtype = DType::Int64, .device = x.device()})};
  Tensor indices;
  Tensor values = detail::differentiable("sort", {&x}, [&] {
    const Tensor rows = dim_last(x, d);
    const Tensor v = Tensor::empty(rows.shape(), rows.options());
    const Tensor i = Tensor::empty(rows.shape(), {DType::Int64, x.device()});
    const int64_t len = rows.dim() == 0 ? 1 : rows.shape().back();
    const int64_t count = len == 0 ? 0 : rows.numel() / len;
    kernels::sort(rows.view({count, len}), v.view({count, len}), i.view({count, len}), descending);
    indices = dense(transpose(i, d, -1));
    return dense(transpose(v, d, -1));
  }, [&] {
    // Its own copy of the indices: the caller may write into the ones returned.
    return [d, order = clone(indices), shape = x.shape()](const Tensor& g, const Tensor&) -> TensorList {
      return {scatter_add_node(zeros(shape, g.options()), d, order, g, false)};
    };
  }, Saves::None, true);
  return {values, indices};
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending) { return sort(x, dim, descending).indices; }

ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  check_operand(x, "topk");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "topk");
  const int64_t size = x.dim() == 0 ? 1 : x.shape()[size_t(d)];
  MG_CHECK(k >= 0 && k <= size, "topk: k = ", k, " is out of range [0, ", size, "] for dim ", d, " of ", x.shape());
  const ValuesIndices sorted = sort(x, d, largest);
  if (x.dim() == 0)
    return k == 1 ? sorted : ValuesIndices{zeros({0}, x.options()), zeros({0}, {.dtype = DType::Int64, .device = x.device()})};
  return {contiguous(slice(sorted.values, d, 0, k)), contiguous(slice(sorted.indices, d, 0, k))};
}

// Each nonzero element's linear index is scattered to its rank among the nonzero ones (a
// running count); the others go to one spare slot past the end. The linear indices are then
// split into coordinates, dim by dim, with float64 division (exact below 2^53). On CUDA the
// running count and the scatter of a 1-d tensor are one line each, so one thread walks the whole
// tensor (kernels/cuda/index.cu): correct, slow for large tensors.
Tensor nonzero(const Tensor& x) {
  detail::check_defined(x, "nonzero");
  const TensorOptions int64_on{.dtype = DType::Int64, .device = x.device()};
  const int64_t n = x.numel();
  const Tensor hit = to(reshape(ne(x, 0.0), {n}), DType::Int64);
  const Tensor rank = cumsum(hit, 0);  // 1-based among the hits
  const int64_t count = n == 0 ? 0 : rank.to(Device("cpu")).to_vector<int64_t>().back();
  const Tensor slot = where(eq(hit, 1.0), sub(rank, 1.0), full({n}, double(count), int64_on));
  const Tensor linear = slice(scatter_add(zeros({count + 1}, int64_on), 0, slot, arange(n, int64_on)), 0, 0, count);
  std::vector<Tensor> coords(size_t(x.dim()));
  Tensor rest = to(linear, DType::Float64);
  for (int64_t d = x.dim() - 1; d >= 0; --d) {
    const double size = double(x.shape()[size_t(d)]);
    const Tensor above = to(to(div(rest, size), DType::Int64), DType::Float64);  // floor: rest >= 0
    coords[size_t(d)] = to(sub(rest, mul(above, size)), DType::Int64);
    rest = above;
  }
  if (x.dim() == 0) return zeros({count, 0}, int64_on);
  return stack(coords, 1);
}

std::vector<Tensor> where(const Tensor& cond) {
  const Tensor positions = nonzero(cond);
  std::vector<Tensor> per_dim;
  for (int64_t d = 0; d < cond.dim(); ++d) per_dim.push_back(contiguous(squeeze(slice(positions, 1, d, d + 1), 1)));
  return per_dim;
}

}  // namespace mg

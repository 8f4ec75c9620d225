// autograd/reduce_ops.cpp — reductions (sum, mean, max, min, argmax) and softmax/log-softmax.
//
// The kernels work on rows: a contiguous (rows, cols) matrix whose columns are the reduced
// elements. An op permutes the reduced dims after the kept ones (a view), and one copy makes
// that contiguous in the compute dtype — no copy at all when the reduced dims are already the
// trailing dims of a contiguous tensor. A 0-d tensor reduces like shape [1] (dims 0 and -1).
//
// Derivatives: sum and mean spread the gradient back over the reduced dims (an expanded view,
// no copy); max/min route it to the extremes (see extreme_backward); softmax and log-softmax
// use their closed forms on the saved output.
//
// Result dtypes: sum of Bool or Int64 is Int64; mean requires a floating tensor; max and min
// keep the dtype; argmax is Int64; softmax of an integral tensor computes in Float32.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "multigrad/autograd/derivatives.h"
#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/op_common.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/kernels/kernels.h"

namespace mg {
namespace {

using kernels::ReduceOp;

// Which dims of x a reduction folds; an empty `dims` folds all of them.
std::vector<bool> reduced_dims(const Tensor& x, const std::vector<int64_t>& dims, const char* op) {
  const int64_t ndim = std::max<int64_t>(x.dim(), 1);
  std::vector<bool> reduced(size_t(ndim), dims.empty());
  for (int64_t dim : dims) {
    const int64_t d = wrap_dim(dim, ndim, op);
    MG_CHECK(!reduced[d], op, ": dim ", d, " appears more than once in dims ", dims);
    reduced[d] = true;
  }
  return reduced;
}

struct Rows {
  Tensor in;  // (rows, cols), contiguous, compute dtype
  int64_t rows = 1;
  int64_t cols = 1;
  Shape out_shape;  // the kept dims (and 1 for each reduced one when keepdim)
};

Rows as_rows(const Tensor& x, const std::vector<bool>& reduced, bool keepdim, DType dtype) {
  Rows r;
  std::vector<int64_t> perm;
  perm.reserve(size_t(x.dim()));
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (reduced[d]) {
      if (keepdim) r.out_shape.push_back(1);
      continue;
    }
    perm.push_back(d);
    r.rows *= x.shape()[d];
    r.out_shape.push_back(x.shape()[d]);
  }
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!reduced[d]) continue;
    perm.push_back(d);
    r.cols *= x.shape()[d];
  }
  const bool identity = std::is_sorted(perm.begin(), perm.end());
  Tensor y = detail::contiguous_as(identity ? x : detail::permute_unchecked(x, perm), dtype);
  r.in = y.as_strided({r.rows, r.cols}, {r.cols, 1}, y.offset());
  return r;
}

// The 1-d view of a fresh contiguous result that the row kernels write.
Tensor as_vector(const Tensor& out) { return out.as_strided({out.numel()}, {1}, out.offset()); }

Tensor reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, DType dtype) {
  const char* name = kernels::op_name(op);
  check_arithmetic_dtype(dtype, name);
  Rows r = as_rows(x, reduced_dims(x, dims, name), keepdim, dtype);
  MG_CHECK(r.cols > 0 || (op != ReduceOp::Max && op != ReduceOp::Min), name,
           ": cannot reduce over an empty extent (shape ", x.shape(), ", dims ", dims, ")");
  Tensor out = Tensor::empty(r.out_shape, {dtype, x.device()});
  if (r.rows > 0) kernels::reduce_rows(op, r.in, as_vector(out));
  return out;
}

Tensor softmax_op(const Tensor& x, int64_t dim, bool log, const char* name) {
  detail::check_defined(x, name);
  const DType dtype = is_floating(x.dtype()) ? x.dtype() : DType::Float32;
  check_arithmetic_dtype(dtype, name);
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), name);
  Rows r = as_rows(x, reduced_dims(x, {d}, name), true, dtype);
  Tensor out = Tensor::empty({r.rows, r.cols}, {dtype, x.device()});
  if (out.numel() > 0) kernels::softmax_rows(r.in, out, log);
  if (x.dim() == 0) return out.as_strided({}, {}, out.offset());
  // out is x with dim d moved last; give dim d back its place (a view, no copy).
  Strides strides(size_t(x.dim()));
  int64_t running = r.cols;
  strides[d] = 1;
  for (int64_t k = x.dim() - 1; k >= 0; --k) {
    if (k == d) continue;
    strides[k] = running;
    running *= x.shape()[k];
  }
  return out.as_strided(x.shape(), strides, out.offset());
}

// x's shape with the reduced dims kept as size 1: the shape a reduction's gradient is viewed
// in before it is expanded back over x.
Shape kept_shape(const Tensor& x, const std::vector<bool>& reduced) {
  Shape shape = x.shape();
  for (int64_t d = 0; d < x.dim(); ++d)
    if (reduced[d]) shape[d] = 1;
  return shape;
}

std::vector<int64_t> dim_list(const std::vector<bool>& reduced) {
  std::vector<int64_t> dims;
  for (size_t d = 0; d < reduced.size(); ++d)
    if (reduced[d]) dims.push_back(int64_t(d));
  return dims;
}

// A reduction whose backward is backward(g_kept, x, out_kept, reduced) -> gx, where g_kept and
// out_kept are the output gradient and output viewed with the reduced dims kept as size 1.
// `twice`: backward is differentiable in g and x (detail::differentiable).
template <class Forward, class Backward>
Tensor reduction_differentiable(const char* name, const Tensor& x, const std::vector<int64_t>& dims,
                                Forward forward, Backward backward, Saves saves = Saves::InputsAndOutputs,
                                bool twice = false) {
  return detail::differentiable(name, {&x}, forward, [&] {
    return [x = detail::kept_input(x, saves), reduced = reduced_dims(x, dims, name), backward](
               const Tensor& g, const Tensor& out) -> TensorList {
      const Shape kept = kept_shape(x, reduced);
      return {backward(reshape(g, kept), x, out.defined() ? reshape(out, kept) : out, reduced)};
    };
  }, saves, twice);
}

// max/min backward. Over one dim the gradient goes to the position the reduction picks (the
// first extreme, where argmax looks), as torch.max(x, dim) sends it to the index it returns;
// over several dims or all of them it is shared evenly among tied extremes, as torch.amax and
// the full torch.max do.
Tensor extreme_backward(const Tensor& g, const Tensor& x, const Tensor& out, const std::vector<bool>& reduced,
                        bool one_dim, bool is_max) {
  const std::vector<int64_t> dims = dim_list(reduced);
  if (one_dim && x.dim() > 0) {
    const int64_t d = dims[0];
    const Tensor index = argmax(is_max ? x : neg(x), d, true);  // kept shape, Int64
    Shape line(size_t(x.dim()), 1);
    line[d] = x.shape()[d];
    const Tensor positions = reshape(arange(x.shape()[d], {.dtype = DType::Int64, .device = x.device()}), line);
    return where(eq(positions, index), g, zeros({}, {.dtype = g.dtype(), .device = g.device()}));
  }
  const Tensor hits = to(eq(x, out), g.dtype());
  return mul(div(g, sum(hits, dims, true)), hits);
}

}  // namespace

Tensor detail::sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const int64_t lead = grad.dim() - int64_t(shape.size());
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < grad.dim(); ++d)
    if (d < lead || (shape[size_t(d - lead)] == 1 && grad.shape()[d] != 1)) dims.push_back(d);
  return reshape(dims.empty() ? grad : sum(grad, dims, true), shape);
}

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  auto forward = [&] {
    detail::check_defined(x, "sum");
    const DType dtype = is_floating(x.dtype()) ? x.dtype() : DType::Int64;
    return reduce(ReduceOp::Sum, x, dims, keepdim, dtype);
  };
  return reduction_differentiable(
      "sum", x, dims, forward,
      [](const Tensor& g, const Tensor& x, const Tensor&, const std::vector<bool>&) { return expand(g, x.shape()); },
      Saves::None, true);
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  auto forward = [&] {
    detail::check_defined(x, "mean");
    MG_CHECK(is_floating(x.dtype()), "mean: expected a floating dtype, got ", x.dtype());
    return reduce(ReduceOp::Mean, x, dims, keepdim, x.dtype());
  };
  return reduction_differentiable(
      "mean", x, dims, forward, [](const Tensor& g, const Tensor& x, const Tensor&, const std::vector<bool>& reduced) {
        int64_t count = 1;
        for (int64_t d = 0; d < x.dim(); ++d)
          if (reduced[d]) count *= x.shape()[d];
        return expand(div(g, double(count)), x.shape());
      },
      Saves::None, true);
}

// Bool is ordered as 0 < 1: reduce in Int64, return Bool.
Tensor max(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  auto forward = [&] {
    detail::check_defined(x, "max");
    if (x.dtype() == DType::Bool) return to(reduce(ReduceOp::Max, x, dims, keepdim, DType::Int64), DType::Bool);
    return reduce(ReduceOp::Max, x, dims, keepdim, x.dtype());
  };
  return reduction_differentiable(
      "max", x, dims, forward,
      [one_dim = dims.size() == 1](const Tensor& g, const Tensor& x, const Tensor& out,
                                   const std::vector<bool>& reduced) {
        return extreme_backward(g, x, out, reduced, one_dim, true);
      }, Saves::InputsAndOutputs, true);
}

Tensor min(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  auto forward = [&] {
    detail::check_defined(x, "min");
    if (x.dtype() == DType::Bool) return to(reduce(ReduceOp::Min, x, dims, keepdim, DType::Int64), DType::Bool);
    return reduce(ReduceOp::Min, x, dims, keepdim, x.dtype());
  };
  return reduction_differentiable(
      "min", x, dims, forward,
      [one_dim = dims.size() == 1](const Tensor& g, const Tensor& x, const Tensor& out,
                                   const std::vector<bool>& reduced) {
        return extreme_backward(g, x, out, reduced, one_dim, false);
      }, Saves::InputsAndOutputs, true);
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  detail::check_defined(x, "argmax");
  const DType dtype = x.dtype() == DType::Bool ? DType::Int64 : x.dtype();
  check_arithmetic_dtype(dtype, "argmax");
  Rows r = as_rows(x, reduced_dims(x, {dim}, "argmax"), keepdim, dtype);
  MG_CHECK(r.cols > 0, "argmax: cannot take the argmax over an empty dim ", dim, " (shape ", x.shape(), ")");
  Tensor out = Tensor::empty(r.out_shape, {DType::Int64, x.device()});
  if (r.rows > 0) kernels::argmax_rows(r.in, as_vector(out));
  return out;
}

// ---- composed of the ops above: their gradients come from the parts ----

Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  detail::check_defined(x, "logsumexp");
  MG_CHECK(is_floating(x.dtype()), "logsumexp: expected a floating dtype, got ", x.dtype());
  // The shift is a constant (its gradient cancels exactly); an infinite maximum shifts by 0, so
  // that an all -inf slice gives log(0) = -inf and a +inf gives +inf, not inf - inf.
  Tensor shift = max(x.detach(), dims, true);
  shift = where(eq(abs(shift), INFINITY), zeros_like(shift), shift);
  const Tensor sums = sum(exp(sub(x, shift)), dims, keepdim);
  return add(log(sums), keepdim ? shift : reshape(shift, sums.shape()));
}

Tensor var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  detail::check_defined(x, "var");
  MG_CHECK(is_floating(x.dtype()), "var: expected a floating dtype, got ", x.dtype());
  MG_CHECK(correction >= 0, "var: correction must be >= 0, got ", correction);
  const std::vector<bool> reduced = reduced_dims(x, dims, "var");
  int64_t n = 1;
  for (int64_t d = 0; d < x.dim(); ++d) n *= reduced[size_t(d)] ? x.shape()[d] : 1;
  const Tensor centred = sub(x, mean(x, dims, true));
  return div(sum(mul(centred, centred), dims, keepdim), double(std::max<int64_t>(0, n - correction)));
}

Tensor std(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  return sqrt(var(x, dims, correction, keepdim));
}

// softmax' : gx = y (g - sum(g y)); log_softmax' : gx = g - e^y sum(g), sums over dim.
Tensor softmax(const Tensor& x, int64_t dim) {
  return detail::differentiable("softmax", {&x}, [&] { return softmax_op(x, dim, false, "softmax"); }, [&] {
    return [dim](const Tensor& g, const Tensor& y) -> TensorList {
      return {mul(y, sub(g, sum(mul(g, y), {dim}, true)))};
    };
  }, Saves::Outputs, true);
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  return detail::differentiable("log_softmax", {&x}, [&] { return softmax_op(x, dim, true, "log_softmax"); }, [&] {
    return [dim](const Tensor& g, const Tensor& y) -> TensorList {
      return {sub(g, mul(exp(y), sum(g, {dim}, true)))};
    };
  }, Saves::Outputs, true);
}

}  // namespace mg

// autograd/ops.h — the functional API: mg::add, mg::matmul, mg::relu, ...
//
// Each function checks its arguments (shapes, dtypes, one device), allocates the result and
// calls a kernel from kernels/kernels.h. When grad mode is on and a floating input requires
// grad, the op records itself on the tape with its derivative (autograd/tape.h); comparisons,
// argmax and copy_ are not differentiable (their outputs never require grad). max/min over
// exactly one dim send the gradient to the first extreme (the index torch.max(x, dim) returns);
// over several dims or all of them they share it evenly among ties (torch.amax, torch.max()).
//
// Semantics follow PyTorch: broadcasting, type promotion (Bool < Int64 < Float32 < Float64;
// a tensor-scalar op keeps the tensor's dtype unless an integer tensor meets a fractional
// scalar, which gives Float32), true division and float math ops turn integers into Float32,
// and comparisons return Bool.
#pragma once

#include <cstdint>
#include <vector>

#include "multigrad/core/tensor.h"

namespace mg {

// ---- elementwise ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor sub(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor div(const Tensor& a, double s);

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);  // tanh approximation
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor expm1(const Tensor& x);  // e^x - 1, exact near 0
Tensor log1p(const Tensor& x);  // log(1 + x), exact near 0
Tensor clamp(const Tensor& x, double lo, double hi);

Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double s);
Tensor ne(const Tensor& a, double s);
Tensor lt(const Tensor& a, double s);
Tensor le(const Tensor& a, double s);
Tensor gt(const Tensor& a, double s);
Tensor ge(const Tensor& a, double s);
// cond ? a : b, broadcasting all three; cond must be Bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// x with `value` where mask (Bool, broadcast to x's shape) is true; no gradient flows there.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, double s);
Tensor operator-(const Tensor& a, double s);
Tensor operator*(const Tensor& a, double s);
Tensor operator/(const Tensor& a, double s);
Tensor operator+(double s, const Tensor& a);
Tensor operator-(double s, const Tensor& a);
Tensor operator*(double s, const Tensor& a);
Tensor operator/(double s, const Tensor& a);

// ---- reductions (dims may be negative; an empty list reduces every dim) ----
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor max(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor min(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// log(sum(exp(x))) over dims, the maximum taken out first so nothing overflows; a slice of
// -inf gives -inf. Its gradient is the softmax over dims.
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
// sum((x - mean)^2) / max(0, N - correction) over dims (N elements each): correction 1 is the
// unbiased estimate (PyTorch's default), 0 the population variance.
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, int64_t correction = 1, bool keepdim = false);
// sqrt(var(...)); call it mg::std: inside `using namespace mg`, a bare std names the namespace.
Tensor std(const Tensor& x, const std::vector<int64_t>& dims = {}, int64_t correction = 1, bool keepdim = false);

// ---- linear algebra ----
// torch.matmul: 1-d @ 1-d is a dot product, 2-d @ 2-d a matrix product, 1-d operands get a
// dim prepended (left) or appended (right) that is removed afterwards, and batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);

// ---- shape and copies ----
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor view(const Tensor& x, const Shape& shape);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);
Tensor to(const Tensor& x, const Device& device);
Tensor to(const Tensor& x, DType dtype);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// dst[...] = src (broadcast to dst's shape, converted to dst's dtype); dst may be a view.
void copy_(const Tensor& dst, const Tensor& src);

// ---- by index along one dim (Float32, Float64 or Int64; indices Int64 on x's device) ----
// An index outside [0, x.size(dim)) is an error naming it and its position. The additions are
// deterministic: contributions to one element are added in increasing position, on every device.
// out[.., i, ..] = x[.., index[i], ..]; index is 1-d.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// x with out[.., index[i], ..] += source[.., i, ..]; source is x's shape with index's length at dim.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source);
// out[i][j][k] = x[i][index[i][j][k]][k] (dim 1), out of index's shape; index has x's rank and
// sizes no larger than x's outside dim (it addresses their leading part, as in PyTorch).
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// x with out[i][index[i][j][k]][k] += source[i][j][k] (dim 1) for every position of index; index
// as gather's, source of index's rank and no smaller (its leading part is added).
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source);
// The running sum along dim; Bool and Int64 sum in Int64.
Tensor cumsum(const Tensor& x, int64_t dim);
// Sorted along dim, stable (equal values keep their order; NaN above every number), and where
// each value came from. topk: the k largest (or smallest) in that order; ties go to the lower
// position.
struct ValuesIndices {
  Tensor values;
  Tensor indices;  // Int64
};
ValuesIndices sort(const Tensor& x, int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true);
// The positions of x's nonzero (true) elements in row-major order, (count, x.dim()) Int64;
// where(cond) gives them as one Int64 tensor per dim (torch.where with only a condition). The
// count is read back to size the result: on CUDA, one synchronisation.
Tensor nonzero(const Tensor& x);
std::vector<Tensor> where(const Tensor& cond);

}  // namespace mg

// core/shape.cpp — element counts, contiguous strides, dim wrapping and broadcasting.
#include "multigrad/core/shape.h"

#include <algorithm>

#include "multigrad/core/error.h"

namespace mg {

int64_t numel_of(const Shape& shape) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t s : shape)
    MG_CHECK(!__builtin_mul_overflow(n, s, &n), "shape ", shape, " has more elements than an int64 counts (2^63 - 1)");
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);  // as PyTorch: a size-0 dim does not zero the strides
  }
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  MG_CHECK(dim >= -ndim && dim < ndim, op, ": dim ", dim, " is out of range for a tensor of ", ndim,
           ndim == 1 ? " dim" : " dims",
           ndim == 0 ? std::string(" (it has no dims)")
                     : detail::str_cat(" (expected ", -ndim, " to ", ndim - 1, ")"));
  return dim < 0 ? dim + ndim : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t ndim = std::max(a.size(), b.size());
  Shape out(ndim);
  // Align the shapes at their last dims; a missing leading dim acts as size 1.
  for (size_t i = 0; i < ndim; ++i) {
    int64_t sa = i < ndim - a.size() ? 1 : a[i - (ndim - a.size())];
    int64_t sb = i < ndim - b.size() ? 1 : b[i - (ndim - b.size())];
    MG_CHECK(sa == sb || sa == 1 || sb == 1, op, ": shapes ", a, " and ", b, " cannot be broadcast");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

std::string to_string(const Shape& shape) { return detail::str_cat(shape); }

}  // namespace mg

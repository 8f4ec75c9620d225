// core/shape.h — shapes and strides are plain vectors of int64_t, printed as [2, 3].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mg {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

// Most dims a kernel accepts (after coalescing); more is an error naming the count.
inline constexpr int kMaxDims = 10;

// Product of the sizes (1 for a 0-d shape, 0 when a size is 0); a product past int64 is an error
// naming the shape (an expand to 2^65 elements counted 0 and summed to 0).
int64_t numel_of(const Shape& shape);
// Row-major strides, in elements, of a contiguous tensor of this shape.
Strides contiguous_strides(const Shape& shape);
// Wraps a possibly negative dim into [0, ndim); throws naming dim and ndim.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// NumPy/PyTorch broadcasting of two shapes; throws naming both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

std::string to_string(const Shape& shape);

}  // namespace mg


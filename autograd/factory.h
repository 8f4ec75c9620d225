// autograd/factory.h — making tensors: from values, constants, ranges and random draws.
//
// Every factory honours TensorOptions: dtype (values are converted to it), device, and
// requires_grad (the result is a leaf of the tape).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "multigrad/core/random.h"
#include "multigrad/core/tensor.h"

namespace mg {

// The values, row-major, converted to options.dtype; their count must equal the shape's numel.
// Without a dtype given, floating values make a Float32 tensor and integers an Int64 one
// (torch.tensor's inference).
Tensor tensor(const std::vector<float>& values, const Shape& shape, const TensorOptions& options = {});
Tensor tensor(const std::vector<double>& values, const Shape& shape, const TensorOptions& options = {});
Tensor tensor(const std::vector<int64_t>& values, const Shape& shape, const TensorOptions& options = {});
// mg::tensor({1.f, 2.f, 3.f}, {3}) and mg::tensor({1, 2}, {2}) without spelling the vector type.
template <class T>
Tensor tensor(std::initializer_list<T> values, const Shape& shape, const TensorOptions& options = {}) {
  if constexpr (std::is_floating_point_v<T>)
    return tensor(std::vector<double>(values.begin(), values.end()), shape, options);
  else
    return tensor(std::vector<int64_t>(values.begin(), values.end()), shape, options);
}

Tensor empty(const Shape& shape, const TensorOptions& options = {});
Tensor zeros(const Shape& shape, const TensorOptions& options = {});
Tensor ones(const Shape& shape, const TensorOptions& options = {});
Tensor full(const Shape& shape, double value, const TensorOptions& options = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
// 0, 1, ..., n-1 (and the start/end/step form); Float32 unless options say otherwise.
Tensor arange(int64_t n, const TensorOptions& options = {});
Tensor arange(double start, double end, double step, const TensorOptions& options = {});
// Uniform in [0, 1) and standard normal, from the global Philox state (core/random.h): the
// same seed gives the same numbers on every device. Float32 or Float64. Inside a DrawSliceScope
// (core/random.h), the scope's slice of the whole draw.
Tensor rand(const Shape& shape, const TensorOptions& options = {});
Tensor randn(const Shape& shape, const TensorOptions& options = {});
// `shape` is the slice [slice.start, slice.start + shape[slice.dim]) along slice.dim of a draw of
// slice.whole there: its numbers are the whole draw's at those positions, and the generator
// advances past the whole draw.
Tensor rand(const Shape& shape, const TensorOptions& options, const DrawSlice& slice);

}  // namespace mg

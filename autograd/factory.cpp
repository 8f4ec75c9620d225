// autograd/factory.cpp — making tensors: from host values, constants, ranges, Philox draws.
//
// Every factory checks its options first (the device exists; requires_grad only on a floating
// dtype, as in PyTorch), then allocates on the target device and fills there: nothing is
// staged on the host except the values handed to mg::tensor.
#include "multigrad/autograd/factory.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "multigrad/autograd/ops.h"
#include "multigrad/kernels/kernels.h"

namespace mg {
namespace {

void check_options(const TensorOptions& options, const char* op) {
  check_device_exists(options.device);
  MG_CHECK(!options.requires_grad || is_floating(options.dtype), op,
           ": only tensors of a floating dtype can require gradients, got ", options.dtype);
}

// Uninitialised memory with the options' dtype and device; requires_grad marks a leaf.
Tensor allocate(const Shape& shape, const TensorOptions& options, const char* op) {
  check_options(options, op);
  Tensor t = Tensor::empty(shape, {options.dtype, options.device});
  t.unsafe_impl()->requires_grad = options.requires_grad;
  return t;
}

template <class T>
Tensor from_values(const std::vector<T>& values, const Shape& shape, const TensorOptions& options) {
  check_options(options, "tensor");
  MG_CHECK(int64_t(values.size()) == numel_of(shape), "tensor: ", values.size(), " values do not fill shape ",
           shape, " (", numel_of(shape), " elements)");
  // Stage on the target device when it is host memory, else on cpu:0; then convert and move.
  const Device staging = options.device.is_cpu() ? options.device : Device(DeviceType::CPU, 0);
  Tensor host = Tensor::empty(shape, {dtype_v<T>, staging});
  if (!values.empty()) std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(T));
  Tensor t = to(to(host, options.dtype), options.device);
  t.unsafe_impl()->requires_grad = options.requires_grad;
  return t;
}

Tensor filled(const Shape& shape, double value, const TensorOptions& options, const char* op) {
  Tensor t = allocate(shape, options, op);
  if (t.numel() > 0) kernels::fill(t, value);
  return t;
}

// A draw of `shape`, or (slice) of its part of a larger draw (core/random.h's DrawSlice); without
// one, the thread's DrawSliceScope's, if any.
Tensor random(const Shape& shape, const TensorOptions& options, bool normal, const char* op,
              const DrawSlice* slice = nullptr) {
  MG_CHECK(options.dtype == DType::Float32 || options.dtype == DType::Float64, op,
           ": expected dtype Float32 or Float64, got ", options.dtype);
  Tensor t = allocate(shape, options, op);
  int64_t drawn = t.numel();  // the whole draw's elements
  DrawWindow window;
  if (const DrawSliceScope* scope = current_draw_slice(); scope != nullptr) {
    MG_CHECK(slice == nullptr, op, ": a draw of a slice along dim ", slice->dim, " inside a DrawSliceScope along dim ",
             scope->slice().dim, " (a slice of a slice is not built)");
    slice = &scope->slice();
    MG_CHECK(slice->dim < int(shape.size()) && shape[size_t(slice->dim)] == scope->size(), op, ": a draw of shape ",
             shape, " inside a DrawSliceScope of ", scope->size(), " positions along dim ", slice->dim,
             " (its rows of a batch of ", slice->whole, "): the draw does not have them");
  }
  if (slice != nullptr) {
    MG_CHECK(slice->dim >= 0 && slice->dim < int(shape.size()), op, ": a slice along dim ", slice->dim,
             " of a draw of shape ", shape);
    const int64_t here = shape[size_t(slice->dim)];
    MG_CHECK(slice->start >= 0 && slice->start + here <= slice->whole, op, ": positions [", slice->start, ", ",
             slice->start + here, ") along dim ", slice->dim, " are not within the whole draw's [0, ", slice->whole,
             ")");
    Shape whole = shape;
    whole[size_t(slice->dim)] = slice->whole;
    drawn = numel_of(whole);
    const int64_t inner = numel_of(Shape(shape.begin() + slice->dim + 1, shape.end()));  // a position's elements
    window = {slice->start * inner, here * inner, slice->whole * inner};
  }
  const PhiloxState state = philox_reserve(kernels::random_blocks(drawn, options.dtype, normal));
  if (t.numel() == 0) return t;
  if (normal)
    kernels::normal(t, state, 0.0, 1.0, window);
  else
    kernels::uniform(t, state, 0.0, 1.0, window);
  return t;
}

}  // namespace

Tensor tensor(const std::vector<float>& values, const Shape& shape, const TensorOptions& options) {
  return from_values(values, shape, options);
}
Tensor tensor(const std::vector<double>& values, const Shape& shape, const TensorOptions& options) {
  return from_values(values, shape, options);
}
Tensor tensor(const std::vector<int64_t>& values, const Shape& shape, const TensorOptions& options) {
  TensorOptions inferred = options;
  if (!options.dtype.given()) inferred.dtype = DType::Int64;  // integers make an Int64 tensor, as in PyTorch
  return from_values(values, shape, inferred);
}

Tensor empty(const Shape& shape, const TensorOptions& options) { return allocate(shape, options, "empty"); }
Tensor zeros(const Shape& shape, const TensorOptions& options) {
  return filled(shape, 0.0, options, "zeros");
}
Tensor ones(const Shape& shape, const TensorOptions& options) { return filled(shape, 1.0, options, "ones"); }
Tensor full(const Shape& shape, double value, const TensorOptions& options) {
  return filled(shape, value, options, "full");
}

Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.options()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.options()); }

Tensor arange(int64_t n, const TensorOptions& options) {
  MG_CHECK(n >= 0, "arange: expected a non-negative count, got ", n);
  return arange(0.0, double(n), 1.0, options);
}

Tensor arange(double start, double end, double step, const TensorOptions& options) {
  MG_CHECK(step != 0, "arange: step must be nonzero");
  MG_CHECK(std::isfinite(start) && std::isfinite(end), "arange: bounds must be finite, got ", start, " and ",
           end);
  MG_CHECK((end - start) / step >= 0, "arange: the range [", start, ", ", end,
           ") does not go in the direction of step ", step);
  const int64_t count = int64_t(std::ceil((end - start) / step));
  Tensor t = allocate({count}, options, "arange");
  if (count > 0) kernels::arange(t, start, step);
  return t;
}

Tensor rand(const Shape& shape, const TensorOptions& options) {
  return random(shape, options, false, "rand");
}
Tensor randn(const Shape& shape, const TensorOptions& options) {
  return random(shape, options, true, "randn");
}
Tensor rand(const Shape& shape, const TensorOptions& options, const DrawSlice& slice) {
  return random(shape, options, false, "rand", &slice);
}

}  // namespace mg

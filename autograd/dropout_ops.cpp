// autograd/dropout_ops.cpp — dropout, composed from primitives:
//
//   mask = (u >= p) / (1 - p),  u = mg::rand(shape) (Philox, in the input's dtype and device)
//   out  = input * mask
//
// The mask is a constant of the product, so mul's backward multiplies the gradient by the same
// mask. Philox numbers depend only on seed, offset and element index, so one seed gives one
// mask on every device, and a slice of the input (a DrawSlice) can draw its part of the whole
// input's mask alone. !training or p == 0 returns the input itself; p == 1 gives input * 0
// (zeros, NaN where the input is Inf or NaN, as in PyTorch) and draws nothing.
#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/nn_ops.h"
#include "multigrad/autograd/op_common.h"
#include "multigrad/autograd/ops.h"

namespace mg {

namespace {

Tensor dropout(const Tensor& input, double p, bool training, const DrawSlice* slice) {
  detail::check_defined(input, "dropout");
  MG_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability has to be between 0 and 1, but got ", p);
  if (!training || p == 0.0) return input;
  MG_CHECK(input.dtype() == DType::Float32 || input.dtype() == DType::Float64,
           "dropout: expected a Float32 or Float64 input, got ", input.dtype());
  if (p == 1.0) return input * 0.0;
  const TensorOptions options{input.dtype(), input.device()};
  const Tensor u = slice != nullptr ? rand(input.shape(), options, *slice) : rand(input.shape(), options);
  const Tensor mask = to(ge(u, p), input.dtype()) * (1.0 / (1.0 - p));
  return input * mask;
}

}  // namespace

Tensor dropout(const Tensor& input, double p, bool training) { return dropout(input, p, training, nullptr); }

Tensor dropout(const Tensor& input, double p, bool training, const DrawSlice& slice) {
  return dropout(input, p, training, &slice);
}

}  // namespace mg

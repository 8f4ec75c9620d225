// nn/init.cpp — nn/init.h: draws a fresh tensor with the factories and copies it in place.
#include "multigrad/nn/init.h"

#include <cmath>

#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"

namespace mg::nn::init {
namespace {

// The factories draw Float32 or Float64; other dtypes draw Float32 and convert on copy.
TensorOptions draw_options(const Tensor& t) {
  DType dtype = t.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  return {.dtype = dtype, .device = t.device()};
}

}  // namespace

void uniform_(const Tensor& t, double low, double high) {
  MG_CHECK(low <= high, "uniform_: low ", low, " exceeds high ", high);
  NoGradGuard no_grad;
  copy_(t, rand(t.shape(), draw_options(t)) * (high - low) + low);
}

void normal_(const Tensor& t, double mean, double std) {
  MG_CHECK(std >= 0, "normal_: std must be non-negative, got ", std);
  NoGradGuard no_grad;
  copy_(t, randn(t.shape(), draw_options(t)) * std + mean);
}

void constant_(const Tensor& t, double value) {
  NoGradGuard no_grad;
  copy_(t, full({}, value, {.dtype = t.dtype(), .device = t.device()}));
}

void zeros_(const Tensor& t) { constant_(t, 0.0); }
void ones_(const Tensor& t) { constant_(t, 1.0); }

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& weight) {
  MG_CHECK(weight.dim() >= 2, "fan_in_and_fan_out: needs a weight of at least 2 dims, got shape ", weight.shape());
  int64_t receptive_field = 1;
  for (int64_t d = 2; d < weight.dim(); ++d) receptive_field *= weight.size(d);
  return {weight.size(1) * receptive_field, weight.size(0) * receptive_field};
}

void kaiming_uniform_(const Tensor& weight, double a) {
  const int64_t fan_in = fan_in_and_fan_out(weight).first;
  MG_CHECK(fan_in > 0, "kaiming_uniform_: fan_in is 0 for shape ", weight.shape());
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = gain * std::sqrt(3.0 / double(fan_in));
  uniform_(weight, -bound, bound);
}

}  // namespace mg::nn::init

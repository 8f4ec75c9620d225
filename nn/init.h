// nn/init.h — parameter initialisation (torch.nn.init), in place, without recording on the tape.
//
// Draws come from the global Philox state (mg::manual_seed), so a model built after the same
// seed has the same parameters on every device and in every run.
#pragma once

#include <cstdint>
#include <utility>

#include "multigrad/core/tensor.h"

namespace mg::nn::init {

// U(low, high), elementwise.
void uniform_(const Tensor& t, double low, double high);
// N(mean, std^2), elementwise.
void normal_(const Tensor& t, double mean = 0.0, double std = 1.0);
void constant_(const Tensor& t, double value);
void zeros_(const Tensor& t);
void ones_(const Tensor& t);

// (fan_in, fan_out) of a weight of at least 2 dims: (size(1), size(0)) times the product of
// the remaining (receptive field) dims, e.g. (C/groups * kH * kW, O * kH * kW) for a conv.
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& weight);

// Kaiming (He) uniform for a leaky-ReLU slope `a`, fan_in mode:
//   gain = sqrt(2 / (1 + a^2)), bound = gain * sqrt(3 / fan_in), U(-bound, bound).
// PyTorch's Linear and Conv2d use a = sqrt(5), which gives bound = 1 / sqrt(fan_in).
void kaiming_uniform_(const Tensor& weight, double a = 0.0);

}  // namespace mg::nn::init

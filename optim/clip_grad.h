// optim/clip_grad.h — gradient clipping by the global L2 norm (torch.nn.utils.clip_grad_norm_),
// with a sum of squares that does not depend on how the gradients are laid out.
//
// SquareSum adds squares exactly: each element x (float32 or float64) gives x^2 = p + e, p = x*x
// and e = fma(x, x, -p) (e = 0 for a float32 x, whose square a double holds exactly), and both
// doubles go into a fixed-point accumulator of 32-bit digits spanning the whole double range, with
// no rounding. The sum is therefore one number whatever the order of the elements and however
// they are cut among tensors, devices or ranks (an all-reduce of the digits, integers, is exact
// too: parallel/data/grad_norm.h); only value() rounds, and it rounds that number the same way every
// time. So one device, DDP, ZeRO's shards and a pipeline's stages clip by the same norm, bit for
// bit. Exact unless a float64 square falls below 2^-1022 (its e underflows; still deterministic).
// Cost: a few integer operations per element on the host (a CUDA gradient is copied there first).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "multigrad/core/tensor.h"

namespace mg::optim {

class SquareSum {
 public:
  // Digits of 32 bits from 2^-1074 (double's smallest) up past 2^1024, with room for 2^40 sums.
  static constexpr int kDigits = 68;

  // Every element of t (Float32 or Float64, any device), squared.
  void add(const Tensor& t);
  // The digits, each in [0, 2^32), then the counts of NaN and infinite squares: what ranks sum
  // (element by element) to add their SquareSums; from_words takes such a sum back.
  std::vector<int64_t> words() const;
  static SquareSum from_words(const std::vector<int64_t>& words);
  // The sum, rounded the same way every time (NaN if a square was, else inf if one was).
  double value() const;

 private:
  void add_exact(double v);  // v exactly, v finite (negative allowed: the e of a square)
  void normalize();

  std::array<int64_t, kDigits> digits_{};
  int64_t since_normalized_ = 0;
  int64_t nans_ = 0, infs_ = 0;
};

// The defined gradients of params, in order (the tensors themselves, not copies).
std::vector<Tensor> grads_of(const std::vector<Tensor>& params);
// The SquareSum of every element of every tensor (undefined ones skipped).
SquareSum squares_of(const std::vector<Tensor>& tensors);

// total = sqrt(the SquareSum of every defined gradient of params). When max_norm / (total + 1e-6)
// < 1, every gradient is scaled in place by that factor (PyTorch's rule: the 1e-6 keeps the
// division finite for a zero norm). Returns total (before scaling). Parameters without a gradient
// are skipped. A non-finite total is returned as is and leaves the gradients untouched.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);
// The scaling step of clip_grad_norm, for a total found elsewhere (gradients spread over ranks):
// each defined tensor of `grads` scaled by max_norm / (total + 1e-6) when that is below 1.
void scale_to_norm(const std::vector<Tensor>& grads, double total, double max_norm);

}  // namespace mg::optim

// optim/clip_grad.cpp — SquareSum and clip_grad_norm (optim/clip_grad.h).
#include "multigrad/optim/clip_grad.h"

#include <bit>
#include <cmath>

#include "multigrad/autograd/tape.h"
#include "multigrad/core/error.h"
#include "multigrad/kernels/kernels.h"

namespace mg::optim {
namespace {

// PyTorch's guard against dividing by a zero norm.
constexpr double kNormEpsilon = 1e-6;
constexpr int kDigitBits = 32;
constexpr int kLowestExponent = -1074;  // a double's smallest power of two
// Additions between normalizations: each puts at most 2^32 into a digit, so 2^30 of them stay far
// below int64's range.
constexpr int64_t kNormalizeEvery = int64_t(1) << 30;

}  // namespace

void SquareSum::add_exact(double v) {
  if (v == 0) return;
  const uint64_t bits = std::bit_cast<uint64_t>(std::fabs(v));
  const int biased = int(bits >> 52);
  const uint64_t fraction = bits & ((uint64_t(1) << 52) - 1);
  // |v| = mantissa x 2^exponent with an integer mantissa of at most 53 bits.
  const uint64_t mantissa = biased == 0 ? fraction : fraction | (uint64_t(1) << 52);
  const int position = (biased == 0 ? kLowestExponent : biased - 1075) - kLowestExponent;  // >= 0
  const int digit = position / kDigitBits;
  const unsigned __int128 shifted = static_cast<unsigned __int128>(mantissa) << (position % kDigitBits);
  const int64_t sign = v < 0 ? -1 : 1;
  for (int k = 0; k < 3; ++k)  // 53 + 31 bits span three digits
    digits_[size_t(digit + k)] += sign * int64_t(uint64_t(shifted >> (kDigitBits * k)) & 0xffffffffu);
  if (++since_normalized_ == kNormalizeEvery) normalize();
}

// Carries up, so that every digit but the top one is in [0, 2^32); the top one holds the rest.
void SquareSum::normalize() {
  for (int i = 0; i + 1 < kDigits; ++i) {
    const int64_t carry = digits_[size_t(i)] >> kDigitBits;  // floor, also for a negative digit
    digits_[size_t(i)] -= carry * (int64_t(1) << kDigitBits);
    digits_[size_t(i + 1)] += carry;
  }
  since_normalized_ = 0;
}

void SquareSum::add(const Tensor& t) {
  MG_CHECK(t.dtype() == DType::Float32 || t.dtype() == DType::Float64, "SquareSum: expected a Float32 or Float64 ",
           "tensor, got ", t.dtype());
  const Tensor host = t.detach().to(Device("cpu:0")).contiguous();
  const auto square = [&](double x) {
    const double p = x * x;
    if (std::isnan(p)) {
      ++nans_;
    } else if (std::isinf(p)) {
      ++infs_;
    } else {
      add_exact(p);
      add_exact(std::fma(x, x, -p));
    }
  };
  const int64_t n = host.numel();
  if (host.dtype() == DType::Float32) {
    const float* x = host.data<float>();
    for (int64_t i = 0; i < n; ++i) square(double(x[i]));
  } else {
    const double* x = host.data<double>();
    for (int64_t i = 0; i < n; ++i) square(x[i]);
  }
}

std::vector<int64_t> SquareSum::words() const {
  SquareSum copy = *this;
  copy.normalize();
  std::vector<int64_t> out(copy.digits_.begin(), copy.digits_.end());
  out.push_back(nans_);
  out.push_back(infs_);
  return out;
}

SquareSum SquareSum::from_words(const std::vector<int64_t>& words) {
  MG_CHECK(words.size() == size_t(kDigits) + 2, "SquareSum::from_words: expected ", kDigits + 2, " words, got ",
           words.size());
  SquareSum s;
  std::copy(words.begin(), words.begin() + kDigits, s.digits_.begin());
  s.nans_ = words[size_t(kDigits)];
  s.infs_ = words[size_t(kDigits) + 1];
  s.normalize();
  return s;
}

double SquareSum::value() const {
  if (nans_ > 0) return std::nan("");
  if (infs_ > 0) return INFINITY;
  SquareSum copy = *this;
  copy.normalize();
  double sum = 0;  // lowest digit first: the same additions, so the same rounding, every time
  for (int i = 0; i < kDigits; ++i)
    sum += std::ldexp(double(copy.digits_[size_t(i)]), kDigitBits * i + kLowestExponent);
  return sum;
}

void scale_to_norm(const std::vector<Tensor>& grads, double total, double max_norm) {
  MG_CHECK(max_norm >= 0, "clip_grad_norm: max_norm must be non-negative, got ", max_norm);
  if (!std::isfinite(total)) return;
  const double coef = max_norm / (total + kNormEpsilon);
  if (coef >= 1.0) return;
  NoGradGuard no_grad;
  for (const Tensor& g : grads)
    if (g.defined()) kernels::binary_scalar(kernels::BinaryOp::Mul, g, coef, false, g);
}

std::vector<Tensor> grads_of(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

SquareSum squares_of(const std::vector<Tensor>& tensors) {
  SquareSum squares;
  for (const Tensor& t : tensors)
    if (t.defined()) squares.add(t);
  return squares;
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  MG_CHECK(max_norm >= 0, "clip_grad_norm: max_norm must be non-negative, got ", max_norm);
  const std::vector<Tensor> grads = grads_of(params);
  const double total = std::sqrt(squares_of(grads).value());
  scale_to_norm(grads, total, max_norm);
  return total;
}

}  // namespace mg::optim

// The fused attention kernels (kernels/attention.h) on the CPU: the forward's output and
// log-sum-exp against a loop over every query in float64, the backward against the gradients of
// the math path (scaled_dot_product_attention_math), float32 within a derived bound, bf16 and fp16
// inputs against the same loops rounding where the kernels round, the same bits for any thread
// budget and for one head alone or among others, strided operands, the edges (no keys, no query
// width, more queries than keys), and the dispatch's checks.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "multigrad/kernels/attention.h"
#include "multigrad/kernels/functors.h"
#include "core/cpu_devices_guard.h"
#include "kernels/kernel_test_util.h"

using namespace mg;
using namespace mg::test;
namespace k = mg::kernels;

namespace {

struct Case {
  int64_t batch, heads, queries, keys, e, f;
  bool causal;
};

// The forward by definition (kernels/attention.h), in float64: out (B, H, L, F) then lse (B, H, L).
std::pair<std::vector<double>, std::vector<double>> reference(const Case& c, const std::vector<double>& q,
                                                              const std::vector<double>& kk,
                                                              const std::vector<double>& v, double scale) {
  std::vector<double> out(size_t(c.batch * c.heads * c.queries * c.f), 0.0);
  std::vector<double> lse(size_t(c.batch * c.heads * c.queries));
  for (int64_t bh = 0; bh < c.batch * c.heads; ++bh)
    for (int64_t i = 0; i < c.queries; ++i) {
      const int64_t seen = c.causal ? std::min(i + 1, c.keys) : c.keys;
      std::vector<double> s(static_cast<size_t>(seen));
      double top = -std::numeric_limits<double>::infinity(), total = 0;
      for (int64_t j = 0; j < seen; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < c.e; ++d)
          dot += q[size_t((bh * c.queries + i) * c.e + d)] * kk[size_t((bh * c.keys + j) * c.e + d)];
        top = std::max(top, s[size_t(j)] = dot * scale);
      }
      for (double x : s) total += std::exp(x - top);
      const size_t row = size_t(bh * c.queries + i);
      lse[row] = seen == 0 ? -std::numeric_limits<double>::infinity() : top + std::log(total);
      for (int64_t j = 0; j < seen; ++j)
        for (int64_t d = 0; d < c.f; ++d)
          out[row * size_t(c.f) + size_t(d)] +=
              std::exp(s[size_t(j)] - lse[row]) * v[size_t((bh * c.keys + j) * c.f + size_t(d))];
    }
  return {out, lse};
}

struct Inputs {
  Tensor q, k, v;
};

template <class T>
Inputs inputs(const Case& c, uint64_t seed) {
  return {random_tensor<T>({c.batch, c.heads, c.queries, c.e}, seed),
          random_tensor<T>({c.batch, c.heads, c.keys, c.e}, seed + 1),
          random_tensor<T>({c.batch, c.heads, c.keys, c.f}, seed + 2)};
}

// The values of a Float32 tensor rounded to `format`'s precision (itself for Float32).
Tensor rounded(const Tensor& t, k::GemmInputs format) {
  if (format == k::GemmInputs::Float32) return t;
  Tensor out = Tensor::empty(t.shape(), t.options());
  k::unary(format == k::GemmInputs::BFloat16 ? k::UnaryOp::RoundBFloat16 : k::UnaryOp::RoundFloat16, t, out);
  return out;
}
Inputs rounded(const Inputs& in, k::GemmInputs format) {
  return {rounded(in.q, format), rounded(in.k, format), rounded(in.v, format)};
}
const char* format_name(k::GemmInputs format) {
  return format == k::GemmInputs::BFloat16 ? "bf16" : format == k::GemmInputs::Float16 ? "fp16" : "fp32";
}

// out and lse of the fused forward.
std::pair<Tensor, Tensor> forward(const Inputs& in, bool causal, double scale,
                                  k::GemmInputs inputs = k::GemmInputs::Float32) {
  const Tensor out = Tensor::empty({in.q.size(0), in.q.size(1), in.q.size(2), in.v.size(3)}, in.q.options());
  const Tensor lse = Tensor::empty({in.q.size(0), in.q.size(1), in.q.size(2)}, in.q.options());
  k::attention_fwd(in.q, in.k, in.v, causal, scale, out, lse, inputs);
  return {out, lse};
}

// grad_q, grad_k, grad_v of sum(out * g) through the fused kernels, given the output rounded to
// the inputs' precision as autocast gives it.
std::vector<Tensor> backward(const Inputs& in, const Tensor& g, bool causal, double scale,
                             k::GemmInputs inputs = k::GemmInputs::Float32) {
  const auto [out, lse] = forward(in, causal, scale, inputs);
  std::vector<Tensor> grads{Tensor::empty(in.q.shape(), in.q.options()), Tensor::empty(in.k.shape(), in.k.options()),
                            Tensor::empty(in.v.shape(), in.v.options())};
  k::attention_bwd(g, in.q, in.k, in.v, rounded(out, inputs), lse, causal, scale, grads[0], grads[1], grads[2],
                   inputs);
  return grads;
}

// The same gradients through the math path's autograd, in the inputs' dtype.
std::vector<Tensor> math_backward(const Inputs& in, const Tensor& g, bool causal, double scale) {
  Tensor q = in.q.detach().requires_grad_(), kk = in.k.detach().requires_grad_(), v = in.v.detach().requires_grad_();
  (scaled_dot_product_attention_math(q, kk, v, causal, scale) * g).sum().backward();
  return {q.grad(), kk.grad(), v.grad()};
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// Forward and backward by kernels/attention.h's definitions in float64 (c's operands contiguous,
// |values| small), rounding with `round` where the lower-precision kernels round: the forward's
// exp(s - m) with m the row's max, the backward's p and its unscaled ds, and the output that D
// reads.
struct Gradients {
  std::vector<double> out, grad_q, grad_k, grad_v;
};
Gradients rounding_reference(const Case& c, const std::vector<double>& q, const std::vector<double>& kk,
                             const std::vector<double>& v, const std::vector<double>& g, double scale,
                             const std::function<double(double)>& round) {
  Gradients r{std::vector<double>(v.size() / size_t(c.keys) * size_t(c.queries)), std::vector<double>(q.size()),
              std::vector<double>(kk.size()), std::vector<double>(v.size())};
  for (int64_t bh = 0; bh < c.batch * c.heads; ++bh)
    for (int64_t i = 0; i < c.queries; ++i) {
      const int64_t seen = c.causal ? std::min(i + 1, c.keys) : c.keys;
      const double* qi = q.data() + (bh * c.queries + i) * c.e;
      const double* gi = g.data() + (bh * c.queries + i) * c.f;
      double* out = r.out.data() + (bh * c.queries + i) * c.f;
      std::vector<double> s(size_t(seen), 0.0);
      for (int64_t j = 0; j < seen; ++j)
        for (int64_t d = 0; d < c.e; ++d) s[size_t(j)] += scale * qi[d] * kk[size_t((bh * c.keys + j) * c.e + d)];
      if (seen == 0) continue;
      const double top = *std::max_element(s.begin(), s.end());
      double total = 0;
      for (double x : s) total += std::exp(x - top);
      for (int64_t j = 0; j < seen; ++j)
        for (int64_t d = 0; d < c.f; ++d)
          out[d] += round(std::exp(s[size_t(j)] - top)) * v[size_t((bh * c.keys + j) * c.f + d)] / total;
      const double lse = top + std::log(total);
      double delta = 0;  // D_i
      for (int64_t d = 0; d < c.f; ++d) delta += gi[d] * round(out[d]);
      for (int64_t j = 0; j < seen; ++j) {
        const double* kj = kk.data() + (bh * c.keys + j) * c.e;
        const double* vj = v.data() + (bh * c.keys + j) * c.f;
        const double p = std::exp(s[size_t(j)] - lse);
        double dp = 0;
        for (int64_t d = 0; d < c.f; ++d) dp += gi[d] * vj[d];
        const double ds = round(p * (dp - delta));
        for (int64_t d = 0; d < c.f; ++d) r.grad_v[size_t((bh * c.keys + j) * c.f + d)] += round(p) * gi[d];
        for (int64_t d = 0; d < c.e; ++d) {
          r.grad_q[size_t((bh * c.queries + i) * c.e + d)] += scale * ds * kj[d];
          r.grad_k[size_t((bh * c.keys + j) * c.e + d)] += scale * ds * qi[d];
        }
      }
    }
  return r;
}

double norm_of_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(sum);
}

// Row blocks of 64 queries on the CPU: 130 queries take three, the last of 2 rows.
const std::vector<Case> kCases{{2, 3, 5, 5, 4, 3, false},  {2, 3, 5, 5, 4, 3, true},   {1, 2, 130, 130, 8, 8, true},
                               {1, 2, 130, 70, 8, 5, false}, {1, 1, 9, 4, 5, 6, true}, {1, 1, 3, 9, 2, 2, true},
                               {2, 1, 1, 1, 1, 1, true}};

}  // namespace

TEST_CASE("attention_fwd: out and lse match the definition, causal or not, across row blocks", "[kernels][attention]") {
  for (const Case& c : kCases) {
    INFO("B " << c.batch << " H " << c.heads << " L " << c.queries << " S " << c.keys << " E " << c.e << " F " << c.f
              << " causal " << c.causal);
    const Inputs in = inputs<double>(c, 40);
    const double scale = 1.0 / std::sqrt(double(c.e));
    const auto [out, lse] = forward(in, c.causal, scale);
    const auto [want_out, want_lse] = reference(c, read<double>(in.q), read<double>(in.k), read<double>(in.v), scale);
    require_close(out, want_out, 1e-12, 1e-13);
    require_close(lse, want_lse, 1e-12, 1e-13);
  }
}

TEST_CASE("attention_bwd: the gradients of the math path, causal or not, across row blocks", "[kernels][attention]") {
  for (const Case& c : kCases) {
    INFO("B " << c.batch << " H " << c.heads << " L " << c.queries << " S " << c.keys << " causal " << c.causal);
    const Inputs in = inputs<double>(c, 41);
    const Tensor g = random_tensor<double>({c.batch, c.heads, c.queries, c.f}, 44);
    const std::vector<Tensor> got = backward(in, g, c.causal, 0.7), want = math_backward(in, g, c.causal, 0.7);
    for (size_t i = 0; i < 3; ++i) {
      INFO("gradient " << "qkv"[i]);
      require_close(got[i], values(want[i]), 1e-11, 1e-12);
    }
  }
}

TEST_CASE("attention: float32 within a derived bound of float64", "[kernels][attention]") {
  // |q|, |k|, |v|, |g| <= 1. The forward: a score's dot product of E terms errs by at most
  // E u scale E (u = 2^-24); p = exp(s - lse) then errs relatively by at most twice that plus
  // (S + 3) u (the exp, the division, the sum of S terms), and out_i = sum_j p_ij v_j adds S u
  // (sum p = 1): |err| <= 2 E^2 u scale + (2 S + 3) u.
  // The backward's sums carry the same relative error of p over at most max(L, S) terms of
  // magnitude up to E (|dp - D| <= 2 F): bounded, with the same reasoning, by that times 4 F max(L, S).
  const double u = std::ldexp(1.0, -24);
  for (const Case& c : {Case{1, 2, 130, 130, 16, 16, true}, Case{2, 1, 40, 70, 16, 8, false}}) {
    INFO("L " << c.queries << " S " << c.keys << " causal " << c.causal);
    const Inputs in32 = inputs<float>(c, 45), in64 = inputs<double>(c, 45);
    const double scale = 1.0 / std::sqrt(double(c.e));
    const double forward_bound = 2 * double(c.e * c.e) * u * scale + double(2 * c.keys + 3) * u;
    CHECK(max_abs_diff(values(forward(in32, c.causal, scale).first), values(forward(in64, c.causal, scale).first)) <=
          forward_bound);
    const Tensor g32 = random_tensor<float>({c.batch, c.heads, c.queries, c.f}, 46);
    const Tensor g64 = random_tensor<double>({c.batch, c.heads, c.queries, c.f}, 46);
    const std::vector<Tensor> got = backward(in32, g32, c.causal, scale), want = backward(in64, g64, c.causal, scale);
    const double backward_bound = forward_bound * 4 * double(c.f * std::max(c.queries, c.keys));
    for (size_t i = 0; i < 3; ++i) {
      INFO("gradient " << "qkv"[i]);
      CHECK(max_abs_diff(values(got[i]), values(want[i])) <= backward_bound);
    }
  }
}

TEST_CASE("attention with bf16 or fp16 inputs rounds the probabilities and dS where a bf16 kernel does",
          "[kernels][attention]") {
  // Rounding is the error the lower precision brings: float64 with and without it (the reference)
  // are apart by about u, one rounding of each term (u = 2^-8 for bf16, 2^-11 for fp16). What the
  // kernels add to the rounded reference is float32's error and, where float32 and float64 values
  // of a term fall on either side of a rounding midpoint, one step of the precision for that term:
  // rare (float32 errs by ~2^-24 relative, a step is 2^-7 or 2^-10), so over all the outputs the
  // kernels stay far closer to the rounded reference than the unrounded one is. Rounding elsewhere
  // (p normalised first, ds after scaling) or not at all is as far as the unrounded one, and fails.
  for (k::GemmInputs format : {k::GemmInputs::BFloat16, k::GemmInputs::Float16}) {
    const auto round = [format](double x) {
      return format == k::GemmInputs::BFloat16 ? double(k::RoundBFloat16Op{}(float(x)))
                                                : double(k::RoundFloat16Op{}(float(x)));
    };
    // E = 12: the scale 1/sqrt(12) is no power of two, so rounding ds before or after scaling differs.
    for (const Case& c : {Case{1, 2, 130, 130, 12, 16, true}, Case{2, 1, 40, 70, 12, 8, false}}) {
      INFO(format_name(format) << " L " << c.queries << " S " << c.keys << " causal " << c.causal);
      const Inputs in = rounded(inputs<float>(c, 52), format);
      const Tensor g = rounded(random_tensor<float>({c.batch, c.heads, c.queries, c.f}, 53), format);
      const double scale = 1.0 / std::sqrt(double(c.e));
      const std::vector<double> q = values(in.q), kk = values(in.k), v = values(in.v), gv = values(g);
      const Gradients want = rounding_reference(c, q, kk, v, gv, scale, round);
      const Gradients exact = rounding_reference(c, q, kk, v, gv, scale, [](double x) { return x; });
      std::vector<Tensor> got = backward(in, g, c.causal, scale, format);
      got.insert(got.begin(), forward(in, c.causal, scale, format).first);
      const std::vector<const std::vector<double>*> wanted{&want.out, &want.grad_q, &want.grad_k, &want.grad_v},
          unrounded{&exact.out, &exact.grad_q, &exact.grad_k, &exact.grad_v};
      for (size_t i = 0; i < got.size(); ++i) {
        const char* names[] = {"out", "grad_q", "grad_k", "grad_v"};
        INFO(names[i]);
        const std::vector<double> ours = values(got[i]);
        const double rounding = norm_of_difference(*unrounded[i], *wanted[i]);
        REQUIRE(rounding > 0);
        CHECK(norm_of_difference(ours, *wanted[i]) <= rounding / 4);
      }
    }
  }
}

TEST_CASE("attention kernels: one head gives the same bits alone, among others, and for any thread budget",
          "[kernels][attention]") {
  const Case c{3, 2, 130, 130, 16, 16, true};
  for (k::GemmInputs format : {k::GemmInputs::Float32, k::GemmInputs::BFloat16, k::GemmInputs::Float16}) {
    INFO(format_name(format));
    const Inputs in = rounded(inputs<float>(c, 47), format);
    const Tensor g = rounded(random_tensor<float>({c.batch, c.heads, c.queries, c.f}, 48), format);
    auto run = [&](const Inputs& x, const Tensor& grad, int devices) {
      CpuDevicesGuard guard(devices);
      std::vector<Tensor> outs = backward(x, grad, true, 0.25, format);
      outs.push_back(forward(x, true, 0.25, format).first);
      return outs;
    };
    const std::vector<Tensor> all = run(in, g, 1), few_threads = run(in, g, 8);
    // (batch 2, head 1) alone, as a (1, 1, ...) problem.
    auto head = [](const Tensor& t) {
      return t.as_strided({1, 1, t.size(2), t.size(3)}, t.strides(), t.offset() + 2 * t.strides()[0] + t.strides()[1])
          .contiguous();
    };
    const std::vector<Tensor> alone = run({head(in.q), head(in.k), head(in.v)}, head(g), 1);
    for (size_t i = 0; i < all.size(); ++i) {
      INFO("output " << i);
      REQUIRE(read<float>(few_threads[i]) == read<float>(all[i]));
      REQUIRE(read<float>(alone[i]) == read<float>(head(all[i])));
    }
  }
}

TEST_CASE("attention kernels take strided heads and handle no keys and no query width", "[kernels][attention]") {
  // (B, H, T, D) as a transformer's heads: a transpose of (B, T, H, D), row stride H D.
  const Tensor x = random_tensor<double>({2, 7, 3, 4}, 49);
  const Tensor heads = x.transpose(1, 2), packed = heads.contiguous();
  const auto [out, lse] = forward({heads, heads, heads}, true, 0.5);
  const auto [want, want_lse] = forward({packed, packed, packed}, true, 0.5);
  REQUIRE(read<double>(out) == read<double>(want));
  REQUIRE(read<double>(lse) == read<double>(want_lse));
  // S = 0: out 0, lse -inf, no gradients of q; E = 0: every score 0, a plain average of v.
  const Inputs none{random_tensor<double>({1, 1, 3, 2}, 50), Tensor::empty({1, 1, 0, 2}, {DType::Float64}),
                    Tensor::empty({1, 1, 0, 4}, {DType::Float64})};
  const auto [empty_out, empty_lse] = forward(none, false, 1.0);
  CHECK(values(empty_out) == std::vector<double>(12, 0.0));
  CHECK(values(empty_lse) == std::vector<double>(3, -std::numeric_limits<double>::infinity()));
  CHECK(values(backward(none, random_tensor<double>({1, 1, 3, 4}, 51), false, 1.0)[0]) == std::vector<double>(6, 0.0));
  const Inputs flat{Tensor::empty({1, 1, 2, 0}, {DType::Float64}), Tensor::empty({1, 1, 3, 0}, {DType::Float64}),
                    from_vector<double>({1, 1, 3, 1}, {3, 6, 9})};
  CHECK(values(forward(flat, false, 1.0).first) == std::vector<double>{6, 6});
  CHECK(values(forward(flat, true, 1.0).first) == std::vector<double>{3, 4.5});
}

TEST_CASE("attention kernels: mismatched operands are errors naming them", "[kernels][attention]") {
  const Tensor q = zeros({1, 2, 4, 3}), kk = zeros({1, 2, 5, 3}), v = zeros({1, 2, 5, 2});
  const Tensor out = zeros({1, 2, 4, 2}), lse = zeros({1, 2, 4});
  require_error([&] { k::attention_fwd(q, zeros({1, 2, 5, 4}), v, false, 1.0, out, lse); }, {"k must be", "[1, 2, 5, 4]"});
  require_error([&] { k::attention_fwd(q, kk, v, false, 1.0, zeros({1, 2, 4, 3}), lse); }, {"out must be", "[1, 2, 4, 3]"});
  require_error([&] { k::attention_fwd(q, kk, v, false, 1.0, out, zeros({1, 2, 5})); }, {"lse must be", "[1, 2, 4]"});
  require_error([&] { k::attention_fwd(q, kk.to(DType::Float64), v, false, 1.0, out, lse); }, {"k must be", "Float64"});
  const auto as_double = [](const Tensor& t) { return t.to(DType::Float64); };
  require_error([&] {
    k::attention_fwd(as_double(q), as_double(kk), as_double(v), false, 1.0, as_double(out), as_double(lse),
                     k::GemmInputs::BFloat16);
  }, {"bf16 or fp16 values come in Float32 tensors", "Float64"});
  require_error([&] { k::attention_fwd(q, zeros({1, 2, 3, 5}).transpose(2, 3), v, false, 1.0, out, lse); },
                {"unit stride", "k"});
  CpuDevicesGuard devices(2);
  require_error([&] { k::attention_fwd(q, kk, v.to(Device("cpu:1")), false, 1.0, out, lse); },
                {"attention_fwd", "cpu:0", "cpu:1"});
}

// scaled_dot_product_attention (autograd/attention_ops.cpp) against a loop over every query,
// causal and not, with as many or more queries than keys and a given scale; float64 gradcheck of
// query, key and value; argument errors.
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

// out[b, i, :] = sum_j p[b, i, j] v[b, j, :], p = softmax_j(q[b, i] . k[b, j] * scale), over the
// keys j that query i may see (j <= i when causal). q (B, L, E), k (B, S, E), v (B, S, F).
std::vector<double> reference_attention(const std::vector<double>& q, const std::vector<double>& k,
                                        const std::vector<double>& v, int64_t batch, int64_t length, int64_t keys,
                                        int64_t e, int64_t f, bool causal, double scale) {
  std::vector<double> out(size_t(batch * length * f), 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < length; ++i) {
      const int64_t seen = causal ? std::min(i + 1, keys) : keys;
      std::vector<double> p(static_cast<size_t>(seen));
      double top = -std::numeric_limits<double>::infinity(), total = 0;
      for (int64_t j = 0; j < seen; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < e; ++c) dot += q[size_t((b * length + i) * e + c)] * k[size_t((b * keys + j) * e + c)];
        p[size_t(j)] = dot * scale;
        top = std::max(top, p[size_t(j)]);
      }
      for (double& x : p) total += (x = std::exp(x - top));
      for (int64_t j = 0; j < seen; ++j)
        for (int64_t c = 0; c < f; ++c)
          out[size_t((b * length + i) * f + c)] += p[size_t(j)] / total * v[size_t((b * keys + j) * f + c)];
    }
  return out;
}

Tensor f64(const std::vector<double>& v, const Shape& shape, bool requires_grad = false) {
  return tensor(v, shape, {.dtype = DType::Float64, .requires_grad = requires_grad});
}

}  // namespace

TEST_CASE("scaled_dot_product_attention matches a loop over queries, causal or not", "[autograd][attention]") {
  struct Case {
    int64_t batch, length, keys, e, f;
    bool causal;
    std::optional<double> scale;
  };
  for (const Case& c : {Case{2, 5, 5, 4, 3, false, {}}, Case{2, 5, 5, 4, 3, true, {}}, Case{1, 7, 3, 2, 5, true, {}},
                        Case{3, 2, 6, 3, 3, false, 0.3}, Case{1, 1, 1, 1, 1, true, {}}}) {
    INFO("B " << c.batch << ", L " << c.length << ", S " << c.keys << ", causal " << c.causal);
    const auto q = pseudo_random(size_t(c.batch * c.length * c.e), 60);
    const auto k = pseudo_random(size_t(c.batch * c.keys * c.e), 61);
    const auto v = pseudo_random(size_t(c.batch * c.keys * c.f), 62);
    const Tensor out = scaled_dot_product_attention(f64(q, {c.batch, c.length, c.e}), f64(k, {c.batch, c.keys, c.e}),
                                                    f64(v, {c.batch, c.keys, c.f}), c.causal, c.scale);
    CHECK(out.shape() == Shape{c.batch, c.length, c.f});
    const double scale = c.scale ? *c.scale : 1.0 / std::sqrt(double(c.e));
    require_close(out, reference_attention(q, k, v, c.batch, c.length, c.keys, c.e, c.f, c.causal, scale), 1e-12,
                  1e-14);
  }
}

TEST_CASE("scaled_dot_product_attention takes heads as batch dims and strided views", "[autograd][attention]") {
  // (B, H, T, D) from a (B, T, H, D) tensor by transpose, as a transformer's heads are.
  const int64_t b = 2, t = 4, h = 3, d = 2;
  const Tensor x = f64(pseudo_random(size_t(b * t * h * d), 63), {b, t, h, d});
  const Tensor heads = transpose(x, 1, 2);
  const Tensor out = scaled_dot_product_attention(heads, heads, heads, true);
  const Tensor want = scaled_dot_product_attention(heads.contiguous(), heads.contiguous(), heads.contiguous(), true);
  CHECK(out.shape() == Shape{b, h, t, d});
  require_close(out, values(want), 0, 0);
}

TEST_CASE("scaled_dot_product_attention: gradcheck of query, key and value", "[autograd][attention]") {
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    const Tensor q = f64(pseudo_random(2 * 4 * 3, 64), {2, 4, 3}, true);
    const Tensor k = f64(pseudo_random(2 * 4 * 3, 65), {2, 4, 3}, true);
    const Tensor v = f64(pseudo_random(2 * 4 * 2, 66), {2, 4, 2}, true);
    CHECK(gradcheck([causal](const TensorList& in) { return scaled_dot_product_attention(in[0], in[1], in[2], causal); },
                    {q, k, v}));
  }
}

TEST_CASE("scaled_dot_product_attention: mismatched arguments are errors naming the shapes", "[autograd][attention]") {
  const Tensor q = zeros({2, 4, 3}), k = zeros({2, 5, 3}), v = zeros({2, 5, 2});
  require_error([&] { scaled_dot_product_attention(q, zeros({2, 5, 2}), v); }, {"widths differ", "[2, 4, 3]", "[2, 5, 2]"});
  require_error([&] { scaled_dot_product_attention(q, k, zeros({2, 4, 2})); }, {"lengths differ", "[2, 5, 3]", "[2, 4, 2]"});
  require_error([&] { scaled_dot_product_attention(q, zeros({3, 5, 3}), v); }, {"batch dims differ", "[3, 5, 3]"});
  require_error([&] { scaled_dot_product_attention(q, zeros({5, 3}), zeros({5, 2})); }, {"number of dims", "[5, 3]"});
  require_error([&] { scaled_dot_product_attention(q, k.to(DType::Float64), v); }, {"floating dtype", "Float64"});
}

TEST_CASE("scaled_dot_product_attention: the fused kernels give the math path's values and gradients",
          "[autograd][attention]") {
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    // (B, H, T, D) heads, 70 queries: two of the CPU kernel's row blocks.
    TensorList fused_in, math_in;
    for (uint64_t seed : {67, 68, 69}) {
      const Tensor t = f64(pseudo_random(2 * 3 * 70 * 8, seed), {2, 70, 3, 8}).transpose(1, 2);
      fused_in.push_back(t.detach().requires_grad_());
      math_in.push_back(t.detach().requires_grad_());
    }
    const Tensor weights = f64(pseudo_random(2 * 3 * 70 * 8, 70), {2, 3, 70, 8});
    const Tensor fused = scaled_dot_product_attention(fused_in[0], fused_in[1], fused_in[2], causal);
    const Tensor math = scaled_dot_product_attention_math(math_in[0], math_in[1], math_in[2], causal);
    require_close(fused, values(math), 1e-12, 1e-14);
    // The output is stored as (B, T, H, D), so merging the heads back is a view.
    CHECK(transpose(fused, 1, 2).is_contiguous());
    (fused * weights).sum().backward();
    (math * weights).sum().backward();
    for (size_t i = 0; i < 3; ++i) {
      INFO("input " << i);
      require_close(fused_in[i].grad(), values(math_in[i].grad()), 1e-11, 1e-13);
    }
  }
}

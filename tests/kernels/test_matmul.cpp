// Batched matmul (kernels/cpu/matmul.cpp) against a naive triple loop: every NoTrans / Trans
// combination, layouts that force a copy, broadcast batches, float32, float64, int64, K = 0; and
// bf16 operands (GemmInputs::BFloat16, kernels/cpu/matmul_bf16.h) against the exact products.
#include <array>
#include <cmath>

#include "multigrad/kernels/cpu/matmul_bf16.h"
#include "multigrad/kernels/kernels.h"
#include "core/cpu_devices_guard.h"
#include "kernels/kernel_test_util.h"

using namespace mg;
using namespace mg::test;
namespace k = mg::kernels;

namespace {

// out[b][i][j] = sum_p a[b][i][p] * b[b][p][j], read through the operands' strides (with `abs`,
// sum_p |a[b][i][p] * b[b][p][j]|: the scale of a float32 sum's rounding error).
template <class T>
std::vector<double> naive_matmul(const Tensor& a, const Tensor& b, bool abs = false) {
  const std::vector<T> av = read<T>(a), bv = read<T>(b);
  const int64_t batches = a.size(0), m = a.size(1), kk = a.size(2), n = b.size(2);
  std::vector<double> out(size_t(batches * m * n), 0.0);
  for (int64_t z = 0; z < batches; ++z)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < kk; ++p) {
          const double term = double(av[size_t((z * m + i) * kk + p)]) * double(bv[size_t((z * kk + p) * n + j)]);
          s += abs ? std::fabs(term) : term;
        }
        out[size_t((z * m + i) * n + j)] = s;
      }
  return out;
}

template <class T>
std::vector<double> run(const Tensor& a, const Tensor& b, k::GemmInputs inputs = k::GemmInputs::Float32) {
  Tensor out = Tensor::empty({a.size(0), a.size(1), b.size(2)}, {.dtype = dtype_v<T>});
  k::batched_matmul(a, b, out, inputs);
  return to_doubles(read<T>(out));
}

// A (B, rows, cols) operand, either row-major or stored transposed (row stride 1).
template <class T>
Tensor operand(int64_t batches, int64_t rows, int64_t cols, bool trans, uint64_t seed) {
  if (!trans) return random_tensor<T>({batches, rows, cols}, seed);
  Tensor base = random_tensor<T>({batches, cols, rows}, seed);
  return base.as_strided({batches, rows, cols}, {rows * cols, 1, rows}, 0);
}

// t with every element rounded to bfloat16 in place (autocast's operands hold such values).
Tensor bf16_valued(Tensor t) {
  k::unary(k::UnaryOp::RoundBFloat16, t, t);
  return t;
}

// A bf16 GEMM's error bound: each product of two bf16 values is exact in float32 (8 + 8
// significant bits of 24), and a float32 sum of K terms in any order is within
// gamma_K = K u / (1 - K u) (u = 2^-24) of the exact sum, relative to the sum of the terms'
// magnitudes (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., section 3.1). The
// float64 reference's own sum adds its gamma_K with u = 2^-53.
void require_within_float32_sum_bound(const std::vector<double>& got, const Tensor& a, const Tensor& b) {
  const std::vector<double> exact = naive_matmul<float>(a, b), magnitude = naive_matmul<float>(a, b, true);
  const double kk = double(a.size(2));
  const auto gamma_k = [kk](double u) { return kk * u / (1 - kk * u); };
  const double gamma = gamma_k(std::ldexp(1.0, -24)) + gamma_k(std::ldexp(1.0, -53));
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": " << got[i] << " against " << exact[i]);
    REQUIRE(std::fabs(got[i] - exact[i]) <= gamma * magnitude[i]);
  }
}

}  // namespace

TEST_CASE("float32 matmul, every NoTrans/Trans combination, odd sizes", "[kernels]") {
  for (auto [m, kk, n] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {7, 33, 5}, {65, 17, 129}, {1, 40, 1}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        Tensor a = operand<float>(3, m, kk, ta, 1), b = operand<float>(3, kk, n, tb, 2);
        INFO("m=" << m << " k=" << kk << " n=" << n << " ta=" << ta << " tb=" << tb);
        require_close(run<float>(a, b), naive_matmul<float>(a, b), 1e-5, 1e-5);
      }
    }
  }
}

TEST_CASE("bf16-valued matmul: every layout, vectors, blocks and broadcast batches, within a float32 sum's bound",
          "[kernels]") {
  // Where this CPU has no bf16 GEMM the same values go through the float32 GEMM: the same bits.
  const std::vector<std::array<int64_t, 3>> shapes{{1, 1, 1}, {7, 33, 5}, {65, 17, 129}, {1, 40, 1}, {200, 64, 100}};
  for (bool deterministic : {false, true}) {
    DeterministicScope scope(deterministic);
    for (auto [m, kk, n] : shapes) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          INFO("m=" << m << " k=" << kk << " n=" << n << " ta=" << ta << " tb=" << tb << " det=" << deterministic);
          const Tensor a = bf16_valued(operand<float>(3, m, kk, ta, 1));
          const Tensor b = bf16_valued(operand<float>(3, kk, n, tb, 2));
          const std::vector<double> got = run<float>(a, b, k::GemmInputs::BFloat16);
          require_within_float32_sum_bound(got, a, b);
          if (!k::cpu::runs_bf16_gemm()) REQUIRE(got == run<float>(a, b));
        }
      }
    }
  }
  const Tensor shared = bf16_valued(random_tensor<float>({1, 12, 7}, 3)).as_strided({5, 12, 7}, {0, 7, 1}, 0);
  const Tensor a = bf16_valued(operand<float>(5, 8, 12, false, 4));
  require_within_float32_sum_bound(run<float>(a, shared, k::GemmInputs::BFloat16), a, shared);
  const Tensor wide = bf16_valued(random_tensor<float>({2, 13, 40}, 5));
  const Tensor every_second = wide.as_strided({2, 13, 20}, {13 * 40, 40, 2}, 1);  // copied before conversion
  const Tensor b = bf16_valued(operand<float>(2, 20, 9, true, 6));
  require_within_float32_sum_bound(run<float>(every_second, b, k::GemmInputs::BFloat16), every_second, b);
}

TEST_CASE("bf16-valued matmul gives the same bits for any CPU thread budget in deterministic mode", "[kernels]") {
  DeterministicScope deterministic(true);
  const Tensor a = bf16_valued(operand<float>(2, 300, 96, true, 7));
  const Tensor b = bf16_valued(operand<float>(2, 96, 130, false, 8));
  auto run_on = [&](int devices) {
    CpuDevicesGuard guard(devices);
    return run<float>(a, b, k::GemmInputs::BFloat16);
  };
  REQUIRE(run_on(1) == run_on(8));
}

TEST_CASE("float64 matmul with transposed operands", "[kernels]") {
  Tensor a = operand<double>(2, 31, 45, true, 3), b = operand<double>(2, 45, 23, false, 4);
  require_close(run<double>(a, b), naive_matmul<double>(a, b), 1e-12, 1e-12);
  Tensor c = operand<double>(2, 31, 45, false, 5), d = operand<double>(2, 45, 23, true, 6);
  require_close(run<double>(c, d), naive_matmul<double>(c, d), 1e-12, 1e-12);
}

TEST_CASE("matmul reads row-padded operands through their leading dimension", "[kernels]") {
  // a (1, 9, 11) with row stride 14 and an offset: NoTrans with lda = 14, no copy needed.
  Tensor base = random_tensor<float>({1 * 9 * 14 + 2}, 7);
  Tensor a = base.as_strided({1, 9, 11}, {9 * 14, 14, 1}, 2);
  Tensor b = operand<float>(1, 11, 6, false, 8);
  require_close(run<float>(a, b), naive_matmul<float>(a, b), 1e-5, 1e-5);
}

TEST_CASE("matmul copies operands BLAS cannot read", "[kernels]") {
  // Every second column of a wider matrix: neither inner nor row stride is 1.
  Tensor base = random_tensor<float>({2, 13, 40}, 9);
  Tensor a = base.as_strided({2, 13, 20}, {13 * 40, 40, 2}, 1);
  Tensor b_base = random_tensor<double>({2, 20, 30}, 10);
  Tensor b64 = b_base.as_strided({2, 20, 15}, {600, 30, 2}, 0);
  Tensor b = random_tensor<float>({2, 20, 15}, 11);
  require_close(run<float>(a, b), naive_matmul<float>(a, b), 1e-5, 1e-5);
  Tensor a64 = random_tensor<double>({2, 13, 20}, 12);
  require_close(run<double>(a64, b64), naive_matmul<double>(a64, b64), 1e-12, 1e-12);
}

TEST_CASE("matmul with a broadcast batch (batch stride 0)", "[kernels]") {
  // One weight matrix shared by 5 batches, and a strided-copy operand shared as well.
  Tensor a = operand<float>(5, 8, 12, false, 13);
  Tensor w = random_tensor<float>({1, 12, 7}, 14).as_strided({5, 12, 7}, {0, 7, 1}, 0);
  require_close(run<float>(a, w), naive_matmul<float>(a, w), 1e-5, 1e-5);
  Tensor wide = random_tensor<float>({12, 14}, 15);
  Tensor w_strided = wide.as_strided({5, 12, 7}, {0, 14, 2}, 0);
  require_close(run<float>(a, w_strided), naive_matmul<float>(a, w_strided), 1e-5, 1e-5);
  Tensor shared_a = random_tensor<float>({1, 8, 12}, 16).as_strided({5, 8, 12}, {0, 12, 1}, 0);
  Tensor b = operand<float>(5, 12, 7, true, 17);
  require_close(run<float>(shared_a, b), naive_matmul<float>(shared_a, b), 1e-5, 1e-5);
}

TEST_CASE("int64 matmul is exact, strided operands included", "[kernels]") {
  Tensor a = from_vector<int64_t>({2, 3, 4}, random_values<int64_t>(24, 18, 100));
  Tensor b = operand<int64_t>(2, 4, 5, true, 19);
  REQUIRE(run<int64_t>(a, b) == naive_matmul<int64_t>(a, b));
  // Large enough to split rows across threads.
  Tensor big_a = from_vector<int64_t>({1, 300, 64}, random_values<int64_t>(300 * 64, 20, 1000));
  Tensor big_b = from_vector<int64_t>({1, 64, 50}, random_values<int64_t>(64 * 50, 21, 1000));
  REQUIRE(run<int64_t>(big_a, big_b) == naive_matmul<int64_t>(big_a, big_b));
}

TEST_CASE("matmul with K = 0 gives zeros, and M = 0 or N = 0 gives an empty result", "[kernels]") {
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int64}) {
    Tensor a = Tensor::empty({2, 3, 0}, {.dtype = dtype}), b = Tensor::empty({2, 0, 4}, {.dtype = dtype});
    Tensor out = Tensor::empty({2, 3, 4}, {.dtype = dtype});
    k::fill(out, 7);
    k::batched_matmul(a, b, out);
    MG_DISPATCH_ARITH(dtype, "test", [&] {
      for (scalar_t v : read<scalar_t>(out)) REQUIRE(v == scalar_t(0));
    });
  }
  k::batched_matmul(Tensor::empty({1, 0, 3}), Tensor::empty({1, 3, 2}), Tensor::empty({1, 0, 2}));
  k::batched_matmul(Tensor::empty({1, 2, 3}), Tensor::empty({1, 3, 0}), Tensor::empty({1, 2, 0}));
}

TEST_CASE("matmul rejects mismatched shapes, dtypes and strided outputs", "[kernels]") {
  require_error([] { k::batched_matmul(Tensor::empty({1, 2, 3}), Tensor::empty({1, 2, 3}), Tensor::empty({1, 2, 3})); },
                {"matmul", "[1, 2, 3]"});
  require_error([] {
    k::batched_matmul(Tensor::empty({1, 2, 3}), Tensor::empty({1, 3, 2}, {.dtype = DType::Float64}),
                      Tensor::empty({1, 2, 2}));
  }, {"matmul", "Float32", "Float64"});
  Tensor out = Tensor::empty({1, 2, 4}).as_strided({1, 2, 2}, {8, 4, 1}, 0);
  require_error([&] { k::batched_matmul(Tensor::empty({1, 2, 3}), Tensor::empty({1, 3, 2}), out); },
                {"matmul", "contiguous"});
  Tensor bf = Tensor::empty({1, 2, 2}, {.dtype = DType::BFloat16});
  require_error([&] { k::batched_matmul(bf, bf, bf); }, {"matmul", "BFloat16"});
}

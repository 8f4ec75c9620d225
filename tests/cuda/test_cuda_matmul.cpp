// tests/cuda/test_cuda_matmul.cpp — kernels/cuda/matmul.cu (cuBLAS) and sgemm_native.cu
// (MG_GEMM=native) against the CPU's BLAS; bf16- and fp16-valued operands (GemmInputs::BFloat16,
// Float16: cuBLAS's 16-bit GEMMs) against the exact product.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "multigrad/kernels/kernels.h"

using namespace mg;
using namespace mg::test;

namespace {

// Every product runs through both CUDA GEMMs; MG_GEMM is read at each call.
const std::vector<std::string>& gemm_backends() {
  static const std::vector<std::string> backends{"cublas", "native"};
  return backends;
}

// The three GEMMs sum over k in different orders, so an element is compared against
// sum_k |a_ik| |b_kj| (the product of the magnitudes), which bounds the rounding of any order:
// |got - want| <= tol * (|a| @ |b|).
void check_matmul(const Op& product, const Tensor& a, const Tensor& b, double tol = 1e-5) {
  for (const std::string& backend : gemm_backends()) {
    INFO("MG_GEMM=" << backend);
    ScopedEnv env("MG_GEMM", backend.c_str());
    Tensor want = product({a, b});
    Tensor got = product({a.to(gpu()), b.to(gpu())});
    Tensor magnitude = product({abs(a), abs(b)});
    REQUIRE(got.device() == gpu());
    REQUIRE(got.shape() == want.shape());
    REQUIRE(got.dtype() == want.dtype());
    std::vector<double> g = values(got), w = values(want), m = values(magnitude);
    size_t bad = 0;
    std::ostringstream first;
    for (size_t i = 0; i < w.size(); ++i)
      if (!(std::abs(g[i] - w[i]) <= tol * m[i] + 1e-12) && bad++ == 0)
        first << "index " << i << ": got " << g[i] << ", want " << w[i];
    INFO(bad << " of " << w.size() << " differ; first: " << first.str());
    REQUIRE(bad == 0);
  }
}

Tensor mm(const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }

}  // namespace

TEST_CASE("cuda: 2-d matmul at odd sizes, cuBLAS and native", "[cuda]") {
  struct Size { int64_t m, k, n; };
  for (Size s : {Size{1, 1, 1}, Size{7, 13, 5}, Size{128, 128, 128}, Size{129, 65, 257}, Size{300, 1023, 3},
                 Size{3, 8, 1025}}) {
    INFO(s.m << " x " << s.k << " @ " << s.k << " x " << s.n);
    check_matmul(mm, cpu_input({s.m, s.k}, DType::Float32, 60), cpu_input({s.k, s.n}, DType::Float32, 61));
  }
}

TEST_CASE("cuda: matmul spanning many tiles in every direction", "[cuda]") {
  check_matmul(mm, cpu_input({515, 388}, DType::Float32, 62), cpu_input({388, 644}, DType::Float32, 63));
}

TEST_CASE("cuda: matmul of transposed and strided operands", "[cuda]") {
  Tensor a = cpu_input({37, 70}, DType::Float32, 64), b = cpu_input({53, 37}, DType::Float32, 65);
  // a^T (70, 37) @ b^T (37, 53): both operands column-major, passed to cuBLAS as OP_T.
  check_matmul([](const auto& in) { return matmul(in[0].transpose(0, 1), in[1].transpose(0, 1)); }, a, b);
  // Column slices: row-major with a leading dimension larger than the width, and (for the
  // native kernel) not 16-byte aligned, which takes its scalar-load path.
  Tensor c = cpu_input({41, 70}, DType::Float32, 66), d = cpu_input({70, 90}, DType::Float32, 67);
  check_matmul([](const auto& in) { return matmul(in[0].slice(1, 1, 70), in[1].slice(0, 1, 70).slice(1, 3, 88)); }, c,
               d);
  // Every other column: neither layout BLAS can read, so a contiguous copy is made first.
  check_matmul([](const auto& in) { return matmul(in[0].slice(1, 0, 70, 2), in[1].slice(0, 0, 70, 2)); }, c, d);
}

TEST_CASE("cuda: batched matmul with broadcast batch dims", "[cuda]") {
  Tensor a = cpu_input({4, 33, 20}, DType::Float32, 68), w = cpu_input({20, 17}, DType::Float32, 69);
  check_matmul(mm, a, w);  // (4, 33, 20) @ (20, 17): w is read with batch stride 0
  Tensor p = cpu_input({3, 1, 9, 12}, DType::Float32, 70), q = cpu_input({2, 12, 8}, DType::Float32, 71);
  check_matmul(mm, p, q);  // -> (3, 2, 9, 8)
  check_matmul([](const auto& in) { return matmul(in[0].transpose(-1, -2), in[1]); },
               cpu_input({5, 16, 6}, DType::Float32, 72), cpu_input({5, 16, 10}, DType::Float32, 73));
}

TEST_CASE("cuda: matmul of 1-d operands", "[cuda]") {
  Tensor v = cpu_input({300}, DType::Float32, 74), u = cpu_input({300}, DType::Float32, 75);
  Tensor m = cpu_input({300, 7}, DType::Float32, 76), n = cpu_input({9, 300}, DType::Float32, 77);
  check_matmul(mm, v, u);  // dot
  check_matmul(mm, v, m);  // vector @ matrix
  check_matmul(mm, n, v);  // matrix @ vector
}

TEST_CASE("cuda: float64 matmul (native falls back to cuBLAS)", "[cuda]") {
  check_matmul(mm, cpu_input({65, 130}, DType::Float64, 78), cpu_input({130, 31}, DType::Float64, 79), 1e-13);
  check_matmul([](const auto& in) { return matmul(in[0], in[1].transpose(0, 1)); },
               cpu_input({6, 40}, DType::Float64, 80), cpu_input({11, 40}, DType::Float64, 81), 1e-13);
}

TEST_CASE("cuda: matmul with empty dims", "[cuda]") {
  // K = 0 is an empty sum: zeros, whatever the GEMM would skip.
  check_matmul(mm, cpu_input({5, 0}, DType::Float32, 82), cpu_input({0, 4}, DType::Float32, 83));
  check_matmul(mm, cpu_input({0, 6}, DType::Float32, 84), cpu_input({6, 4}, DType::Float32, 85));
  check_matmul(mm, cpu_input({0, 5, 6}, DType::Float32, 86), cpu_input({6, 4}, DType::Float32, 87));
}

TEST_CASE("cuda: Int64 matmul is a clear error", "[cuda]") {
  Tensor a = cpu_input({2, 3}, DType::Int64, 88).to(gpu()), b = cpu_input({3, 2}, DType::Int64, 89).to(gpu());
  require_error([&] { matmul(a, b); }, {"matmul", "Int64", "CUDA"});
}

TEST_CASE("cuda: bf16- and fp16-valued matmul (GemmInputs::BFloat16, Float16) is within a float32 sum's bound of the "
          "exact product", "[cuda]") {
  // Both operand layouts, a broadcast batch, a vector; the operands rounded to bf16 or fp16 first,
  // as autocast does. Products of two bf16 (8-bit significands) or two fp16 (11-bit) values are
  // exact in float32, so cuBLAS's float32 sum of K of them in any order is within
  // gamma_K = K u / (1 - K u) (u = 2^-24) of the exact sum, relative to sum_k |a_ik b_kj| (Higham,
  // section 3.1); the float64 reference adds its own. Operands mis-converted to 16 bits (a wrong
  // bit of binary16's exponent or mantissa) or read with a wrong stride are far outside it.
  namespace k = mg::kernels;
  struct Format {
    k::GemmInputs inputs;
    k::UnaryOp round;
  };
  for (const Format f : {Format{k::GemmInputs::BFloat16, k::UnaryOp::RoundBFloat16},
                         Format{k::GemmInputs::Float16, k::UnaryOp::RoundFloat16}}) {
    INFO((f.inputs == k::GemmInputs::BFloat16 ? "bf16" : "fp16"));
    struct Case {
      Tensor a, b;
    };
    auto rounded = [&](const Tensor& t) {
      Tensor r = Tensor::empty(t.shape());
      k::unary(f.round, t, r);
      return r;
    };
    const Tensor shared = rounded(cpu_input({1, 24, 9}, DType::Float32, 66));
    // fp16's subnormals too: values near 2^-20.
    const Tensor tiny = rounded(mul(cpu_input({1, 6, 24}, DType::Float32, 70), std::ldexp(1.0, -20)));
    const std::vector<Case> cases{
        {rounded(cpu_input({2, 33, 24}, DType::Float32, 64)), rounded(cpu_input({2, 24, 17}, DType::Float32, 65))},
        {transpose(rounded(cpu_input({3, 24, 40}, DType::Float32, 67)), 1, 2), shared.expand({3, 24, 9})},
        {rounded(cpu_input({1, 1, 300}, DType::Float32, 68)),
         transpose(rounded(cpu_input({1, 5, 300}, DType::Float32, 69)), 1, 2)},
        {tiny, shared}};
    for (const Case& c : cases) {
      INFO(to_string(c.a.shape()) << " @ " << to_string(c.b.shape()));
      const int64_t batches = c.a.size(0), m = c.a.size(1), kk = c.a.size(2), n = c.b.size(2);
      Tensor got = Tensor::empty({batches, m, n}, {.device = gpu()});
      k::batched_matmul(c.a.to(gpu()), c.b.to(gpu()), got, f.inputs);
      const std::vector<double> g = values(got.to(Device("cpu")));
      const std::vector<double> exact = values(matmul(c.a.to(DType::Float64), c.b.to(DType::Float64)));
      const std::vector<double> magnitude = values(matmul(abs(c.a).to(DType::Float64), abs(c.b).to(DType::Float64)));
      const auto gamma = [kk](double u) { return double(kk) * u / (1 - double(kk) * u); };
      const double bound = gamma(std::ldexp(1.0, -24)) + gamma(std::ldexp(1.0, -53));
      for (size_t i = 0; i < g.size(); ++i) {
        INFO("element " << i << ": " << g[i] << " against " << exact[i]);
        REQUIRE(std::abs(g[i] - exact[i]) <= bound * magnitude[i]);
      }
    }
  }
}

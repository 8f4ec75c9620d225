// tests/kernels/test_gemm_kernel.cpp — the choice of OpenBLAS kernels (kernels/cpu/gemm_kernel.h):
// every case of the plan as data, the instruction-set table, and the switch itself on this
// OpenBLAS, which the plan uses when OpenBLAS falls back to kernels below the CPU's level.
#include <cmath>
#include <cstdlib>

#include "multigrad/kernels/cpu/gemm_kernel.h"
#include "multigrad/kernels/kernels.h"
#include "kernels/kernel_test_util.h"

using namespace mg;
using namespace mg::test;
using namespace mg::kernels::cpu;

TEST_CASE("OpenBLAS core names map to the instruction sets of their kernels", "[kernels][blas]") {
  CHECK(openblas_core_level("Prescott") == IsaLevel::Sse3);
  CHECK(openblas_core_level("Nehalem") == IsaLevel::Sse3);
  CHECK(openblas_core_level("Sandybridge") == IsaLevel::Avx);
  CHECK(openblas_core_level("Haswell") == IsaLevel::Avx2);
  CHECK(openblas_core_level("Zen") == IsaLevel::Avx2);
  CHECK(openblas_core_level("SKYLAKEX") == IsaLevel::Avx512);  // OpenBLAS's env is case-insensitive
  CHECK(openblas_core_level("Cooperlake") == IsaLevel::Avx512Bf16);
  CHECK(openblas_core_level("ARMV8") == IsaLevel::Unknown);
  for (IsaLevel l : {IsaLevel::Sse3, IsaLevel::Avx, IsaLevel::Avx2, IsaLevel::Avx512, IsaLevel::Avx512Bf16})
    CHECK(openblas_core_level(openblas_core_for(l)) == l);
}

TEST_CASE("the plan switches a fallback below the CPU's level, obeys OPENBLAS_CORETYPE and warns", "[kernels][blas]") {
  // Unset: OpenBLAS's generic fallback on an AVX-512 CPU (issue 16), or AVX2 kernels on one.
  CHECK(plan_gemm_kernel("Prescott", IsaLevel::Avx512, nullptr).switch_to == "SkylakeX");
  CHECK(plan_gemm_kernel("Prescott", IsaLevel::Avx512Bf16, nullptr).switch_to == "SkylakeX");  // SGEMM's kernels
  CHECK(plan_gemm_kernel("Haswell", IsaLevel::Avx512, nullptr).switch_to == "SkylakeX");
  CHECK(plan_gemm_kernel("Nehalem", IsaLevel::Avx2, nullptr).switch_to == "Haswell");
  CHECK(plan_gemm_kernel("Prescott", IsaLevel::Avx512, nullptr).warning.empty());
  // Kernels at the CPU's level, unknown names, an unknown CPU: nothing to do.
  for (const auto& [core, cpu] : std::vector<std::pair<std::string, IsaLevel>>{
           {"Zen", IsaLevel::Avx2}, {"SkylakeX", IsaLevel::Avx512}, {"Cooperlake", IsaLevel::Avx512Bf16},
           {"SkylakeX", IsaLevel::Avx512Bf16},
           {"ARMV8", IsaLevel::Avx2}, {"Prescott", IsaLevel::Unknown}, {"Prescott", IsaLevel::Sse3}}) {
    INFO(core << " on " << isa_level_name(cpu));
    const GemmKernelPlan plan = plan_gemm_kernel(core, cpu, nullptr);
    CHECK(plan.switch_to.empty());
    CHECK(plan.warning.empty());
  }
  // Set: obeyed; below the CPU's level it is a warning naming the variable, both kernels and the CPU.
  const GemmKernelPlan forced = plan_gemm_kernel("Prescott", IsaLevel::Avx512, "prescott");
  CHECK(forced.switch_to.empty());
  CHECK(forced.warning ==
        "OPENBLAS_CORETYPE=prescott: OpenBLAS runs its Prescott kernels on a CPU with AVX-512, so GEMMs "
        "(matmul, convolution) run slower than they could; unset it for kernels of the CPU's level "
        "(multigrad switches to SkylakeX if OpenBLAS's own pick is lower)");
  // Cooperlake asked for on a CPU without BF16: Debian's OpenBLAS 0.3.21 then runs Haswell's kernels
  // (seen on a Zen 3), the CPU's level.
  CHECK(plan_gemm_kernel("Haswell", IsaLevel::Avx2, "Cooperlake").warning.empty());
}

TEST_CASE("OpenBLAS switches kernels on request, and GEMMs stay right", "[kernels][blas]") {
  const std::string in_use = gemm_kernel().core;
  const char* env_before = std::getenv("OPENBLAS_CORETYPE");
  const std::string env_saved = env_before != nullptr ? env_before : "";
  constexpr int64_t m = 37, kk = 53, n = 29;
  const Tensor a = random_tensor<float>({1, m, kk}, 1), b = random_tensor<float>({1, kk, n}, 2);
  const std::vector<float> av = read<float>(a), bv = read<float>(b);
  struct Restore {
    std::string core;
    ~Restore() { reselect_openblas_core(core); }
  } restore{in_use};
  if (reselect_openblas_core("Prescott") != "Prescott") {
    WARN("this OpenBLAS cannot switch its kernels (not a DYNAMIC_ARCH build?): " << gemm_kernel().library);
    return;
  }
  // Prescott's kernels run on every x86-64 CPU; then back to the kernels chosen for this one.
  for (const std::string& core : {std::string("Prescott"), in_use}) {
    INFO("switched to " << core);
    REQUIRE(reselect_openblas_core(core) == core);
    Tensor out = Tensor::empty({1, m, n}, {.dtype = DType::Float32});
    kernels::batched_matmul(a, b, out);
    const std::vector<float> got = read<float>(out);
    // Any order of a K-term float32 dot product is within gamma_K * sum |a_p b_p| of the exact
    // value (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., eq. 3.5).
    const double gamma = kk * 0x1p-24 / (1 - kk * 0x1p-24);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double exact = 0, magnitude = 0;
        for (int64_t p = 0; p < kk; ++p) {
          exact += double(av[size_t(i * kk + p)]) * double(bv[size_t(p * n + j)]);
          magnitude += std::abs(double(av[size_t(i * kk + p)]) * double(bv[size_t(p * n + j)]));
        }
        CHECK(std::abs(double(got[size_t(i * n + j)]) - exact) <= gamma * magnitude);
      }
    const char* env_after = std::getenv("OPENBLAS_CORETYPE");  // the environment is as it was
    CHECK((env_after == nullptr) == (env_before == nullptr));
    if (env_after != nullptr) CHECK(env_saved == env_after);
  }
}

// kernels/cpu/gemm_kernel.cpp — choosing OpenBLAS's kernels once (see gemm_kernel.h).
#include "multigrad/kernels/cpu/gemm_kernel.h"

#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "multigrad/core/error.h"

namespace mg::kernels::cpu {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

// OpenBLAS's x86-64 core names (driver/others/dynamic.c) by the instruction set of their kernels.
// Excavator and Zen run the AVX2 + FMA kernels; Cooperlake and SapphireRapids add BF16 kernels to
// SkylakeX's AVX-512 ones.
const std::pair<const char*, IsaLevel> kCoreLevels[] = {
    {"katmai", IsaLevel::Sse3},       {"coppermine", IsaLevel::Sse3},     {"northwood", IsaLevel::Sse3},
    {"prescott", IsaLevel::Sse3},     {"banias", IsaLevel::Sse3},         {"atom", IsaLevel::Sse3},
    {"core2", IsaLevel::Sse3},        {"penryn", IsaLevel::Sse3},         {"dunnington", IsaLevel::Sse3},
    {"nehalem", IsaLevel::Sse3},      {"athlon", IsaLevel::Sse3},         {"opteron", IsaLevel::Sse3},
    {"opteron_sse3", IsaLevel::Sse3}, {"barcelona", IsaLevel::Sse3},      {"nano", IsaLevel::Sse3},
    {"bobcat", IsaLevel::Sse3},       {"sandybridge", IsaLevel::Avx},     {"bulldozer", IsaLevel::Avx},
    {"piledriver", IsaLevel::Avx},    {"steamroller", IsaLevel::Avx},     {"haswell", IsaLevel::Avx2},
    {"excavator", IsaLevel::Avx2},    {"zen", IsaLevel::Avx2},            {"skylakex", IsaLevel::Avx512},
    {"cooperlake", IsaLevel::Avx512Bf16}, {"sapphirerapids", IsaLevel::Avx512Bf16},
};

std::string openblas_core_now() { return openblas_get_corename(); }

// "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..." -> "OpenBLAS 0.3.21".
std::string openblas_version() {
  std::string config = openblas_get_config();
  size_t end = config.find(' ');
  if (end != std::string::npos) end = config.find(' ', end + 1);
  return config.substr(0, end);
}

// SGEMM's kernels are the same from AVX-512 up (the BF16 levels add BF16 GEMMs only), so levels
// are compared up to AVX-512.
IsaLevel sgemm_level(IsaLevel level) { return std::min(level, IsaLevel::Avx512); }

GemmKernel choose() {
  GemmKernel k;
  k.library = openblas_version();
  const std::string detected = openblas_core_now();
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  const IsaLevel cpu = cpu_isa_level();
  const GemmKernelPlan plan = plan_gemm_kernel(detected, cpu, env);
  k.core = detected;
  k.warning = plan.warning;
  k.origin = env != nullptr ? detail::str_cat("OPENBLAS_CORETYPE=", env) : "OpenBLAS's own choice";
  if (!plan.switch_to.empty()) {
    k.core = reselect_openblas_core(plan.switch_to);
    if (sgemm_level(openblas_core_level(k.core)) >= sgemm_level(cpu)) {
      k.origin = detail::str_cat("chosen by multigrad for this CPU's ", isa_level_name(cpu), "; OpenBLAS picked ",
                                 detected);
    } else {
      k.warning = detail::str_cat("OpenBLAS picked its ", detected, " kernels on a CPU with ", isa_level_name(cpu),
                                  " and did not switch to ", plan.switch_to,
                                  " (not a DYNAMIC_ARCH build?): GEMMs run slower than they could; set "
                                  "OPENBLAS_CORETYPE=",
                                  plan.switch_to);
    }
  }
  return k;
}

// Chosen when the library loads: OpenBLAS's constructor has run (it is a dependency) and, as a
// rule, no thread of the program has started yet, so the setenv of the switch races no getenv.
[[maybe_unused]] const GemmKernel& chosen_at_load = gemm_kernel();

}  // namespace

IsaLevel openblas_core_level(const std::string& core) {
  const std::string name = lower(core);
  for (const auto& [n, level] : kCoreLevels)
    if (name == n) return level;
  return IsaLevel::Unknown;
}

const char* openblas_core_for(IsaLevel level) {
  switch (level) {
    case IsaLevel::Avx512Bf16: return "Cooperlake";
    case IsaLevel::Avx512: return "SkylakeX";
    case IsaLevel::Avx2: return "Haswell";
    case IsaLevel::Avx: return "Sandybridge";
    case IsaLevel::Sse3:
    case IsaLevel::Unknown: break;
  }
  return "Prescott";
}

GemmKernelPlan plan_gemm_kernel(const std::string& detected, IsaLevel cpu, const char* coretype_env) {
  const IsaLevel have = openblas_core_level(detected);
  if (have == IsaLevel::Unknown || cpu == IsaLevel::Unknown || sgemm_level(have) >= sgemm_level(cpu)) return {};
  const char* best = openblas_core_for(sgemm_level(cpu));
  if (coretype_env == nullptr) return {best, ""};
  return {"", detail::str_cat("OPENBLAS_CORETYPE=", coretype_env, ": OpenBLAS runs its ", detected,
                              " kernels on a CPU with ", isa_level_name(cpu),
                              ", so GEMMs (matmul, convolution) run slower than they could; unset it for kernels "
                              "of the CPU's level (multigrad switches to ",
                              best, " if OpenBLAS's own pick is lower)")};
}

std::string reselect_openblas_core(const std::string& core) {
  using Fn = void (*)();
  auto quit = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"));
  auto init = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"));
  if (quit == nullptr || init == nullptr) return openblas_core_now();
  const char* previous = std::getenv("OPENBLAS_CORETYPE");
  const std::string saved = previous != nullptr ? previous : "";
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  quit();
  init();
  if (previous != nullptr)
    setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
  else
    unsetenv("OPENBLAS_CORETYPE");
  return openblas_core_now();
}

const GemmKernel& gemm_kernel() {
  static const GemmKernel kernel = choose();
  return kernel;
}

void warn_once_if_slow_gemm_kernel() {
  static const bool warned = [] {
    if (!gemm_kernel().warning.empty()) std::fprintf(stderr, "multigrad: warning: %s\n", gemm_kernel().warning.c_str());
    return true;
  }();
  (void)warned;
}

}  // namespace mg::kernels::cpu

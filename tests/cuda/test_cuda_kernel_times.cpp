// tests/cuda/test_cuda_kernel_times.cpp — the kernel-time ledger (kernels/kernel_times.h): every
// launch and library call is counted under its family while timing is on, nothing while it is
// off, and taking the times empties the ledger.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

// The entries of `times` in `family`.
std::vector<KernelTime> of_family(const std::vector<KernelTime>& times, const std::string& family) {
  std::vector<KernelTime> out;
  std::copy_if(times.begin(), times.end(), std::back_inserter(out),
               [&](const KernelTime& t) { return t.family == family; });
  return out;
}

int64_t launches_of(const std::vector<KernelTime>& times, const std::string& kernel) {
  int64_t n = 0;
  for (const KernelTime& t : times) n += t.kernel == kernel ? t.launches : 0;
  return n;
}

// Turns timing off however the test case ends.
struct TimingOn {
  TimingOn() {
    set_kernel_timing(true);
    take_kernel_times();
  }
  ~TimingOn() { set_kernel_timing(false); }
};

}  // namespace

TEST_CASE("kernel times count each launch under its family and kernel", "[cuda][kernel_times]") {
  const Tensor a = cpu_input({64, 32}).to(gpu()), b = cpu_input({32, 16}).to(gpu());
  synchronize(gpu());
  std::vector<KernelTime> times;
  {
    TimingOn on;
    add(a, a);
    add(a, a);
    matmul(a, b);
    times = take_kernel_times();
    REQUIRE(take_kernel_times().empty());  // taken: the ledger starts again
  }
  const std::vector<KernelTime> elementwise = of_family(times, "elementwise");
  const std::vector<KernelTime> matmul_times = of_family(times, "matmul");
  REQUIRE(!elementwise.empty());
  int64_t adds = 0;
  for (const KernelTime& t : elementwise) adds += t.launches;
  CHECK(adds == 2);
  CHECK(launches_of(matmul_times, "cublas_sgemm") == 1);
  for (const KernelTime& t : times) {
    INFO(t.family << " " << t.kernel);
    CHECK(t.ms >= 0);
    CHECK(t.launches > 0);
  }
  CHECK(std::is_sorted(times.begin(), times.end(), [](const KernelTime& x, const KernelTime& y) { return x.ms > y.ms; }));
}

TEST_CASE("kernel times put a bf16 GEMM's operand casts under matmul", "[cuda][kernel_times]") {
  const Tensor a = cpu_input({64, 32}).to(gpu()), b = cpu_input({32, 16}).to(gpu());
  synchronize(gpu());
  std::vector<KernelTime> times;
  {
    TimingOn on;
    const AutocastGuard autocast(Precision::BFloat16);
    matmul(a, b);
    times = take_kernel_times();
  }
  const std::vector<KernelTime> matmul_times = of_family(times, "matmul");
  CHECK(launches_of(matmul_times, "cublas_gemm_ex") == 1);
  int64_t casts = 0;
  for (const KernelTime& t : matmul_times) casts += t.kernel == "cublas_gemm_ex" ? 0 : t.launches;
  CHECK(casts == 2);  // a and b packed into BFloat16 tensors for cuBLAS
}

TEST_CASE("kernel times record nothing while timing is off", "[cuda][kernel_times]") {
  set_kernel_timing(false);
  take_kernel_times();
  const Tensor a = cpu_input({64, 32}).to(gpu());
  add(a, a);
  synchronize(gpu());
  CHECK(take_kernel_times().empty());
}

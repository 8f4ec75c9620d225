// tests/cli/test_cli.cpp — the `multigrad` command, run as a user would: the built binary
// (MG_CLI_PATH) through the shell, checking exit status, stdout and stderr.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/run_cli.h"
#include "multigrad/kernels/cpu/conv_onednn.h"
#include "multigrad/kernels/cpu/gemm_kernel.h"
#include "multigrad/kernels/cpu/matmul_bf16.h"
#include "test_util.h"

namespace {

using mg::test::CliResult;
using mg::test::lines;
using mg::test::run_cli;

using mg::test::contains;

// The thread budget of each "  cpu:N  thread budget B" line, in order.
std::vector<int> cpu_budgets(const std::string& out) {
  std::vector<int> budgets;
  for (const auto& line : lines(out)) {
    int index = -1, budget = -1;
    if (std::sscanf(line.c_str(), "  cpu:%d  thread budget %d", &index, &budget) == 2) {
      REQUIRE(index == int(budgets.size()));
      budgets.push_back(budget);
    }
  }
  return budgets;
}

// A usage error: non-zero status, nothing on stdout, one line on stderr naming `culprit`.
void require_usage_error(const CliResult& r, const std::string& culprit) {
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.status > 0);
  CHECK(r.out.empty());
  REQUIRE(lines(r.err).size() == 1);
  CHECK(contains(r.err, culprit));
}

}  // namespace

TEST_CASE("cli: devices lists the CUDA devices or why there are none, then the CPU device",
          "[cli]") {
  const CliResult r = run_cli("devices");
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.empty());
  if (mg::device_count(mg::DeviceType::CUDA) == 0) {
    CHECK(contains(r.out, "CUDA devices: none found (" + mg::cuda_unavailable_reason() + ")"));
    CHECK_FALSE(mg::cuda_unavailable_reason().empty());
  } else {
    CHECK(contains(r.out, "  cuda:0  " + mg::cuda_device_info(0).name));
    CHECK(contains(r.out, " SMs  compute capability "));
  }
  CHECK(contains(r.out, "CPU devices: 1 ("));
  const std::vector<int> budgets = cpu_budgets(r.out);
  REQUIRE(budgets.size() == 1);
  CHECK(budgets[0] >= 1);
}

TEST_CASE("cli: devices gives each CPU device's float32 peak, and bf16's, as threads x clock x FLOPs per cycle",
          "[cli]") {
  const CliResult r = run_cli("devices", "MG_CPU_DEVICES=2");
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  int found = 0;
  for (const auto& line : lines(r.out)) {
    int index = -1, budget = -1, threads = -1, per_cycle = -1;
    double gflops = 0, ghz = 0;
    if (std::sscanf(line.c_str(), "  cpu:%d  thread budget %d  peak %lf GFLOP/s float32 (%d threads x %lf GHz x %d",
                    &index, &budget, &gflops, &threads, &ghz, &per_cycle) != 6)
      continue;
    ++found;
    CHECK(threads == budget);
    CHECK((per_cycle == 8 || per_cycle == 16 || per_cycle == 32 || per_cycle == 64));
    CHECK(gflops == Approx(threads * ghz * per_cycle).epsilon(0.01));  // the printed clock has 3 digits
    // bf16's own peak, where the bf16 GEMMs' kernels have a rate of their own (matmul_bf16.h).
    const int bf16_per_cycle = mg::kernels::cpu::bf16_gemm_flops_per_cycle();
    CHECK(contains(line, " GFLOP/s bf16 (") == (bf16_per_cycle > 0));
    if (bf16_per_cycle > 0) {
      CHECK(contains(line, " x " + std::to_string(bf16_per_cycle) + " FLOPs/cycle of " +
                               mg::kernels::cpu::bf16_gemm_isa_name() + ")"));
    }
  }
  // A machine whose kernel gives no clock at all says "peak unknown" instead.
  if (!contains(r.out, "peak unknown")) CHECK(found == 2);
}

TEST_CASE("cli: MG_CPU_DEVICES=3 gives three CPU devices, each with a thread budget", "[cli]") {
  const CliResult r = run_cli("devices", "MG_CPU_DEVICES=3");
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  CHECK(contains(r.out, "CPU devices: 3 ("));
  const std::vector<int> budgets = cpu_budgets(r.out);
  REQUIRE(budgets.size() == 3);
  for (int b : budgets) CHECK(b >= 1);
}

TEST_CASE("cli: a bad MG_CPU_DEVICES or MG_CPU_THREADS is one clear error line and a non-zero exit", "[cli]") {
  for (const std::string setting : {"MG_CPU_DEVICES=abc", "MG_CPU_DEVICES=100000", "MG_CPU_THREADS=0"}) {
    const CliResult r = run_cli("devices", setting);
    INFO(setting << "\nstdout: " << r.out << "\nstderr: " << r.err);
    CHECK(r.status == 1);
    CHECK(r.out.empty());
    REQUIRE(lines(r.err).size() == 1);
    const size_t eq = setting.find('=');
    CHECK(contains(r.err, setting.substr(0, eq) + "='" + setting.substr(eq + 1) + "'"));
  }
}

TEST_CASE("cli: MG_CPU_THREADS sets the threads the CPU devices share", "[cli]") {
  const int threads = int(std::thread::hardware_concurrency()) + 1;  // not the hardware's count
  const CliResult one = run_cli("devices", "MG_CPU_THREADS=" + std::to_string(threads));
  INFO("stdout: " << one.out << "\nstderr: " << one.err);
  REQUIRE(one.status == 0);
  CHECK(contains(one.out, std::to_string(threads) + " threads from MG_CPU_THREADS"));
  CHECK(cpu_budgets(one.out) == std::vector<int>{threads});
  const CliResult two = run_cli("devices", "MG_CPU_THREADS=5 MG_CPU_DEVICES=2");
  REQUIRE(two.status == 0);
  CHECK(cpu_budgets(two.out) == std::vector<int>{2, 2});
}

TEST_CASE("cli: devices says which kernels run the GEMMs and convolutions, and warns about slow ones", "[cli]") {
  const std::string cpu = mg::kernels::cpu::isa_level_name(mg::kernels::cpu::cpu_isa_level());
  const bool onednn = !mg::kernels::cpu::conv_library().name.empty();
  const CliResult r = run_cli("devices", "-u OPENBLAS_CORETYPE -u ONEDNN_MAX_CPU_ISA -u DNNL_MAX_CPU_ISA");
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  CHECK(contains(r.out, "CPU GEMM: OpenBLAS "));
  CHECK(contains(r.out, "this CPU has " + cpu + ")"));
  CHECK(contains(r.out, onednn ? "CPU conv2d: oneDNN " : "CPU conv2d: im2col + GEMM (built without oneDNN)"));
  const bool bf16 = mg::kernels::cpu::cpu_isa_level() >= mg::kernels::cpu::IsaLevel::Avx512Bf16;
  CHECK(contains(r.out, onednn && bf16 ? "CPU bf16 matmul: oneDNN "
                                        : "CPU bf16 matmul: float32 GEMMs on the bf16 values ("));
  CHECK(!contains(r.out, "warning"));  // unset, the kernels match the CPU (or multigrad switches them)
  CHECK(r.err.empty());
  // Prescott's SSE3 kernels, forced, on any CPU with AVX or more: obeyed, and a warning in the
  // listing (stderr gets its line at the first GEMM: test_train.cpp).
  const CliResult forced = run_cli("devices", "OPENBLAS_CORETYPE=Prescott");
  INFO("stdout: " << forced.out << "\nstderr: " << forced.err);
  REQUIRE(forced.status == 0);
  CHECK(contains(forced.out, "Prescott kernels (OPENBLAS_CORETYPE=Prescott;"));
  CHECK(forced.err.empty());
  if (mg::kernels::cpu::cpu_isa_level() > mg::kernels::cpu::IsaLevel::Sse3)
    CHECK(contains(forced.out, "  warning: OPENBLAS_CORETYPE=Prescott: OpenBLAS runs its Prescott kernels on a CPU with " + cpu));
  // oneDNN capped at SSE4.1 likewise.
  const CliResult capped = run_cli("devices", "ONEDNN_MAX_CPU_ISA=SSE41");
  INFO("stdout: " << capped.out);
  if (onednn && mg::kernels::cpu::cpu_isa_level() > mg::kernels::cpu::IsaLevel::Sse3) {
    CHECK(contains(capped.out, " (its SSE4.1 kernels) for float32"));
    CHECK(contains(capped.out, "  warning: oneDNN runs its SSE4.1 convolution kernels (ONEDNN_MAX_CPU_ISA=SSE41) on a CPU with " + cpu));
    CHECK(contains(capped.out, "CPU bf16 matmul: float32 GEMMs on the bf16 values (" +
                                   mg::kernels::cpu::conv_library().name + " runs SSE4.1 kernels, without BF16)"));
  }
}

TEST_CASE("cli: an unknown subcommand is a usage error", "[cli]") {
  require_usage_error(run_cli("frobnicate"), "frobnicate");
}

TEST_CASE("cli: an unknown flag is a usage error", "[cli]") {
  require_usage_error(run_cli("devices --no-such-flag"), "--no-such-flag");
}

TEST_CASE("cli: no subcommand is a usage error", "[cli]") {
  require_usage_error(run_cli(""), "subcommand");
}

TEST_CASE("cli: --version and --help print to stdout and exit 0", "[cli]") {
  const CliResult version = run_cli("--version");
  CHECK(version.status == 0);
  CHECK(version.out.rfind("multigrad ", 0) == 0);
  CHECK(version.err.empty());

  const CliResult help = run_cli("--help");
  CHECK(help.status == 0);
  CHECK(contains(help.out, "devices"));
  CHECK(help.err.empty());
}

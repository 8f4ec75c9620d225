// tests/parallel/mpi/mpi_failure_probe.cpp — a job in which rank 1 fails in the middle of a loop
// of all-reduces, for run_failure_probe.sh to watch from outside: does the whole job end,
// promptly and non-zero, naming the rank, with no process left behind?
//
// usage: mpiexec -np N mpi_failure_probe throw|kill|hang TAG
//   throw  rank 1 throws before all_reduce #kFailAt; main prints the error and calls mpi_abort,
//          as a program should when an error escapes (mpi.h).
//   kill   rank 1 starts all_reduce #kFailAt and is killed (SIGKILL) while it is in flight.
//   hang   rank 1 stops calling collectives without dying; rank 0's all_reduce #kFailAt times
//          out after kHangTimeout, and rank 0 prints the error and calls mpi_abort.
// TAG is unused: it marks the job's processes for the script.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

#include "multigrad/multigrad.h"
#include "multigrad/parallel/comm/mpi.h"

namespace {

constexpr int kIterations = 20;
constexpr int kFailAt = 5;
constexpr int64_t kNumel = 1 << 20;  // 4 MB: the all-reduce takes a while and is in flight when rank 1 dies
constexpr std::chrono::milliseconds kHangTimeout{2000};
constexpr int kAbortCode = 3;

void run(const std::string& mode) {
  auto comm = mg::parallel::mpi_world();
  if (mode == "hang") comm->set_timeout(kHangTimeout);
  const bool fails_here = comm->rank() == 1;
  for (int i = 0; i < kIterations; ++i) {
    mg::Tensor t = mg::full({kNumel}, 1.0);
    if (fails_here && i == kFailAt) {
      if (mode == "throw") throw std::runtime_error("injected failure before all_reduce #" + std::to_string(i));
      if (mode == "hang") std::this_thread::sleep_for(std::chrono::minutes(2));
    }
    auto work = comm->all_reduce(t);
    if (fails_here && i == kFailAt && mode == "kill") {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the all-reduce is under way
      std::raise(SIGKILL);
    }
    work->wait();
    const float got = t.to_vector<float>()[0];
    if (got != float(comm->size())) {
      throw std::runtime_error("all_reduce #" + std::to_string(i) + " gave " + std::to_string(got));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "throw" && mode != "kill" && mode != "hang") {
    std::fprintf(stderr, "usage: mpiexec -np N %s throw|kill|hang TAG\n", argv[0]);
    return 2;
  }
  try {
    run(mode);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_failure_probe: rank %d: %s\n", mg::parallel::mpi_env_rank(), e.what());
    mg::parallel::mpi_abort(kAbortCode);
  }
  return 0;
}

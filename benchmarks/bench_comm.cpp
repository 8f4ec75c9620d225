// benchmarks/bench_comm.cpp — all-reduce bus bandwidth of the communicators, against memcpy.
//
// For float32 tensors of 1 KB ... 256 MB (powers of 4), the time of one all_reduce(sum) on
// rank 0, as nccl-tests measure it:
//   algbw = bytes / time
//   busbw = algbw * 2 (n - 1) / n   the bytes each rank sends (and receives) in a ring
//                                   all-reduce, per second: comparable across n and with a link
// Baseline: one thread's memcpy of the same number of bytes on rank 0, measured between the
// all-reduce samples. It is the link between CPU ranks: the local backend moves data with
// memcpy, and OpenMPI's shared-memory transport copies through memory too. ratio = busbw /
// memcpy GB/s, so 1 means the ranks' transfers ran as fast as one memory copy stream.
//
//   local: ranks are threads on CPU devices cpu:0..n-1 (parallel::run_ranks), n = 2 and 4;
//          impl "ring" (the ring all-reduce) and "deterministic" (rank-ordered).
//   mpi:   under mpiexec, one rank per process; impl "mpi" (MPI_Iallreduce) and
//          "deterministic" (all-gather, then a rank-ordered sum). Rank 0 prints.
//
// Output: one JSON object per line, e.g.
//   {"bench": "all_reduce", "backend": "local", "ranks": 2, "impl": "ring", "bytes": 1048576,
//    "ms": 0.41, "algbw": 2.56, "busbw": 2.56, "baseline": "memcpy", "baseline_gbps": 9.8, "ratio": 0.26}
// ms is the median over samples after warm-up; GB/s are 1e9 bytes per second.
//
// usage: bench_comm [--quick] [--backend local|mpi]      (mpi: mpiexec -np N bench_comm --backend mpi)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "multigrad/multigrad.h"
#include "multigrad/parallel/comm/mpi.h"

namespace {

using mg::bench::calls_for;
using mg::bench::median;
using mg::bench::now_ms;
using mg::parallel::Communicator;

constexpr int64_t kKB = 1024;
constexpr int64_t kMB = 1024 * kKB;
constexpr double kBytesPerGB = 1e9;

struct Settings {
  bool quick = false;
  int warmup = 2;
  int samples = 7;
  std::vector<int64_t> sizes;  // bytes
};

double gbps(int64_t bytes, double ms) { return double(bytes) / kBytesPerGB / (ms / 1e3); }

// Every rank calls this with the same arguments; rank 0 measures and prints. All ranks must
// repeat the all-reduce equally often, so rank 0 decides the count and broadcasts it.
void sweep(Communicator& comm, const Settings& s, const char* backend, const char* impl) {
  const bool reporter = comm.rank() == 0;
  const int n = comm.size();
  for (int64_t bytes : s.sizes) {
    const int64_t numel = bytes / int64_t(sizeof(float));
    // Zeros stay zeros however often they are summed: no overflow to inf over the repetitions.
    mg::Tensor t = mg::zeros({numel}, {.device = comm.device()});  // (numel)
    std::vector<char> src(reporter ? size_t(bytes) : 0, 1), dst(reporter ? size_t(bytes) : 0);
    auto all_reduce = [&] { comm.all_reduce(t)->wait(); };
    auto copy = [&] { std::memcpy(dst.data(), src.data(), size_t(bytes)); };

    for (int i = 0; i < s.warmup; ++i) all_reduce();
    double t0 = now_ms();
    all_reduce();
    mg::Tensor calls = mg::full({2}, 0.0, {.dtype = mg::DType::Int64, .device = comm.device()});
    if (reporter) {
      const double reduce_ms = now_ms() - t0;
      t0 = now_ms();
      copy();
      calls.data<int64_t>()[0] = calls_for(reduce_ms);
      calls.data<int64_t>()[1] = calls_for(now_ms() - t0);
    }
    comm.broadcast(calls, 0)->wait();
    const int reduce_calls = int(calls.data<int64_t>()[0]), copy_calls = int(calls.data<int64_t>()[1]);

    // Samples alternate, copy then all-reduce, so load from elsewhere on a shared machine falls
    // on both alike and their ratio holds.
    std::vector<double> reduce_ms, copy_ms;
    for (int i = 0; i < s.samples; ++i) {
      if (reporter) {
        t0 = now_ms();
        for (int c = 0; c < copy_calls; ++c) copy();
        copy_ms.push_back((now_ms() - t0) / copy_calls);
      }
      comm.barrier()->wait();
      t0 = now_ms();
      for (int c = 0; c < reduce_calls; ++c) all_reduce();
      reduce_ms.push_back((now_ms() - t0) / reduce_calls);
    }
    if (!reporter) continue;
    const double ms = median(reduce_ms);
    const double algbw = gbps(bytes, ms);
    const double busbw = algbw * 2.0 * (n - 1) / n;
    const double memcpy_gbps = gbps(bytes, median(copy_ms));
    std::printf(R"({"bench": "all_reduce", "backend": "%s", "ranks": %d, "impl": "%s", "bytes": %lld, )"
                R"("ms": %.4g, "algbw": %.3g, "busbw": %.3g, "baseline": "memcpy", "baseline_gbps": %.3g, )"
                R"("ratio": %.3g})"
                "\n",
                backend, n, impl, static_cast<long long>(bytes), ms, algbw, busbw, memcpy_gbps, busbw / memcpy_gbps);
    std::fflush(stdout);
  }
}

void run_local(const Settings& s) {
  constexpr int kMostRanks = 4;
  mg::set_cpu_device_count(kMostRanks);  // cpu:0..3, each with its share of the cores
  for (int n : {2, kMostRanks}) {
    std::vector<mg::Device> devices;
    for (int i = 0; i < n; ++i) devices.emplace_back(mg::DeviceType::CPU, i);
    for (bool deterministic : {false, true}) {
      mg::set_deterministic(deterministic);
      mg::parallel::run_ranks(devices, [&](Communicator& comm) {
        sweep(comm, s, "local", deterministic ? "deterministic" : "ring");
      });
    }
  }
  mg::set_deterministic(false);
}

void run_mpi(const Settings& s) {
  auto comm = mg::parallel::mpi_world();
  for (bool deterministic : {false, true}) {
    mg::set_deterministic(deterministic);
    sweep(*comm, s, "mpi", deterministic ? "deterministic" : "mpi");
  }
  mg::set_deterministic(false);
}

int usage_error(const std::string& what) {
  std::fprintf(stderr, "bench_comm: %s (usage: bench_comm [--quick] [--backend local|mpi])\n", what.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  std::string backend = "local";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      s.quick = true;
      s.warmup = 1;
      s.samples = 3;
    } else if (arg == "--backend") {
      if (i + 1 == argc) return usage_error("--backend needs local or mpi");
      backend = argv[++i];
      if (backend != "local" && backend != "mpi") return usage_error("unknown backend '" + backend + "'");
    } else {
      return usage_error("unknown argument '" + arg + "'");
    }
  }
  // 1 KB .. 256 MB by powers of 4; --quick every other one, and not the largest.
  for (int64_t bytes = kKB; bytes <= 256 * kMB; bytes *= s.quick ? 16 : 4) s.sizes.push_back(bytes);

  if (backend == "mpi" && mg::parallel::mpi_env_size() < 2) {
    std::fprintf(stderr, "bench_comm: --backend mpi runs under mpiexec with 2 or more ranks "
                         "(mpiexec -np 2 bench_comm --backend mpi)\n");
    return 2;
  }
  try {
    if (backend == "local") {
      run_local(s);
    } else {
      run_mpi(s);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_comm: error: %s\n", e.what());
    if (backend == "mpi") mg::parallel::mpi_abort(1);  // the other ranks would wait for this one
    return 1;
  }
  return 0;
}

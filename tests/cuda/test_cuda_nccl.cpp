// tests/cuda/test_cuda_nccl.cpp — the nccl backend (parallel/comm/nccl.cpp) against the local backend
// on CPU devices: every collective and send_recv for every dtype and for 1, 7 and ~4M elements,
// deterministic mode's bits, nccl_over_host (nccl_world's path, on threads), the fingerprints, the
// failures (a rank that throws, a timeout, a peer that left, a CPU tensor, two ranks on one GPU),
// DDP and 1F1B and interleaved pipelines.
//
// NCCL puts every rank of a communicator on a GPU of its own, so a test with n ranks needs n
// physical GPUs: where there are fewer it is skipped with the reason (skip_test: ctest reports
// it skipped). The one-rank tests run on one GPU and still go through every part of the
// backend: the communication stream and its events, the polling, NCCL's kernels (collectives,
// and a send and receive to oneself), the deterministic all-gather and fold, the fingerprints,
// the timeout and the abort.
//
// Rank threads only record what they saw; the test thread checks it after the run returns
// (Catch2 assertions are not thread-safe).
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#include "core/cpu_devices_guard.h"
#include "cuda/cuda_test_util.h"
#include "multigrad/kernels/kernels.h"
#include "multigrad/parallel/comm/agree.h"
#include "multigrad/parallel/comm/nccl.h"
#include "parallel/parallel_test_util.h"
#include "multigrad/parallel/tensor/tensor_parallel.h"

using mg::Device;
using mg::DType;
using mg::Tensor;
using mg::parallel::Communicator;
using mg::parallel::ReduceOp;
using mg::parallel::run_ranks;
using mg::parallel::run_ranks_nccl;
using namespace mg::test;

namespace {

constexpr int64_t kLarge = (int64_t(1) << 22) + 3;  // ~4M elements, odd

// False, after skip_test, when this build has no nccl backend.
bool nccl_built() {
  if (mg::parallel::nccl_available()) return true;
  skip_test("this build has no nccl backend (NCCL was not found when configuring)");
  return false;
}

// The first logical CUDA device of each physical GPU: the devices NCCL can use together.
std::vector<Device> distinct_gpus() {
  std::vector<Device> out;
  std::set<int> seen;
  for (int i = 0; i < mg::device_count(mg::DeviceType::CUDA); ++i) {
    if (seen.insert(mg::cuda_physical_index(i)).second) out.emplace_back(mg::DeviceType::CUDA, i);
  }
  return out;
}

// n devices on distinct GPUs, or none after skip_test.
std::optional<std::vector<Device>> gpus_for(int n) {
  std::vector<Device> all = distinct_gpus();
  if (int(all.size()) < n) {
    skip_test("needs " + std::to_string(n) + " GPUs, found " + std::to_string(all.size()) +
              " (NCCL cannot put two ranks of one communicator on one GPU)");
    return std::nullopt;
  }
  all.resize(size_t(n));
  return all;
}

// As many ranks as there are GPUs, up to n: the test runs on one GPU with one rank.
std::vector<Device> up_to(int n) {
  std::vector<Device> all = distinct_gpus();
  if (int(all.size()) > n) all.resize(size_t(n));
  return all;
}

using Results = std::map<std::string, Tensor>;  // by operation, on the CPU

// Every collective, messages around the ring and to oneself, and a send_recv around the ring, on
// rank r's inputs (made from seeds r + 1, r + 11, ...). Plain messages go around the ring one
// after another (rank 0 sends first, every other rank receives before it sends): NCCL's send
// waits for its receive; send_recv's do not need that order.
Results every_collective(Communicator& comm, int64_t numel, DType dtype) {
  const int n = comm.size(), r = comm.rank();
  const Device host("cpu:0");
  auto input = [&](int64_t count, uint64_t salt) {
    return cpu_input({count}, dtype, uint64_t(r) + 1 + salt).to(comm.device());
  };
  Results out;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
    if (op == ReduceOp::Avg && dtype == DType::Int64) continue;
    Tensor t = input(numel, 0);
    comm.all_reduce(t, op)->wait();
    out[std::string("all_reduce ") + mg::parallel::reduce_op_name(op)] = t.to(host);
  }
  Tensor b = input(numel, 10);
  comm.broadcast(b, n - 1)->wait();
  out["broadcast"] = b.to(host);

  Tensor gathered = Tensor::empty({n * numel}, {dtype, comm.device()});
  comm.all_gather(gathered, input(numel, 20))->wait();
  out["all_gather"] = gathered.to(host);

  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
    Tensor part = Tensor::empty({numel}, {dtype, comm.device()});
    comm.reduce_scatter(part, input(n * numel, 30), op)->wait();
    out[std::string("reduce_scatter ") + mg::parallel::reduce_op_name(op)] = part.to(host);
  }

  Tensor message = input(numel, 40), received = Tensor::empty({numel}, {dtype, comm.device()});
  if (n > 1) {
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    if (r == 0) comm.send(message, next)->wait();
    comm.recv(received, prev)->wait();
    if (r != 0) comm.send(message, next)->wait();
    out["ring message"] = received.to(host);
  }
  Tensor to_self = input(numel, 50), from_self = Tensor::empty({numel}, {dtype, comm.device()});
  comm.send(to_self, r)->wait();
  comm.recv(from_self, r)->wait();
  out["message to oneself"] = from_self.to(host);

  // Every rank at once, to the next and from the previous (on one rank: to and from itself): the
  // two halves of each rank's exchange must progress together.
  Tensor exchanged = Tensor::empty({numel}, {dtype, comm.device()});
  comm.send_recv(input(numel, 60), (r + 1) % n, exchanged, (r + n - 1) % n)->wait();
  out["send_recv around the ring"] = exchanged.to(host);

  comm.barrier()->wait();
  return out;
}

std::vector<Results> run_every_collective(Backend run, const std::vector<Device>& devices, int64_t numel,
                                          DType dtype) {
  std::vector<Results> results(devices.size());
  run(devices, [&](Communicator& comm) { results[size_t(comm.rank())] = every_collective(comm, numel, dtype); });
  return results;
}

// nccl_world's way on threads: each rank of a local group on CPU devices makes its NCCL
// communicator with nccl_over_host, its local communicator standing in for mpi_world's (which
// needs a process per rank). The caller makes the CPU devices.
void run_nccl_over_host(const std::vector<Device>& devices, const std::function<void(Communicator&)>& fn) {
  run_ranks(cpu_devices(int(devices.size())), [&](Communicator& host) {
    const std::shared_ptr<Communicator> shared(&host, [](Communicator*) {});  // outlives the NCCL one
    const std::unique_ptr<Communicator> nccl = mg::parallel::nccl_over_host(shared, devices[size_t(host.rank())]);
    nccl->set_timeout(std::chrono::seconds(20));
    fn(*nccl);
  });
}

// nccl on `devices` against local on as many CPU devices: bit for bit in deterministic mode (and
// for what involves no arithmetic), within float rounding otherwise (another summation order).
void check_against_local(const std::vector<Device>& devices, bool deterministic,
                         const std::vector<int64_t>& sizes = {1, 7, kLarge}, Backend nccl = run_ranks_nccl) {
  const int n = int(devices.size());
  CpuDevicesGuard guard(n);
  DeterministicScope scope(deterministic);
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int64}) {
    for (int64_t numel : sizes) {
      const auto want = run_every_collective(run_ranks, cpu_devices(n), numel, dtype);
      const auto got = run_every_collective(nccl, devices, numel, dtype);
      for (int r = 0; r < n; ++r) {
        REQUIRE(got[size_t(r)].size() == want[size_t(r)].size());
        for (const auto& [name, expected] : want[size_t(r)]) {
          INFO(name << ", " << dtype << ", " << numel << " elements, rank " << r << " of " << n
                    << ", deterministic " << deterministic);
          const Tensor& actual = got[size_t(r)].at(name);
          if (deterministic) {
            expect_equal(actual, expected);
          } else {
            expect_close(actual, expected);
          }
        }
      }
    }
  }
}

// Runs fn on every rank with the nccl backend, catching mg::Error per rank; each rank's message.
std::vector<std::string> rank_errors(const std::vector<Device>& devices,
                                     const std::function<void(Communicator&)>& fn) {
  return mg::test::rank_errors(run_ranks_nccl, devices, fn);
}

}  // namespace

TEST_CASE("nccl on one GPU: every collective, dtype and size equals the local backend", "[cuda][nccl]") {
  if (!nccl_built()) return;
  check_against_local({gpu()}, /*deterministic=*/false);
  check_against_local({gpu()}, /*deterministic=*/true);
}

TEST_CASE("nccl on two GPUs: every collective, dtype and size matches the local backend", "[cuda][nccl]") {
  if (!nccl_built()) return;
  if (const auto devices = gpus_for(2)) check_against_local(*devices, /*deterministic=*/false);
}

TEST_CASE("nccl deterministic mode on two GPUs is bit-identical to local's", "[cuda][nccl]") {
  if (!nccl_built()) return;
  if (const auto devices = gpus_for(2)) check_against_local(*devices, /*deterministic=*/true);
}

// check_split (parallel_test_util.h): groups, reversed ranks, a split of a split, a negative
// color, each group's collectives and messages, as the local and mpi backends pass it.
TEST_CASE("nccl split makes groups of their own on one and two GPUs", "[cuda][nccl]") {
  if (!nccl_built()) return;
  for (int n : {1, 2}) {
    const auto devices = n == 1 ? std::optional<std::vector<Device>>({gpu()}) : gpus_for(2);
    if (!devices) return;
    std::vector<std::string> problems(static_cast<size_t>(n));
    run_ranks_nccl(*devices, [&](Communicator& comm) { problems[size_t(comm.rank())] = check_split(comm); });
    for (int r = 0; r < n; ++r) {
      INFO(n << " GPUs, rank " << r);
      CHECK(problems[size_t(r)].empty());
    }
  }
}

TEST_CASE("nccl over a host communicator (nccl_world's way) equals the local backend, splits, and checks settings",
          "[cuda][nccl]") {
  if (!nccl_built()) return;
  for (int n : {1, 2}) {
    const auto devices = n == 1 ? std::optional<std::vector<Device>>({gpu()}) : gpus_for(2);
    if (!devices) return;
    check_against_local(*devices, /*deterministic=*/false, {7}, run_nccl_over_host);
    check_against_local(*devices, /*deterministic=*/true, {7}, run_nccl_over_host);
    CpuDevicesGuard guard(n);
    std::vector<std::string> problems(static_cast<size_t>(n));
    run_nccl_over_host(*devices, [&](Communicator& comm) { problems[size_t(comm.rank())] = check_split(comm); });
    for (int r = 0; r < n; ++r) {
      INFO(n << " GPUs, rank " << r);
      CHECK(problems[size_t(r)].empty());
    }
  }
  // The CLI's start-up check (nccl_world's ranks, under mpirun) over it: one error on every rank.
  const auto devices = gpus_for(2);
  if (!devices) return;
  CpuDevicesGuard guard(2);
  const auto errors = mg::test::rank_errors(run_nccl_over_host, *devices, [](Communicator& comm) {
    mg::parallel::check_ranks_agree(comm, {{"--lr", comm.rank() == 0 ? "0.1" : "0.2"}});
  });
  for (const std::string& e : errors) {
    CHECK(e == "the ranks disagree on --lr: rank 0 has '0.1', rank 1 has '0.2' (start every rank with the same "
               "settings)");
  }
}

TEST_CASE("nccl with MG_DEBUG_COLL=1 exchanges fingerprints and gives the same results", "[cuda][nccl]") {
  if (!nccl_built()) return;
  ScopedEnv debug("MG_DEBUG_COLL", "1");
  check_against_local(up_to(2), /*deterministic=*/false, {7});
}

// By default (MG_DEBUG_COLL unset or empty) run_ranks_nccl's ranks compare fingerprints in host
// memory, nccl_over_host's (nccl_world's) over their host communicator, with MG_DEBUG_COLL=1 both by
// an all-gather on the device; so do groups split from them. Either way the mismatched collectives
// start nothing.
TEST_CASE("nccl by default and with MG_DEBUG_COLL=1: mismatched collectives fail on every rank naming both calls, "
          "also over a host communicator and in split groups",
          "[cuda][nccl]") {
  if (!nccl_built()) return;
  const auto devices = gpus_for(2);
  if (!devices) return;
  CpuDevicesGuard guard(2);
  for (Backend run : {run_ranks_nccl, run_nccl_over_host}) {
    for (const char* debug_coll : {"", "1"}) {
      for (bool split : {false, true}) {
        INFO((run == run_ranks_nccl ? "run_ranks_nccl" : "nccl_over_host") << ", MG_DEBUG_COLL=" << debug_coll
                                                                            << (split ? ", a split group" : ""));
        ScopedEnv debug("MG_DEBUG_COLL", debug_coll);
        std::vector<std::string> mismatch(2);
        std::vector<double> sum_after(2, 0.0);
        auto errors = mg::test::rank_errors(run, *devices, [&](Communicator& world) {
          std::unique_ptr<Communicator> group = split ? world.split(0, 1 - world.rank()) : nullptr;  // ranks swapped
          Communicator& comm = split ? *group : world;
          comm.set_timeout(std::chrono::seconds(5));  // unchecked, the mismatch would hang until then
          Tensor t = Tensor::empty({4}, {DType::Float32, comm.device()});
          mg::kernels::fill(t, 1.0);
          try {
            if (comm.rank() == 0) {
              comm.all_reduce(t)->wait();
            } else {
              comm.broadcast(t, 0)->wait();
            }
          } catch (const mg::Error& e) {
            mismatch[size_t(comm.rank())] = e.what();
          }
          comm.all_reduce(t)->wait();  // the mismatch started nothing: the communicator still works
          for (double v : values(t.to(Device("cpu:0")))) sum_after[size_t(comm.rank())] += v;
        });
        CHECK(errors[0].empty());
        CHECK(errors[1].empty());
        require_contains(mismatch[0],
                         {"all_reduce #0 on rank 0 does not match rank 1", "broadcast(root 0, [4], Float32) #0"});
        require_contains(mismatch[1],
                         {"broadcast #0 on rank 1 does not match rank 0", "all_reduce(sum, [4], Float32) #0"});
        CHECK(sum_after[0] == 8.0);  // 4 elements of 1 + 1
        CHECK(sum_after[1] == 8.0);
      }
    }
  }
}

TEST_CASE("nccl collectives are asynchronous: several in flight, waited for in any order", "[cuda][nccl]") {
  if (!nccl_built()) return;
  const std::vector<Device> devices = up_to(2);
  const int n = int(devices.size());
  constexpr int kInFlight = 5;
  std::vector<std::vector<Tensor>> gathered(static_cast<size_t>(n));
  std::vector<char> timed(size_t(n), 0);  // not vector<bool>: its entries share a word across ranks
  run_ranks_nccl(devices, [&](Communicator& comm) {
    std::vector<Tensor> outs;
    std::vector<std::shared_ptr<mg::parallel::Work>> works;
    for (int k = 0; k < kInFlight; ++k) {
      const Tensor in = cpu_input({1000 + k}, DType::Float64, uint64_t(comm.rank() + k)).to(comm.device());
      outs.push_back(Tensor::empty({n * (1000 + k)}, {DType::Float64, comm.device()}));
      works.push_back(comm.all_gather(outs.back(), in));
    }
    for (int k = kInFlight - 1; k >= 0; --k) works[size_t(k)]->wait();
    const auto t = works[0]->timing();
    timed[size_t(comm.rank())] = t.has_value() && t->start <= t->end;
    for (const Tensor& o : outs) gathered[size_t(comm.rank())].push_back(o.to(Device("cpu:0")));
  });
  for (int r = 0; r < n; ++r) {
    CHECK(timed[size_t(r)]);
    for (int k = 0; k < kInFlight; ++k) {
      std::vector<Tensor> parts;
      for (int p = 0; p < n; ++p) parts.push_back(cpu_input({1000 + k}, DType::Float64, uint64_t(p + k)));
      INFO("all_gather " << k << ", rank " << r);
      expect_equal(gathered[size_t(r)][size_t(k)], mg::cat(parts, 0));
    }
  }
}

TEST_CASE("nccl rank that throws is rethrown promptly and fails the others' operations, naming it",
          "[cuda][nccl]") {
  if (!nccl_built()) return;
  const std::vector<Device> devices = up_to(4);
  const int n = int(devices.size()), thrower = n - 1;  // with one GPU: the only rank, with work in flight
  std::vector<std::string> others(static_cast<size_t>(n));
  std::vector<double> late_by(size_t(n), 0.0);
  std::chrono::steady_clock::time_point thrown;
  std::mutex mu;
  try {
    run_ranks_nccl(devices, [&](Communicator& comm) {
      Tensor t = Tensor::empty({1 << 20}, {DType::Float32, comm.device()});
      mg::kernels::fill(t, 1.0);
      comm.all_reduce(t)->wait();  // every rank takes part in the first
      if (comm.rank() == thrower) {
        comm.all_reduce(t);  // left in flight: the others wait for its peers' second all_reduce
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the others start waiting
        std::lock_guard<std::mutex> lock(mu);
        thrown = std::chrono::steady_clock::now();
        throw std::runtime_error("boom on purpose");
      }
      try {
        comm.all_reduce(t)->wait();
        comm.all_reduce(t)->wait();  // the thrower never issues this one
      } catch (const mg::Error& e) {
        std::lock_guard<std::mutex> lock(mu);
        others[size_t(comm.rank())] = e.what();
        late_by[size_t(comm.rank())] = seconds_since(thrown);
        throw;
      }
    });
    FAIL("run_ranks_nccl did not throw");
  } catch (const mg::Error& e) {
    FAIL("run_ranks_nccl rethrew a follow-on error instead of rank " << thrower << "'s: " << e.what());
  } catch (const std::runtime_error& e) {
    REQUIRE(std::string(e.what()) == "boom on purpose");
  }
  for (int r = 0; r < thrower; ++r) {
    require_contains(others[size_t(r)], {"on rank " + std::to_string(r) + ": rank " + std::to_string(thrower) +
                                         " failed: boom on purpose"});
    CHECK(late_by[size_t(r)] < 1.0);  // the default timeout is 300 s: nobody waited for it
  }
}

TEST_CASE("nccl timeout on one GPU names op, sequence, rank and timeout, and fails what follows",
          "[cuda][nccl]") {
  if (!nccl_built()) return;
  std::string timed_out, after;
  try {
    run_ranks_nccl({gpu()}, [&](Communicator& comm) {
      Tensor t = Tensor::empty({16}, {DType::Float32, comm.device()});
      mg::kernels::fill(t, 1.0);
      comm.all_reduce(t)->wait();  // NCCL has connected: the next call returns at once
      comm.set_timeout(std::chrono::milliseconds(1));
      // ~1 TFLOP on the caller's stream, which the all_reduce is queued behind: tens of ms (on
      // the CPU of the simulator, 512^3 multiply-adds take as long).
      const bool simulated = mg::cuda_device_info(0).name.find("simulator") != std::string::npos;
      const int64_t n = simulated ? 512 : 8192;
      Tensor a = Tensor::empty({n, n}, {DType::Float32, comm.device()});
      mg::kernels::fill(a, 1.0);
      const Tensor busy = mg::matmul(a, a);
      try {
        comm.all_reduce(t)->wait();
      } catch (const mg::Error& e) {
        timed_out = e.what();
      }
      try {
        comm.barrier()->wait();
      } catch (const mg::Error& e) {
        after = e.what();
      }
    });
  } catch (const std::exception& e) {
    FAIL("run_ranks_nccl threw: " << e.what());
  }
  require_contains(timed_out, {"all_reduce #1 on rank 0 timed out after 1 ms"});
  require_contains(after, {"barrier #2 on rank 0: rank 0 failed: all_reduce #1 on rank 0 timed out after 1 ms"});
}

TEST_CASE("nccl collective that a rank never joins times out naming op, sequence, rank and timeout",
          "[cuda][nccl]") {
  if (!nccl_built()) return;
  const auto devices = gpus_for(2);
  if (!devices) return;
  const auto start = std::chrono::steady_clock::now();
  auto errors = rank_errors(*devices, [](Communicator& comm) {
    Tensor t = Tensor::empty({4}, {DType::Float32, comm.device()});
    mg::kernels::fill(t, 1.0);
    comm.all_reduce(t)->wait();
    comm.barrier()->wait();
    comm.set_timeout(std::chrono::milliseconds(200));
    if (comm.rank() == 1) comm.all_reduce(t)->wait();  // rank 0 never calls its all_reduce #2...
    if (comm.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(600));  // ...but is alive
  });
  CHECK(seconds_since(start) < 10.0);  // NCCL's setup included
  CHECK(errors[0].empty());
  require_contains(errors[1], {"all_reduce #2 on rank 1 timed out after 200 ms (waiting for rank 0)"});
}

TEST_CASE("nccl collective whose peer already returned fails at once naming it", "[cuda][nccl]") {
  if (!nccl_built()) return;
  const auto devices = gpus_for(2);
  if (!devices) return;
  double waited = 0;
  auto errors = rank_errors(*devices, [&](Communicator& comm) {
    if (comm.rank() == 0) return;  // leaves without taking part
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto start = std::chrono::steady_clock::now();
    try {
      comm.all_reduce(Tensor::empty({4}, {DType::Float32, comm.device()}))->wait();
    } catch (...) {
      waited = seconds_since(start);
      throw;
    }
  });
  CHECK(waited < 1.0);  // not the 300 s default timeout
  CHECK(errors[0].empty());
  require_contains(errors[1], {"all_reduce #0 on rank 1", "rank 0 has already returned"});
}

TEST_CASE("nccl refuses CPU tensors, and two ranks on one GPU, pointing to the local backend", "[cuda][nccl]") {
  if (!nccl_built()) return;
  auto errors = rank_errors({gpu()}, [](Communicator& comm) {
    comm.all_reduce(Tensor::empty({4}, {DType::Float32, Device("cpu:0")}));
  });
  require_contains(errors[0], {"all_reduce: the nccl backend takes CUDA tensors; got one on cpu:0", "local"});
  require_error([] { run_ranks_nccl({gpu(), gpu()}, [](Communicator&) {}); },
                {"cuda:0 and cuda:0 are both on GPU", "run_ranks"});
  // Logical devices (cuda_main.cpp sets MG_CUDA_LOGICAL_DEVICES=2) share a GPU where there is one.
  const int count = mg::device_count(mg::DeviceType::CUDA);
  for (int i = 1; i < count; ++i) {
    if (mg::cuda_physical_index(i) != mg::cuda_physical_index(0)) continue;
    const Device other(mg::DeviceType::CUDA, i);
    require_error([&] { run_ranks_nccl({gpu(), other}, [](Communicator&) {}); },
                  {"cuda:0 and " + other.str() + " are both on GPU", "MG_CUDA_LOGICAL_DEVICES"});
  }
}

TEST_CASE("nccl recv from oneself needs a message of the same shape first", "[cuda][nccl]") {
  if (!nccl_built()) return;
  auto errors = rank_errors({gpu()}, [](Communicator& comm) {
    comm.recv(Tensor::empty({4}, {DType::Float32, comm.device()}), 0);
  });
  require_contains(errors[0], {"recv #0 from rank 0 on rank 0", "no message"});
  errors = rank_errors({gpu()}, [](Communicator& comm) {
    comm.send(Tensor::empty({3}, {DType::Float32, comm.device()}), 0);
    comm.recv(Tensor::empty({4}, {DType::Float32, comm.device()}), 0);
  });
  require_contains(errors[0], {"recv #0 from rank 0 on rank 0: got [3] Float32 but the receiving tensor is [4] Float32"});
}

TEST_CASE("nccl ddp equals ddp over the local backend on the mlp, bit for bit in deterministic mode",
          "[cuda][nccl]") {
  if (!nccl_built()) return;
  DeterministicScope deterministic(true);
  const std::vector<Device> devices = up_to(2);
  const int n = int(devices.size());
  const auto batches = make_batches(ModelKind::Mlp, 3, 10);
  const auto want = train_ddp(run_ranks, cuda_devices(n), ModelKind::Mlp, batches);
  const auto got = train_ddp(run_ranks_nccl, devices, ModelKind::Mlp, batches);
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << " of " << n);
    CHECK(parameter_bytes(*got[size_t(r)]) == parameter_bytes(*want[size_t(r)]));
  }
}

TEST_CASE("nccl zero1, zero2 and zero3 equal zero over the local backend and --grad-accum on one GPU, bit for bit "
          "in deterministic mode", "[cuda][nccl]") {
  if (!nccl_built()) return;
  DeterministicScope deterministic(true);
  const std::vector<Device> devices = up_to(2);
  const int n = int(devices.size());
  const auto batches = make_batches(ModelKind::Mlp, 3, 10);
  const auto want = parameter_bytes(*reference_model(ModelKind::Mlp, batches, n, gpu()));
  for (int stage : {1, 2, 3}) {
    ZeroSetup setup;
    setup.options.stage = stage, setup.options.bucket_cap_mb = 2e-4;  // stage 2: units reduced during backward
    const auto local = train_zero(run_ranks, cuda_devices(n), ModelKind::Mlp, batches, setup);
    const auto got = train_zero(run_ranks_nccl, devices, ModelKind::Mlp, batches, setup);
    for (int r = 0; r < n; ++r) {
      INFO("stage " << stage << ", rank " << r << " of " << n);
      CHECK(parameter_bytes(*local[size_t(r)]) == want);
      CHECK(parameter_bytes(*got[size_t(r)]) == want);
    }
  }
}

TEST_CASE("nccl 1f1b and interleaved pipelines (also a GPT) on two GPUs equal --grad-accum on one, bit for bit in deterministic mode",
          "[cuda][nccl]") {
  if (!nccl_built()) return;
  const auto devices = gpus_for(2);  // NCCL: a GPU per stage (logical devices: test_cuda_parallel.cpp)
  if (!devices) return;
  DeterministicScope deterministic(true);
  constexpr int m = 4;
  const auto batches = make_batches(ModelKind::Mlp, 3, 10);
  const auto reference = reference_model(ModelKind::Mlp, batches, m, gpu());
  const auto model = train_pipeline(ModelKind::Mlp, *devices, batches,
                                    {.schedule = "1f1b", .micro_batches = m, .run_ranks = run_ranks_nccl});
  CHECK(parameter_bytes(*model) == parameter_bytes(*reference));
  // Interleaved, 2 chunks per GPU: both stages send each other activations and gradients.
  const auto deep_reference = reference_model(ModelKind::DeepMlp, batches, m, gpu());
  const auto interleaved = train_pipeline(ModelKind::DeepMlp, *devices, batches,
                                          {.schedule = "interleaved", .micro_batches = m, .chunks = 2,
                                           .run_ranks = run_ranks_nccl});
  CHECK(parameter_bytes(*interleaved) == parameter_bytes(*deep_reference));
  // A GPT: the tied weight goes to the head's GPU and the head's gradients come back over NCCL.
  const auto gpt_batches = make_batches(ModelKind::Gpt, 2, 8);
  const auto gpt_reference = reference_model(ModelKind::Gpt, gpt_batches, m, gpu());
  const auto gpt = train_pipeline(ModelKind::Gpt, *devices, gpt_batches,
                                  {.schedule = "1f1b", .micro_batches = m, .run_ranks = run_ranks_nccl});
  CHECK(parameter_bytes(*gpt) == parameter_bytes(*gpt_reference));
}

// Tensor parallelism's f, g and sequence parallelism's gathers and reduce-scatters over NCCL: the
// MLP split in pairs and the tiny GPT split by heads with its sequence on shards (dropout too:
// each rank draws its positions' part of one mask), trained on the same batches over NCCL and over
// the local backend on the same GPUs, end with the same bits.
TEST_CASE("nccl tensor parallelism (an mlp, and a gpt with sequence parallelism and dropout) equals tp over the local "
          "backend, bit for bit in deterministic mode", "[cuda][nccl]") {
  if (!nccl_built()) return;
  DeterministicScope deterministic(true);
  const std::vector<Device> devices = up_to(2);
  const int n = int(devices.size());
  for (ModelKind kind : {ModelKind::Mlp, ModelKind::Gpt}) {
    INFO(model_name(kind) << " on " << n << " GPUs");
    const auto batches = make_batches(kind, 2, 4);
    mg::manual_seed(5);
    auto plain = kind == ModelKind::Gpt
                     ? std::shared_ptr<mg::nn::Module>(mg::nn::gpt({.vocab_size = kGptVocab, .context = kGptWindow,
                                                                    .n_layer = 2, .n_head = 2, .n_embd = 16,
                                                                    .dropout = 0.1}))
                     : make_model(kind, 1);
    const auto train = [&](Backend run, const std::vector<Device>& on) {
      std::vector<std::vector<std::vector<unsigned char>>> bytes(static_cast<size_t>(n));
      mg::manual_seed(9);  // dropout's draws, the same on every rank and in both runs
      run(on, [&](Communicator& comm) {
        const auto mine = plain->clone();
        mine->to(comm.device());
        std::shared_ptr<mg::nn::Sequential> tp;
        if (const auto gpt = std::dynamic_pointer_cast<mg::nn::GPT>(mine)) {
          tp = mg::parallel::tensor_parallel_gpt(*gpt, comm, {.sequence_parallel = true});
        } else {
          tp = mg::parallel::tensor_parallel_mlp(dynamic_cast<const mg::nn::Sequential&>(*mine), comm);
        }
        train_reference(*tp, batches_on(batches, comm.device()), 1);
        bytes[size_t(comm.rank())] = parameter_bytes(*tp);
      });
      return bytes;
    };
    const auto local = train(run_ranks, cuda_devices(n));
    const auto got = train(run_ranks_nccl, devices);
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      CHECK(got[size_t(r)] == local[size_t(r)]);
    }
  }
}

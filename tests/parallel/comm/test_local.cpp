// tests/parallel/comm/test_local.cpp — the local backend (parallel/comm/local.cpp) on 2, 3 and 4 CPU
// devices: every collective against a reference computed here, the deterministic mode's
// bit-identity, send_recv and rendezvous sends (LocalOptions), and the failures (mismatched
// collectives, timeouts, a rank that throws).
//
// Catch2 assertions are not thread-safe, so rank threads only record what they saw; the test
// thread checks it after run_ranks returns.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "core/cpu_devices_guard.h"
#include "multigrad/kernels/kernels.h"
#include "multigrad/parallel/comm/local.h"
#include "parallel/parallel_test_util.h"
#include "test_util.h"

using mg::Device;
using mg::DType;
using mg::Tensor;
using mg::parallel::Communicator;
using mg::parallel::ReduceOp;
using mg::parallel::run_ranks;
using mg::test::run_ranks_rendezvous;
using mg::test::cpu_devices;
using mg::test::CpuDevicesGuard;
using mg::test::input_value;
using mg::test::make_input;
using mg::test::reference_reduce;
using mg::test::require_close;
using mg::test::require_contains;
using mg::test::require_error;
using mg::test::seconds_since;

namespace {

constexpr int64_t kLarge = (1 << 20) + 3;  // ~1M elements, not divisible by the rank count

// One REQUIRE for a whole tensor (a million REQUIREs would dominate the run time): sums in
// another order than the reference differ by rounding only.
void require_all_close(const std::vector<double>& got, const std::vector<double>& want, DType dtype) {
  REQUIRE(got.size() == want.size());
  const double rtol = dtype == DType::Float32 ? 1e-5 : 1e-12;
  size_t bad = 0;
  while (bad < got.size() && std::abs(got[bad] - want[bad]) <= 1e-5 + rtol * std::abs(want[bad])) ++bad;
  INFO("first mismatch at " << bad << " of " << got.size());
  REQUIRE(bad == got.size());
}

// Runs all_reduce on `ranks` CPU devices and checks every rank's result against the reference.
void check_all_reduce(ReduceOp op, DType dtype, int ranks, int64_t numel) {
  INFO(mg::parallel::reduce_op_name(op) << " " << dtype << " on " << ranks << " ranks, " << numel << " elements");
  std::vector<Tensor> results(static_cast<size_t>(ranks));
  run_ranks(cpu_devices(ranks), [&](Communicator& comm) {
    Tensor t = make_input(dtype, comm.device(), {numel}, comm.rank());
    comm.all_reduce(t, op)->wait();
    results[size_t(comm.rank())] = t;
  });
  const auto want = reference_reduce(op, dtype, ranks, numel);
  for (int r = 0; r < ranks; ++r) {
    INFO("rank " << r);
    REQUIRE(results[size_t(r)].device() == Device(mg::DeviceType::CPU, r));
    require_all_close(mg::test::values(results[size_t(r)]), want, dtype);
  }
}

void check_all_reduce_sizes(ReduceOp op, const std::vector<DType>& dtypes) {
  CpuDevicesGuard guard(4);
  for (int ranks : {2, 4}) {
    for (int64_t numel : {int64_t(1), int64_t(7), kLarge}) {
      for (DType dtype : dtypes) check_all_reduce(op, dtype, ranks, numel);
    }
  }
}

// Runs fn on `ranks` CPU devices, catching mg::Error per rank; returns each rank's message.
std::vector<std::string> rank_errors(int ranks, const std::function<void(Communicator&)>& fn) {
  return mg::test::rank_errors(run_ranks, cpu_devices(ranks), fn);
}

}  // namespace

TEST_CASE("local all_reduce sum matches the reference for sizes 1, 7 and 1M on 2 and 4 ranks", "[parallel]") {
  check_all_reduce_sizes(ReduceOp::Sum, {DType::Float32, DType::Float64, DType::Int64});
}

TEST_CASE("local all_reduce avg matches the reference for sizes 1, 7 and 1M on 2 and 4 ranks", "[parallel]") {
  check_all_reduce_sizes(ReduceOp::Avg, {DType::Float32, DType::Float64});
}

TEST_CASE("local all_reduce max matches the reference for sizes 1, 7 and 1M on 2 and 4 ranks", "[parallel]") {
  check_all_reduce_sizes(ReduceOp::Max, {DType::Float32, DType::Float64, DType::Int64});
}

TEST_CASE("local all_reduce works with fewer elements than ranks and on a 2-d tensor", "[parallel]") {
  CpuDevicesGuard guard(4);
  check_all_reduce(ReduceOp::Sum, DType::Float64, 3, 2);
  check_all_reduce(ReduceOp::Max, DType::Int64, 4, 3);
  std::vector<Tensor> results(2);
  run_ranks(cpu_devices(2), [&](Communicator& comm) {
    Tensor t = make_input(DType::Float64, comm.device(), {3, 5}, comm.rank());
    comm.all_reduce(t)->wait();
    results[size_t(comm.rank())] = t;
  });
  for (const auto& t : results) {
    REQUIRE(t.shape() == mg::Shape{3, 5});
    require_close(t, reference_reduce(ReduceOp::Sum, DType::Float64, 2, 15), 1e-12);
  }
}

TEST_CASE("local deterministic all_reduce is bit-identical to summing in rank order", "[parallel]") {
  CpuDevicesGuard guard(4);
  mg::set_deterministic(true);
  for (int64_t numel : {int64_t(7), kLarge}) {
    std::vector<Tensor> results(4);
    run_ranks(cpu_devices(4), [&](Communicator& comm) {
      Tensor t = make_input(DType::Float32, comm.device(), {numel}, comm.rank());
      comm.all_reduce(t, ReduceOp::Sum)->wait();
      results[size_t(comm.rank())] = t;
    });
    // One device accumulating the ranks' float32 tensors in order: ((t0 + t1) + t2) + t3.
    std::vector<float> want(static_cast<size_t>(numel));
    for (int64_t i = 0; i < numel; ++i) {
      float acc = float(input_value(DType::Float32, 0, i));
      for (int r = 1; r < 4; ++r) acc += float(input_value(DType::Float32, r, i));
      want[size_t(i)] = acc;
    }
    for (int r = 0; r < 4; ++r) {
      INFO("rank " << r << ", " << numel << " elements");
      REQUIRE(std::memcmp(results[size_t(r)].data<float>(), want.data(), size_t(numel) * sizeof(float)) == 0);
    }
  }
  mg::set_deterministic(false);
  REQUIRE_FALSE(mg::is_deterministic());
}

TEST_CASE("local deterministic all_reduce avg and max agree with the ring", "[parallel]") {
  CpuDevicesGuard guard(4);
  mg::set_deterministic(true);
  check_all_reduce(ReduceOp::Avg, DType::Float64, 4, 1000);
  check_all_reduce(ReduceOp::Max, DType::Int64, 3, 10);
  mg::set_deterministic(false);
}

TEST_CASE("local all_reduce avg of Int64 is an error", "[parallel]") {
  CpuDevicesGuard guard(2);
  auto errors = rank_errors(2, [](Communicator& comm) {
    Tensor t = make_input(DType::Int64, comm.device(), {4}, comm.rank());
    comm.all_reduce(t, ReduceOp::Avg)->wait();
  });
  for (const auto& e : errors) require_contains(e, {"all_reduce", "avg", "Int64"});
}

TEST_CASE("local broadcast copies the root's tensor to every rank, for every root", "[parallel]") {
  CpuDevicesGuard guard(4);
  for (int root = 0; root < 4; ++root) {
    std::vector<Tensor> results(4);
    run_ranks(cpu_devices(4), [&](Communicator& comm) {
      Tensor t = make_input(DType::Float32, comm.device(), {2, 9}, comm.rank());
      comm.broadcast(t, root)->wait();
      results[size_t(comm.rank())] = t;
    });
    const Tensor want = make_input(DType::Float32, Device("cpu:0"), {2, 9}, root);
    for (int r = 0; r < 4; ++r) {
      INFO("root " << root << ", rank " << r);
      REQUIRE(results[size_t(r)].to_vector<float>() == want.to_vector<float>());
    }
  }
}

TEST_CASE("local all_gather concatenates the ranks' inputs in rank order", "[parallel]") {
  CpuDevicesGuard guard(4);
  std::vector<Tensor> results(4);
  run_ranks(cpu_devices(4), [&](Communicator& comm) {
    Tensor in = make_input(DType::Int64, comm.device(), {2, 3}, comm.rank());
    Tensor out = Tensor::empty({8, 3}, {DType::Int64, comm.device()});
    comm.all_gather(out, in)->wait();
    results[size_t(comm.rank())] = out;
  });
  std::vector<int64_t> want;
  for (int r = 0; r < 4; ++r) {
    for (int64_t i = 0; i < 6; ++i) want.push_back(int64_t(input_value(DType::Int64, r, i)));
  }
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    REQUIRE(results[size_t(r)].to_vector<int64_t>() == want);
  }
}

TEST_CASE("local reduce_scatter gives rank r the reduced rows of block r", "[parallel]") {
  CpuDevicesGuard guard(4);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
    std::vector<Tensor> results(4);
    run_ranks(cpu_devices(4), [&](Communicator& comm) {
      Tensor in = make_input(DType::Float64, comm.device(), {8, 5}, comm.rank());
      Tensor out = Tensor::empty({2, 5}, {DType::Float64, comm.device()});
      comm.reduce_scatter(out, in, op)->wait();
      results[size_t(comm.rank())] = out;
    });
    const auto full = reference_reduce(op, DType::Float64, 4, 40);
    for (int r = 0; r < 4; ++r) {
      INFO(mg::parallel::reduce_op_name(op) << ", rank " << r);
      std::vector<double> want(full.begin() + r * 10, full.begin() + (r + 1) * 10);
      require_close(results[size_t(r)], want, 1e-12);
    }
  }
}

TEST_CASE("local send and recv pass tensors around a ring in order", "[parallel]") {
  CpuDevicesGuard guard(4);
  std::vector<std::vector<double>> got(4);
  run_ranks(cpu_devices(4), [&](Communicator& comm) {
    const int r = comm.rank(), n = comm.size();
    // Two messages each way, so FIFO order per (src, dst) pair is checked too.
    for (int m = 0; m < 2; ++m) {
      Tensor t = Tensor::empty({3}, {DType::Float32, comm.device()});
      mg::kernels::fill(t, double(10 * r + m));
      comm.send(t, (r + 1) % n)->wait();
      mg::kernels::fill(t, -1.0);  // the message must be a copy, unaffected by later writes
    }
    for (int m = 0; m < 2; ++m) {
      Tensor t = Tensor::empty({3}, {DType::Float32, comm.device()});
      comm.recv(t, (r - 1 + n) % n)->wait();
      for (double v : t.to_vector<double>()) got[size_t(r)].push_back(v);
    }
  });
  for (int r = 0; r < 4; ++r) {
    const double src = (r + 3) % 4;
    REQUIRE(got[size_t(r)] == std::vector<double>{10 * src, 10 * src, 10 * src, 10 * src + 1, 10 * src + 1,
                                                  10 * src + 1});
  }
}

TEST_CASE("local recv into a tensor of another shape is an error naming both", "[parallel]") {
  CpuDevicesGuard guard(2);
  auto errors = rank_errors(2, [](Communicator& comm) {
    if (comm.rank() == 0) {
      comm.send(Tensor::empty({4}, {DType::Float32, comm.device()}), 1);
    } else {
      comm.recv(Tensor::empty({5}, {DType::Float32, comm.device()}), 0);
    }
  });
  CHECK(errors[0].empty());
  require_contains(errors[1], {"recv #0 from rank 0 on rank 1", "[4]", "[5]"});
}

TEST_CASE("local send_recv exchanges around a ring and with plain send and recv, buffered or rendezvous",
          "[parallel]") {
  CpuDevicesGuard guard(3);
  constexpr int n = 3;
  struct Mode {
    const char* name;
    mg::test::Backend run;
  };
  for (const Mode& mode : {Mode{"buffered sends", run_ranks}, Mode{"rendezvous sends", run_ranks_rendezvous}}) {
    for (DType dtype : {DType::Float32, DType::Float64, DType::Int64}) {
      for (int64_t rows : {int64_t(1), int64_t(7), kLarge}) {
        INFO(mode.name << ", " << dtype << ", " << rows << " rows");
        std::vector<Tensor> from_prev(n), from_peer(n);
        const auto errors = mg::test::rank_errors(mode.run, cpu_devices(n), [&](Communicator& comm) {
          comm.set_timeout(std::chrono::seconds(10));  // a wrong wait fails the test instead of hanging it
          const int r = comm.rank();
          const Tensor mine = make_input(dtype, comm.device(), {rows}, r);
          // Every rank at once: to the next, from the previous.
          Tensor got = Tensor::empty({rows}, {dtype, comm.device()});
          comm.send_recv(mine, (r + 1) % n, got, (r + n - 1) % n)->wait();
          from_prev[size_t(r)] = got;
          // Rank 0 exchanges with rank 1, which receives and then sends, numbered after a plain message.
          Tensor reply = Tensor::empty({rows}, {dtype, comm.device()});
          if (r == 0) {
            comm.send(mine, 1)->wait();
            comm.send_recv(mine, 1, reply, 1)->wait();
          } else if (r == 1) {
            comm.recv(reply, 0)->wait();
            comm.recv(reply, 0)->wait();
            comm.send(mine, 0)->wait();
          }
          from_peer[size_t(r)] = reply;
        });
        for (int r = 0; r < n; ++r) {
          INFO("rank " << r);
          CHECK(errors[size_t(r)].empty());
          CHECK(mg::test::values(from_prev[size_t(r)]) ==
                mg::test::values(make_input(dtype, Device("cpu:0"), {rows}, (r + n - 1) % n)));
        }
        CHECK(mg::test::values(from_peer[0]) == mg::test::values(make_input(dtype, Device("cpu:0"), {rows}, 1)));
        CHECK(mg::test::values(from_peer[1]) == mg::test::values(make_input(dtype, Device("cpu:0"), {rows}, 0)));
      }
    }
  }
}

TEST_CASE("local rendezvous sends: a crossing send then recv times out, send_recv exchanges", "[parallel]") {
  CpuDevicesGuard guard(2);
  constexpr auto kTimeout = std::chrono::milliseconds(300);
  std::vector<std::vector<double>> got(2);
  const auto crossing = [&](Communicator& comm) {
    comm.set_timeout(kTimeout);
    const int peer = 1 - comm.rank();
    Tensor t = make_input(DType::Float32, comm.device(), {4}, comm.rank());
    comm.send(t, peer)->wait();
    comm.recv(t, peer)->wait();
    got[size_t(comm.rank())] = mg::test::values(t);
  };
  // Buffered: both sends return at once.
  auto errors = rank_errors(2, crossing);
  CHECK(errors == std::vector<std::string>{"", ""});

  // Rendezvous: each send waits for a receive its peer posts only after its own send.
  const auto start = std::chrono::steady_clock::now();
  errors = mg::test::rank_errors(run_ranks_rendezvous, cpu_devices(2), crossing);
  CHECK(seconds_since(start) < 5.0);
  int timed_out_here = 0;  // ranks whose own wait timed out (the other may see that failure first)
  for (int r = 0; r < 2; ++r) {
    const std::string own = "send #0 to rank " + std::to_string(1 - r) + " on rank " + std::to_string(r);
    require_contains(errors[size_t(r)], {own, "timed out after 300 ms"});
    if (errors[size_t(r)].find(own + " timed out after 300 ms (waiting for rank " + std::to_string(1 - r) + ")") == 0) {
      ++timed_out_here;
    }
  }
  CHECK(timed_out_here >= 1);

  // The same exchange as one send_recv per rank: both halves are posted before either waits.
  got = {{}, {}};
  errors = mg::test::rank_errors(run_ranks_rendezvous, cpu_devices(2), [&](Communicator& comm) {
    comm.set_timeout(kTimeout);
    const int peer = 1 - comm.rank();
    Tensor in = Tensor::empty({4}, {DType::Float32, comm.device()});
    comm.send_recv(make_input(DType::Float32, comm.device(), {4}, comm.rank()), peer, in, peer)->wait();
    got[size_t(comm.rank())] = mg::test::values(in);
  });
  CHECK(errors == std::vector<std::string>{"", ""});
  for (int r = 0; r < 2; ++r) {
    CHECK(got[size_t(r)] == mg::test::values(make_input(DType::Float32, Device("cpu:0"), {4}, 1 - r)));
  }
}

TEST_CASE("local rendezvous send returns once the receive is posted, and fails at once if the receiver left",
          "[parallel]") {
  CpuDevicesGuard guard(2);
  constexpr auto kLate = std::chrono::milliseconds(100);
  double send_took = 0;
  auto errors = mg::test::rank_errors(run_ranks_rendezvous, cpu_devices(2), [&](Communicator& comm) {
    Tensor t = Tensor::empty({4}, {DType::Float32, comm.device()});
    mg::kernels::fill(t, 1.0);
    if (comm.rank() == 0) {
      const auto start = std::chrono::steady_clock::now();
      comm.send(t, 1)->wait();
      send_took = seconds_since(start);
    } else {
      std::this_thread::sleep_for(kLate);
      comm.recv(t, 0)->wait();
    }
  });
  CHECK(errors == std::vector<std::string>{"", ""});
  CHECK(send_took >= 0.9 * std::chrono::duration<double>(kLate).count());

  double waited = 0;
  errors = mg::test::rank_errors(run_ranks_rendezvous, cpu_devices(2), [&](Communicator& comm) {
    if (comm.rank() == 1) return;  // leaves without receiving
    const auto start = std::chrono::steady_clock::now();
    try {
      comm.send(Tensor::empty({4}, {DType::Float32, comm.device()}), 1)->wait();
    } catch (...) {
      waited = seconds_since(start);
      throw;
    }
  });
  CHECK(waited < 1.0);  // not the 300 s default timeout
  require_contains(errors[0], {"send #0 to rank 1 on rank 0: rank 1 has already returned"});
}

TEST_CASE("local send_recv checks its tensors and ranks, and names both halves in its errors", "[parallel]") {
  CpuDevicesGuard guard(2);
  auto errors = rank_errors(2, [](Communicator& comm) {
    const Tensor four = Tensor::empty({4}, {DType::Float32, comm.device()});
    if (comm.rank() == 0) {
      comm.send_recv(four, 1, Tensor::empty({5}, {DType::Float32, comm.device()}), 1);
    } else {
      comm.send_recv(four, 0, Tensor::empty({4}, {DType::Float32, comm.device()}), 0);
    }
  });
  require_contains(errors[0], {"send_recv (send #0 to rank 1, recv #0 from rank 1) on rank 0: got [4] Float32 but "
                               "the receiving tensor is [5] Float32"});
  CHECK(errors[1].empty());
  errors = rank_errors(2, [](Communicator& comm) {
    const Tensor t = Tensor::empty({4}, {DType::Float32, comm.device()});
    if (comm.rank() == 0) comm.send_recv(t, 2, t.clone(), 1);
  });
  require_contains(errors[0], {"send_recv: dst 2 is not a rank of this group of 2"});
}

TEST_CASE("local barrier lets no rank through before every rank arrived", "[parallel]") {
  CpuDevicesGuard guard(4);
  std::atomic<int> arrived{0};
  std::vector<int> seen(4);
  run_ranks(cpu_devices(4), [&](Communicator& comm) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10 * comm.rank()));
    ++arrived;
    comm.barrier()->wait();
    seen[size_t(comm.rank())] = arrived.load();
  });
  REQUIRE(seen == std::vector<int>{4, 4, 4, 4});
}

TEST_CASE("local mismatched collectives fail on every rank naming both calls", "[parallel]") {
  CpuDevicesGuard guard(2);
  auto errors = rank_errors(2, [](Communicator& comm) {
    Tensor t = Tensor::empty({4}, {DType::Float32, comm.device()});
    mg::kernels::fill(t, 1.0);
    if (comm.rank() == 0) {
      comm.all_reduce(t)->wait();
    } else {
      comm.broadcast(t, 0)->wait();
    }
  });
  require_contains(errors[0], {"all_reduce #0 on rank 0 does not match rank 1", "broadcast(root 0, [4], Float32) #0"});
  require_contains(errors[1], {"broadcast #0 on rank 1 does not match rank 0", "all_reduce(sum, [4], Float32) #0"});
}

TEST_CASE("local all_reduce with different shapes or dtypes fails naming both", "[parallel]") {
  CpuDevicesGuard guard(3);
  auto errors = rank_errors(3, [](Communicator& comm) {
    const int64_t n = comm.rank() == 2 ? 5 : 4;
    comm.all_reduce(Tensor::empty({n}, {DType::Float64, comm.device()}))->wait();
  });
  require_contains(errors[0], {"all_reduce #0 on rank 0 does not match rank 2", "[4]", "[5]"});
  require_contains(errors[2], {"all_reduce #0 on rank 2 does not match rank 0"});
  errors = rank_errors(2, [](Communicator& comm) {
    comm.all_reduce(Tensor::empty({4}, {comm.rank() == 0 ? DType::Float32 : DType::Int64, comm.device()}))->wait();
  });
  require_contains(errors[1], {"does not match rank 0", "Float32", "Int64"});
}

TEST_CASE("local collective that a rank never joins times out naming op, sequence, rank and timeout", "[parallel]") {
  CpuDevicesGuard guard(2);
  const auto start = std::chrono::steady_clock::now();
  auto errors = rank_errors(2, [](Communicator& comm) {
    comm.set_timeout(std::chrono::milliseconds(200));
    Tensor t = Tensor::empty({4}, {DType::Float32, comm.device()});
    mg::kernels::fill(t, 1.0);
    comm.all_reduce(t)->wait();
    comm.barrier()->wait();
    if (comm.rank() == 1) comm.all_reduce(t)->wait();  // rank 0 never calls its all_reduce #2...
    if (comm.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(600));  // ...but is alive
  });
  CHECK(seconds_since(start) < 2.0);
  CHECK(errors[0].empty());
  require_contains(errors[1], {"all_reduce #2 on rank 1 timed out after 200 ms (waiting for rank 0)"});
}

TEST_CASE("local recv that never gets a message times out", "[parallel]") {
  CpuDevicesGuard guard(2);
  auto errors = rank_errors(2, [](Communicator& comm) {
    comm.set_timeout(std::chrono::milliseconds(100));
    if (comm.rank() == 1) comm.recv(Tensor::empty({1}, {DType::Int64, comm.device()}), 0);
    if (comm.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));  // alive, silent
  });
  require_contains(errors[1], {"recv #0 from rank 0 on rank 1 timed out after 100 ms (waiting for rank 0)"});
}

TEST_CASE("local rank that throws is rethrown promptly and fails the others' collectives", "[parallel]") {
  CpuDevicesGuard guard(4);
  std::vector<std::string> others(4);
  std::mutex mu;
  const auto start = std::chrono::steady_clock::now();
  try {
    run_ranks(cpu_devices(4), [&](Communicator& comm) {
      if (comm.rank() == 2) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the others start waiting
        throw std::runtime_error("boom on purpose");
      }
      Tensor t = Tensor::empty({16}, {DType::Float32, comm.device()});
      mg::kernels::fill(t, 1.0);
      try {
        comm.all_reduce(t)->wait();
      } catch (const mg::Error& e) {
        std::lock_guard<std::mutex> lock(mu);
        others[size_t(comm.rank())] = e.what();
        throw;
      }
    });
    FAIL("run_ranks did not throw");
  } catch (const mg::Error& e) {
    FAIL("run_ranks rethrew a follow-on error instead of rank 2's: " << e.what());
  } catch (const std::runtime_error& e) {
    REQUIRE(std::string(e.what()) == "boom on purpose");
  }
  CHECK(seconds_since(start) < 1.0);  // the default timeout is 300 s: nobody waited for it
  for (int r : {0, 1, 3}) require_contains(others[size_t(r)], {"all_reduce #0 on rank", "rank 2 failed: boom on purpose"});
}

TEST_CASE("local collectives check their tensors' device, dtype and contiguity", "[parallel]") {
  CpuDevicesGuard guard(2);
  auto errors = rank_errors(2, [](Communicator& comm) {
    comm.set_timeout(std::chrono::milliseconds(100));
    Tensor t = comm.rank() == 0 ? Tensor::empty({4}, {DType::Float32, Device("cpu:1")})
                                : Tensor::empty({4, 2}, {DType::Float32, comm.device()}).transpose(0, 1);
    comm.all_reduce(t);
  });
  require_contains(errors[0], {"all_reduce", "cpu:1", "rank 0 is on cpu:0"});
  require_contains(errors[1], {"all_reduce", "contiguous"});
  REQUIRE_THROWS_AS(run_ranks({}, [](Communicator&) {}), mg::Error);
}

TEST_CASE("local collective whose peer already returned fails at once naming it", "[parallel]") {
  CpuDevicesGuard guard(2);
  const auto start = std::chrono::steady_clock::now();
  auto errors = rank_errors(2, [](Communicator& comm) {
    if (comm.rank() == 0) return;  // leaves without taking part
    comm.all_reduce(Tensor::empty({4}, {DType::Float32, comm.device()}))->wait();
  });
  CHECK(seconds_since(start) < 1.0);  // not the 300 s default timeout
  CHECK(errors[0].empty());
  require_contains(errors[1], {"all_reduce #0 on rank 1", "rank 0 has already returned"});
}

TEST_CASE("local collectives are asynchronous: several in flight, waited for in any order", "[parallel]") {
  CpuDevicesGuard guard(3);
  constexpr int kInFlight = 5;
  std::vector<std::vector<Tensor>> results(3);
  run_ranks(cpu_devices(3), [&](Communicator& comm) {
    std::vector<Tensor> ts;
    std::vector<std::shared_ptr<mg::parallel::Work>> works;
    for (int k = 0; k < kInFlight; ++k) {
      ts.push_back(make_input(DType::Float64, comm.device(), {1000 + k}, comm.rank() + k));
      works.push_back(comm.all_reduce(ts.back()));
    }
    for (int k = kInFlight - 1; k >= 0; --k) works[size_t(k)]->wait();
    results[size_t(comm.rank())] = ts;
  });
  for (int k = 0; k < kInFlight; ++k) {
    std::vector<double> want(size_t(1000 + k), 0.0);
    for (int r = 0; r < 3; ++r) {
      const auto in = make_input(DType::Float64, Device("cpu:0"), {1000 + k}, r + k).to_vector<double>();
      for (size_t i = 0; i < want.size(); ++i) want[i] += in[i];
    }
    for (int r = 0; r < 3; ++r) {
      INFO("all_reduce " << k << ", rank " << r);
      require_close(results[size_t(r)][size_t(k)], want, 1e-12);
    }
  }
}

TEST_CASE("local Work of a failed collective rethrows its error from wait", "[parallel]") {
  CpuDevicesGuard guard(2);
  auto errors = rank_errors(2, [](Communicator& comm) {
    Tensor t = Tensor::empty({comm.rank() + 1}, {DType::Float32, comm.device()});
    auto work = comm.all_reduce(t);  // returns before the ranks compare signatures
    work->wait();
  });
  require_contains(errors[0], {"all_reduce #0 on rank 0 does not match rank 1"});
}

// Broadcast, all_gather, reduce_scatter and send/recv for sizes 1, odd and ~1M per rank, every
// dtype, on 3 ranks: the copies exact, reduce_scatter's sums against the reference.
TEST_CASE("local broadcast, all_gather, reduce_scatter and send/recv for sizes 1, 7, 1M and every dtype",
          "[parallel]") {
  CpuDevicesGuard guard(3);
  constexpr int n = 3;
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int64}) {
    for (int64_t rows : {int64_t(1), int64_t(7), kLarge}) {
      INFO(dtype << ", " << rows << " rows per rank");
      std::vector<Tensor> broadcasted(n), gathered(n), scattered(n), received(n);
      run_ranks(cpu_devices(n), [&](Communicator& comm) {
        const int r = comm.rank();
        Tensor b = make_input(dtype, comm.device(), {rows}, r);
        comm.broadcast(b, 2)->wait();
        Tensor all = Tensor::empty({n * rows}, {dtype, comm.device()});
        comm.all_gather(all, make_input(dtype, comm.device(), {rows}, r))->wait();
        Tensor part = Tensor::empty({rows}, {dtype, comm.device()});
        comm.reduce_scatter(part, make_input(dtype, comm.device(), {n * rows}, r))->wait();
        Tensor got = Tensor::empty({rows}, {dtype, comm.device()});
        comm.send(make_input(dtype, comm.device(), {rows}, r), (r + 1) % n)->wait();
        comm.recv(got, (r + n - 1) % n)->wait();
        broadcasted[size_t(r)] = b, gathered[size_t(r)] = all, scattered[size_t(r)] = part, received[size_t(r)] = got;
      });
      const auto sum = reference_reduce(ReduceOp::Sum, dtype, n, n * rows);
      std::vector<double> all_inputs;
      for (int k = 0; k < n; ++k) {
        const auto v = mg::test::values(make_input(dtype, Device("cpu:0"), {rows}, k));
        all_inputs.insert(all_inputs.end(), v.begin(), v.end());
      }
      for (int r = 0; r < n; ++r) {
        INFO("rank " << r);
        CHECK(mg::test::values(broadcasted[size_t(r)]) == mg::test::values(make_input(dtype, Device("cpu:0"), {rows}, 2)));
        CHECK(mg::test::values(gathered[size_t(r)]) == all_inputs);
        CHECK(mg::test::values(received[size_t(r)]) ==
              mg::test::values(make_input(dtype, Device("cpu:0"), {rows}, (r + n - 1) % n)));
        const std::vector<double> want(sum.begin() + r * rows, sum.begin() + (r + 1) * rows);
        require_all_close(mg::test::values(scattered[size_t(r)]), want, dtype);
      }
    }
  }
}

TEST_CASE("local split: pairs, reversed order, a split of a split and no group, each with its own collectives",
          "[parallel][split]") {
  CpuDevicesGuard guard(4);
  for (int n : {1, 2, 3, 4}) {
    INFO(n << " ranks");
    std::vector<std::string> problems(static_cast<size_t>(n));
    run_ranks(cpu_devices(n), [&](Communicator& comm) { problems[size_t(comm.rank())] = mg::test::check_split(comm); });
    for (const std::string& p : problems) CHECK(p.empty());
  }
}

TEST_CASE("local split: a rank that fails ends its groups' collectives on the other ranks promptly", "[parallel][split]") {
  CpuDevicesGuard guard(4);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> errors(4);
  std::atomic<int> split{0};  // ranks past split(): rank 3 fails after all of them, not in one's split
  const auto ranks = [&](Communicator& comm) {
    comm.set_timeout(std::chrono::seconds(60));
    const auto column = comm.split(comm.rank() % 2, comm.rank());  // {0, 2} and {1, 3}
    ++split;
    if (comm.rank() == 3) {
      while (split < 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      throw mg::Error("rank 3 gives up");  // run_ranks aborts every group
    }
    try {
      column->all_reduce(mg::full({2}, 1.0, {.device = comm.device()}))->wait();  // rank 1 waits for rank 3
    } catch (const mg::Error& e) {
      errors[size_t(comm.rank())] = e.what();
    }
  };
  REQUIRE_THROWS_WITH(run_ranks(cpu_devices(4), ranks), "rank 3 gives up");
  CHECK(mg::test::seconds_since(start) < 30);
  mg::test::require_contains(errors[1], {"all_reduce #0 on rank 0", "rank 3 failed: rank 3 gives up"});
}

TEST_CASE("local split: a group member that has returned is named by its rank in the group and in run_ranks",
          "[parallel][split]") {
  CpuDevicesGuard guard(4);
  const auto errors = mg::test::rank_errors(run_ranks, cpu_devices(4), [](Communicator& comm) {
    const auto column = comm.split(comm.rank() % 2, comm.rank());
    if (comm.rank() == 3) return;  // leaves without taking part
    column->all_reduce(mg::full({2}, 1.0, {.device = comm.device()}))->wait();
  });
  mg::test::require_contains(errors[1], {"all_reduce #0 on rank 0 (run_ranks' rank 1): rank 1 (run_ranks' rank 3) "
                                         "has already returned"});
}

// As processes started with one seed would: every rank draws the launcher's next numbers, whatever
// the other ranks draw meanwhile, and the launcher's generator stays where it was.
TEST_CASE("local ranks each draw from a generator of their own that starts at the caller's state", "[parallel]") {
  CpuDevicesGuard guard(4);
  mg::manual_seed(17);
  std::vector<std::vector<float>> want;
  for (int i = 0; i < 20; ++i) want.push_back(mg::rand({5}).to_vector<float>());
  mg::manual_seed(17);
  std::vector<std::vector<std::vector<float>>> got(4);
  run_ranks(cpu_devices(4), [&](Communicator& comm) {
    for (int i = 0; i < 20; ++i) got[size_t(comm.rank())].push_back(mg::rand({5}).to_vector<float>());
  });
  for (int r = 0; r < 4; ++r) CHECK(got[size_t(r)] == want);
  CHECK(mg::get_rng_state().offset == 0);
}

TEST_CASE("run_ranks threads compute in the caller's grad, anomaly and autocast modes", "[parallel]") {
  CpuDevicesGuard guard(2);
  std::vector<int> seen(2, 0);  // per rank: grad off, anomaly on and bf16 autocast each add one
  {
    mg::NoGradGuard no_grad;
    mg::DetectAnomalyGuard anomaly;
    const mg::AutocastGuard autocast(mg::Precision::BFloat16);
    run_ranks(cpu_devices(2), [&](Communicator& comm) {
      seen[size_t(comm.rank())] = int(!mg::is_grad_enabled()) + int(mg::is_anomaly_enabled()) +
                                  int(mg::autocast_precision() == mg::Precision::BFloat16);
    });
  }
  CHECK(seen == std::vector<int>{3, 3});
  run_ranks(cpu_devices(2), [&](Communicator& comm) {  // and the defaults outside the guards
    seen[size_t(comm.rank())] = int(!mg::is_grad_enabled()) + int(mg::is_anomaly_enabled()) +
                                int(mg::autocast_precision() == mg::Precision::BFloat16);
  });
  CHECK(seen == std::vector<int>{0, 0});
}

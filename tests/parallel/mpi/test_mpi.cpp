// tests/parallel/mpi/test_mpi.cpp — the mpi backend (parallel/comm/mpi.cpp), run under mpiexec:
// every collective and send_recv against a reference each rank computes itself, bit-identity
// with the local backend in deterministic mode, and the failures (timeouts, MG_DEBUG_COLL mismatches, bad
// arguments).
//
// Each TEST_CASE is its own ctest entry, its own mpiexec (CMakeLists.txt here reads the
// TEST_CASE lines: keep each on one line). Tag [np4] runs it on 4 ranks as well as on 2;
// tag [debug_coll] runs it with MG_DEBUG_COLL=1. Every rank runs the same test case; a rank
// records what it saw and checks it once the communication is over, so that a failed check on
// one rank never leaves the others waiting in a collective.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/cpu_devices_guard.h"
#include "multigrad/kernels/kernels.h"
#include "multigrad/parallel/comm/local.h"
#include "multigrad/parallel/comm/mpi.h"
#include "parallel/parallel_test_util.h"
#include "test_util.h"

using mg::Device;
using mg::DType;
using mg::Tensor;
using mg::parallel::Communicator;
using mg::parallel::ReduceOp;
using mg::test::cpu_devices;
using mg::test::CpuDevicesGuard;
using mg::test::DeterministicScope;
using mg::test::input_value;
using mg::test::make_input;
using mg::test::reference_value;
using mg::test::require_contains;
using mg::test::seconds_since;

namespace {

constexpr int64_t kLarge = (1 << 20) + 3;  // 4-8 MB: MPI's large-message path; odd, not divisible by n
// A bug fails a test within a minute instead of hanging for the default 300 s.
constexpr std::chrono::seconds kTestTimeout{60};
const std::vector<DType> kAllDTypes = {DType::Float32, DType::Float64, DType::Int64};
const std::vector<DType> kFloatDTypes = {DType::Float32, DType::Float64};

std::unique_ptr<Communicator> world() {
  auto comm = mg::parallel::mpi_world();
  comm->set_timeout(kTestTimeout);
  return comm;
}

// The index of the first element of got that is not close to want(i), or got's size if none is.
// One REQUIRE per tensor: a million of them would dominate the run time.
template <class Want>
size_t first_mismatch(const Tensor& got, DType dtype, Want want) {
  const auto values = mg::test::values(got);
  const double rtol = dtype == DType::Float32 ? 1e-5 : 1e-12;
  for (size_t i = 0; i < values.size(); ++i) {
    const double w = want(int64_t(i));
    if (std::abs(values[i] - w) > 1e-5 + rtol * std::abs(w)) return i;
  }
  return values.size();
}

// The message of the mg::Error fn throws, "" if it throws none.
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const mg::Error& e) {
    return e.what();
  }
  return "";
}

void check_all_reduce(ReduceOp op, const std::vector<DType>& dtypes) {
  auto comm = world();
  const int n = comm->size();
  for (int64_t numel : {int64_t(1), int64_t(7), kLarge}) {
    for (DType dtype : dtypes) {
      Tensor t = make_input(dtype, comm->device(), {numel}, comm->rank());
      comm->all_reduce(t, op)->wait();
      INFO(mg::parallel::reduce_op_name(op) << " " << dtype << ", " << numel << " elements, rank " << comm->rank()
                                            << " of " << n);
      REQUIRE(first_mismatch(t, dtype, [&](int64_t i) { return reference_value(op, dtype, n, i); }) == size_t(numel));
    }
  }
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), size_t(a.numel()) * a.element_size()) == 0;
}

// Runs fn on the local backend, one thread per rank on cpu:0..n-1 of this process, and returns
// rank 0's result (fn returns what it computed).
Tensor local_result(int n, const std::function<Tensor(Communicator&)>& fn) {
  CpuDevicesGuard guard(n);
  Tensor result;
  mg::parallel::run_ranks(cpu_devices(n), [&](Communicator& comm) {
    Tensor t = fn(comm);
    if (comm.rank() == 0) result = t;
  });
  return result;
}

}  // namespace

TEST_CASE("mpi world has the rank and size mpirun set and each mpi_world is a communicator of its own", "[mpi][np4]") {
  REQUIRE(mg::parallel::mpi_available());
  auto a = world();
  auto b = world();
  CHECK(a->rank() == mg::parallel::mpi_env_rank());
  CHECK(a->size() == mg::parallel::mpi_env_size());
  CHECK(a->device() == Device("cpu:0"));
  // Interleaved on two communicators: each has its own order and sequence numbers.
  Tensor x = mg::full({3}, 1.0), y = mg::full({3}, 2.0);
  auto wx = a->all_reduce(x);
  auto wy = b->all_reduce(y, ReduceOp::Max);
  wy->wait();
  wx->wait();
  CHECK(x.to_vector<float>() == std::vector<float>(3, float(a->size())));
  CHECK(y.to_vector<float>() == std::vector<float>(3, 2.f));
}

TEST_CASE("mpi split: pairs, reversed order, a split of a split and no group, each with its own collectives", "[mpi][np4]") {
  auto comm = world();
  REQUIRE(mg::test::check_split(*comm).empty());
}

TEST_CASE("mpi all_reduce sum matches the reference for sizes 1, 7 and 1M in every dtype", "[mpi][np4]") {
  check_all_reduce(ReduceOp::Sum, kAllDTypes);
}

TEST_CASE("mpi all_reduce avg matches the reference for sizes 1, 7 and 1M in Float32 and Float64", "[mpi][np4]") {
  check_all_reduce(ReduceOp::Avg, kFloatDTypes);
}

TEST_CASE("mpi all_reduce max matches the reference for sizes 1, 7 and 1M in every dtype", "[mpi]") {
  check_all_reduce(ReduceOp::Max, kAllDTypes);
}

TEST_CASE("mpi all_reduce keeps a 2-d tensor's shape", "[mpi]") {
  auto comm = world();
  Tensor t = make_input(DType::Float64, comm->device(), {3, 5}, comm->rank());
  comm->all_reduce(t)->wait();
  REQUIRE(t.shape() == mg::Shape{3, 5});
  const int n = comm->size();
  const auto want = [&](int64_t i) { return reference_value(ReduceOp::Sum, DType::Float64, n, i); };
  REQUIRE(first_mismatch(t, DType::Float64, want) == 15);
}

TEST_CASE("mpi broadcast copies the root's tensor to every rank for every root and dtype", "[mpi][np4]") {
  auto comm = world();
  for (int root = 0; root < comm->size(); ++root) {
    for (int64_t numel : {int64_t(1), int64_t(7), kLarge}) {
      for (DType dtype : kAllDTypes) {
        Tensor t = make_input(dtype, comm->device(), {numel}, comm->rank());
        comm->broadcast(t, root)->wait();
        INFO("root " << root << ", " << dtype << ", " << numel << " elements, rank " << comm->rank());
        REQUIRE(same_bytes(t, make_input(dtype, comm->device(), {numel}, root)));
      }
    }
  }
}

TEST_CASE("mpi all_gather concatenates the ranks' inputs in rank order", "[mpi][np4]") {
  auto comm = world();
  const int n = comm->size();
  for (const mg::Shape& shape : {mg::Shape{1}, mg::Shape{7, 3}, mg::Shape{kLarge}}) {
    for (DType dtype : kAllDTypes) {
      Tensor in = make_input(dtype, comm->device(), shape, comm->rank());
      mg::Shape out_shape = shape;
      out_shape[0] *= n;
      Tensor out = Tensor::empty(out_shape, {dtype, comm->device()});
      comm->all_gather(out, in)->wait();
      INFO(dtype << " " << mg::to_string(shape) << ", rank " << comm->rank());
      for (int r = 0; r < n; ++r) {
        INFO("block of rank " << r);
        REQUIRE(same_bytes(out.slice(0, r * shape[0], (r + 1) * shape[0]).contiguous(),
                           make_input(dtype, comm->device(), shape, r)));
      }
    }
  }
}

TEST_CASE("mpi reduce_scatter gives rank r the reduced block r for every op and dtype", "[mpi][np4]") {
  auto comm = world();
  const int n = comm->size(), me = comm->rank();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
    for (int64_t rows : {int64_t(1), int64_t(7), kLarge}) {
      for (DType dtype : op == ReduceOp::Avg ? kFloatDTypes : kAllDTypes) {
        Tensor in = make_input(dtype, comm->device(), {n * rows}, me);
        Tensor out = Tensor::empty({rows}, {dtype, comm->device()});
        comm->reduce_scatter(out, in, op)->wait();
        INFO(mg::parallel::reduce_op_name(op) << " " << dtype << ", " << rows << " rows per rank, rank " << me);
        REQUIRE(first_mismatch(out, dtype, [&](int64_t i) { return reference_value(op, dtype, n, me * rows + i); }) ==
                size_t(rows));
      }
    }
  }
}

TEST_CASE("mpi send and recv pass tensors around a ring in order even when every rank sends first", "[mpi][np4]") {
  auto comm = world();
  const int r = comm->rank(), n = comm->size();
  const int next = (r + 1) % n, prev = (r - 1 + n) % n;
  // A small message, then a large one (which MPI delivers only once the receiver asks for it):
  // every rank sends both before it receives, which must not deadlock.
  std::vector<Tensor> sent;
  for (int64_t numel : {int64_t(3), kLarge}) {
    Tensor t = Tensor::empty({numel}, {DType::Float32, comm->device()});
    mg::kernels::fill(t, double(10 * r + numel % 7));
    comm->send(t, next)->wait();
    mg::kernels::fill(t, -1.0);  // the message is a copy, unaffected by later writes
    sent.push_back(t);
  }
  std::vector<Tensor> got;
  for (int64_t numel : {int64_t(3), kLarge}) {
    Tensor t = Tensor::empty({numel}, {DType::Float32, comm->device()});
    comm->recv(t, prev)->wait();
    got.push_back(t);
  }
  comm->barrier()->wait();  // every background send has been received
  for (size_t m = 0; m < got.size(); ++m) {
    const float want = float(10 * prev + got[m].numel() % 7);
    INFO("message " << m << " on rank " << r);
    REQUIRE(got[m].to_vector<float>() == std::vector<float>(size_t(got[m].numel()), want));
  }
}

TEST_CASE("mpi recv into a tensor of another shape is an error naming both and the next message still arrives", "[mpi]") {
  auto comm = world();
  std::string error;
  Tensor second = Tensor::empty({2}, {DType::Int64, comm->device()});
  if (comm->rank() == 0) {
    comm->send(mg::full({4}, 1.0), 1);
    comm->send(mg::full({2}, 7.0, {.dtype = DType::Int64}), 1)->wait();
  } else if (comm->rank() == 1) {
    error = error_of([&] { comm->recv(Tensor::empty({5}, {DType::Float32, comm->device()}), 0)->wait(); });
    comm->recv(second, 0)->wait();
  }
  comm->barrier()->wait();
  if (comm->rank() == 1) {
    require_contains(error, {"recv #0 from rank 0 on rank 1: got [4] Float32 but the receiving tensor is [5] Float32"});
    REQUIRE(second.to_vector<int64_t>() == std::vector<int64_t>{7, 7});
  }
}

TEST_CASE("mpi send_recv exchanges tensors both ways at once, with send_recv or plain send and recv on the peer", "[mpi]") {
  auto comm = world();
  const int r = comm->rank(), peer = 1 - r;  // 2 ranks
  // Both ranks at once, in every dtype; the large message goes by MPI's rendezvous protocol.
  std::vector<std::pair<std::string, size_t>> mismatches;  // (what, first mismatch) where got != want
  for (DType dtype : kAllDTypes) {
    for (int64_t rows : {int64_t(1), int64_t(7), kLarge}) {
      Tensor got = Tensor::empty({rows}, {dtype, comm->device()});
      comm->send_recv(make_input(dtype, comm->device(), {rows}, r), peer, got, peer)->wait();
      const size_t at = first_mismatch(got, dtype, [&](int64_t i) { return input_value(dtype, peer, i); });
      if (at != size_t(rows)) mismatches.emplace_back(mg::dtype_name(dtype) + (" " + std::to_string(rows)), at);
    }
  }
  // Rank 0 exchanges; rank 1 receives, then sends.
  Tensor reply = Tensor::empty({kLarge}, {DType::Float64, comm->device()});
  const Tensor mine = make_input(DType::Float64, comm->device(), {kLarge}, r);
  if (r == 0) {
    comm->send_recv(mine, 1, reply, 1)->wait();
  } else {
    comm->recv(reply, 0)->wait();
    comm->send(mine, 0)->wait();
  }
  // A shape that differs is named, and the next message still lines up.
  std::string error;
  Tensor next = Tensor::empty({2}, {DType::Int64, comm->device()});
  if (r == 0) {
    const Tensor five = Tensor::empty({5}, {DType::Float32, comm->device()});
    error = error_of([&] { comm->send_recv(mg::full({3}, 1.0), 1, five, 1)->wait(); });
    comm->recv(next, 1)->wait();
  } else {
    comm->send_recv(mg::full({4}, 1.0), 0, Tensor::empty({3}, {DType::Float32, comm->device()}), 0)->wait();
    comm->send(mg::full({2}, 7.0, {.dtype = DType::Int64}), 0)->wait();
  }
  comm->barrier()->wait();
  for (const auto& [what, at] : mismatches) FAIL("rank " << r << ", " << what << ": first mismatch at " << at);
  REQUIRE(first_mismatch(reply, DType::Float64, [&](int64_t i) { return input_value(DType::Float64, peer, i); }) ==
          size_t(kLarge));
  if (r == 0) {
    require_contains(error, {"send_recv (send #", "on rank 0: got [4] Float32 but the receiving tensor is [5] Float32"});
    REQUIRE(next.to_vector<int64_t>() == std::vector<int64_t>{7, 7});
  }
}

TEST_CASE("mpi barrier lets no rank through before every rank arrived", "[mpi][np4]") {
  auto comm = world();
  constexpr int kStaggerMs = 100;
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(kStaggerMs * comm->rank()));
  comm->barrier()->wait();
  // Rank 0 arrived first and waited for the last rank, kStaggerMs * (n - 1) ms behind it.
  if (comm->rank() == 0) REQUIRE(seconds_since(start) >= 0.9 * kStaggerMs * (comm->size() - 1) / 1000.0);
}

TEST_CASE("mpi several all_reduces in flight complete when waited in reverse order", "[mpi][np4]") {
  auto comm = world();
  const int n = comm->size();
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<mg::parallel::Work>> works;
  for (int k = 0; k < 6; ++k) {
    const DType dtype = kAllDTypes[size_t(k) % kAllDTypes.size()];
    const int64_t numel = k % 2 == 0 ? 7 + k : kLarge + k;
    tensors.push_back(make_input(dtype, comm->device(), {numel}, comm->rank()));
    works.push_back(comm->all_reduce(tensors.back()));
  }
  for (size_t k = works.size(); k-- > 0;) works[k]->wait();
  for (size_t k = 0; k < tensors.size(); ++k) {
    const DType dtype = tensors[k].dtype();
    INFO("all_reduce " << k << ", " << dtype << ", rank " << comm->rank());
    REQUIRE(first_mismatch(tensors[k], dtype, [&](int64_t i) { return reference_value(ReduceOp::Sum, dtype, n, i); }) ==
            size_t(tensors[k].numel()));
  }
}

TEST_CASE("mpi deterministic all_reduce is bit-identical to the local backend's rank-order fold", "[mpi][np4]") {
  DeterministicScope deterministic(true);
  auto comm = world();
  const int n = comm->size();
  struct Case {
    ReduceOp op;
    DType dtype;
    int64_t numel;
  };
  for (const Case& c : {Case{ReduceOp::Sum, DType::Float32, 7}, Case{ReduceOp::Sum, DType::Float32, kLarge},
                        Case{ReduceOp::Avg, DType::Float64, kLarge}, Case{ReduceOp::Max, DType::Float32, 1001}}) {
    Tensor mine = make_input(c.dtype, comm->device(), {c.numel}, comm->rank());
    comm->all_reduce(mine, c.op)->wait();
    const Tensor local = local_result(n, [&](Communicator& lc) {
      Tensor t = make_input(c.dtype, lc.device(), {c.numel}, lc.rank());
      lc.all_reduce(t, c.op)->wait();
      return t;
    });
    INFO(mg::parallel::reduce_op_name(c.op) << " " << c.dtype << ", " << c.numel << " elements, rank " << comm->rank());
    REQUIRE(same_bytes(mine, local));
  }
  // And both equal one device accumulating the ranks' float32 tensors in order: ((t0 + t1) + ...).
  Tensor mine = make_input(DType::Float32, comm->device(), {kLarge}, comm->rank());
  comm->all_reduce(mine)->wait();
  std::vector<float> want(static_cast<size_t>(kLarge));
  for (int64_t i = 0; i < kLarge; ++i) {
    float acc = float(input_value(DType::Float32, 0, i));
    for (int r = 1; r < n; ++r) acc += float(input_value(DType::Float32, r, i));
    want[size_t(i)] = acc;
  }
  REQUIRE(std::memcmp(mine.data<float>(), want.data(), want.size() * sizeof(float)) == 0);
}

TEST_CASE("mpi deterministic reduce_scatter is bit-identical to the local backend", "[mpi][np4]") {
  DeterministicScope deterministic(true);
  auto comm = world();
  const int n = comm->size(), me = comm->rank();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
    const int64_t rows = 4099;
    Tensor out = Tensor::empty({rows, 3}, {DType::Float32, comm->device()});
    comm->reduce_scatter(out, make_input(DType::Float32, comm->device(), {n * rows, 3}, me), op)->wait();
    // Rank 0 of the local group keeps block 0; the MPI rank `me` keeps block `me`: compare all of
    // them by having each local rank return its block and picking this rank's.
    std::vector<Tensor> blocks(static_cast<size_t>(n));
    local_result(n, [&](Communicator& lc) {
      Tensor lout = Tensor::empty({rows, 3}, {DType::Float32, lc.device()});
      lc.reduce_scatter(lout, make_input(DType::Float32, lc.device(), {n * rows, 3}, lc.rank()), op)->wait();
      blocks[size_t(lc.rank())] = lout;
      return lout;
    });
    INFO(mg::parallel::reduce_op_name(op) << ", rank " << me);
    REQUIRE(same_bytes(out, blocks[size_t(me)]));
  }
}

TEST_CASE("mpi mismatched collectives fail on every rank naming both calls under MG_DEBUG_COLL", "[mpi][debug_coll]") {
  const char* debug = std::getenv("MG_DEBUG_COLL");
  INFO("this test runs with MG_DEBUG_COLL=1 (its ctest entry sets it)");
  REQUIRE((debug != nullptr && std::string(debug) == "1"));
  auto comm = world();
  const int r = comm->rank();
  Tensor t = mg::full({4}, 1.0);
  // #0: all_reduce against broadcast.
  const std::string op_error = error_of([&] {
    if (r == 0) {
      comm->all_reduce(t)->wait();
    } else {
      comm->broadcast(t, 0)->wait();
    }
  });
  // #1: shapes [4] and [5].
  const std::string shape_error = error_of([&] { comm->all_reduce(mg::full({r == 0 ? 4 : 5}, 1.0))->wait(); });
  // #2: dtypes.
  const std::string dtype_error = error_of([&] {
    comm->all_reduce(mg::full({4}, 1.0, {.dtype = r == 0 ? DType::Float32 : DType::Int64}))->wait();
  });
  // #3: no mismatch; the communicator still works.
  comm->all_reduce(t)->wait();
  if (r == 0) {
    require_contains(op_error, {"all_reduce #0 on rank 0 does not match rank 1: rank 0 called all_reduce(sum, [4], "
                                "Float32) #0, rank 1 called broadcast(root 0, [4], Float32) #0"});
    require_contains(shape_error, {"all_reduce #1 on rank 0 does not match rank 1", "[4]", "[5]"});
    require_contains(dtype_error, {"all_reduce #2 on rank 0 does not match rank 1", "Float32", "Int64"});
  } else {
    require_contains(op_error, {"broadcast #0 on rank ", " does not match rank 0: rank ",
                                " called broadcast(root 0, [4], Float32) #0, rank 0 called all_reduce(sum, [4], "
                                "Float32) #0"});
    require_contains(shape_error, {"all_reduce #1 on rank ", "does not match rank 0"});
    require_contains(dtype_error, {"all_reduce #2 on rank ", "does not match rank 0"});
  }
  REQUIRE(t.to_vector<float>() == std::vector<float>(4, float(comm->size())));
}

// Ranks started with different settings call collectives of other sizes: by default (no
// MG_DEBUG_COLL in this test's environment) that is an error naming both calls on every rank,
// where OpenMPI itself crashed.
TEST_CASE("mpi collectives of different sizes fail on every rank by default, naming both calls", "[mpi]") {
  REQUIRE(std::getenv("MG_DEBUG_COLL") == nullptr);
  auto comm = world();
  const int r = comm->rank();
  const std::string error = error_of([&] { comm->all_reduce(mg::full({r == 0 ? 1000 : 10}, 1.0))->wait(); });
  require_contains(error, {"all_reduce #0 on rank " + std::to_string(r) + " does not match rank "});
  require_contains(error, {"[1000]", "[10]"});
  Tensor t = mg::full({4}, 1.0);
  comm->all_reduce(t)->wait();  // the communicator still works
  REQUIRE(t.to_vector<float>() == std::vector<float>(4, float(comm->size())));
}

TEST_CASE("mpi collective that a rank skips times out naming op sequence rank and timeout and breaks the communicator", "[mpi]") {
  auto comm = world();
  auto side = world();  // where the ranks meet again afterwards
  Tensor t = mg::full({4}, 1.0);
  comm->all_reduce(t)->wait();  // #0 on every rank
  std::string timed_out, later;
  double waited = 0;
  if (comm->rank() == 0) {
    comm->set_timeout(std::chrono::milliseconds(500));
    const auto start = std::chrono::steady_clock::now();
    timed_out = error_of([&] { comm->all_reduce(t)->wait(); });  // #1: the other ranks never call it
    waited = seconds_since(start);
    later = error_of([&] { comm->barrier()->wait(); });
  }
  side->barrier()->wait();
  if (comm->rank() == 0) {
    require_contains(timed_out, {"all_reduce #1 on rank 0 timed out after 500 ms"});
    CHECK(waited >= 0.45);
    CHECK(waited < 5.0);
    require_contains(later, {"barrier #2 on rank 0: this communicator failed earlier: all_reduce #1 on rank 0 timed "
                             "out after 500 ms"});
  }
}

TEST_CASE("mpi recv that never gets a message times out naming the peer", "[mpi]") {
  auto comm = world();
  auto side = world();
  std::string error;
  if (comm->rank() == 1) {
    comm->set_timeout(std::chrono::milliseconds(300));
    error = error_of([&] { comm->recv(Tensor::empty({1}, {DType::Int64, comm->device()}), 0)->wait(); });
  }
  side->barrier()->wait();
  if (comm->rank() == 1) {
    require_contains(error, {"recv #0 from rank 0 on rank 1 timed out after 300 ms (waiting for rank 0)"});
  }
}

TEST_CASE("mpi collectives check their devices, tensors and ranks before communicating", "[mpi]") {
  CpuDevicesGuard guard(2);
  require_contains(error_of([] { mg::parallel::mpi_world(Device("cuda:0")); }),
                   {"mpi_world: the mpi backend takes CPU tensors; got cuda:0 — use the nccl backend"});
  auto comm = world();
  const Device dev = comm->device();
  require_contains(error_of([&] { comm->all_reduce(Tensor::empty({4}, {DType::Float32, Device("cpu:1")})); }),
                   {"all_reduce: tensor is on cpu:1 but rank ", " is on cpu:0"});
  require_contains(error_of([&] { comm->broadcast(Tensor::empty({4, 2}, {DType::Float32, dev}).transpose(0, 1), 0); }),
                   {"broadcast: tensor [2, 4] must be contiguous"});
  require_contains(error_of([&] { comm->all_reduce(Tensor::empty({4}, {DType::Bool, dev})); }),
                   {"all_reduce: dtype must be Float32, Float64 or Int64 (got Bool)"});
  require_contains(error_of([&] { comm->all_reduce(Tensor::empty({4}, {DType::Int64, dev}), ReduceOp::Avg); }),
                   {"all_reduce: avg needs a floating dtype (got Int64)"});
  auto floats = [&](int64_t numel) { return Tensor::empty({numel}, {DType::Float32, dev}); };
  require_contains(error_of([&] { comm->all_gather(floats(3), floats(2)); }),
                   {"all_gather: output must be [", "for input [2]", "(got [3] Float32)"});
  require_contains(error_of([&] { comm->reduce_scatter(floats(1), floats(comm->size() + 1)); }),
                   {"reduce_scatter: input [", "must have a first dimension divisible by the"});
  require_contains(error_of([&] { comm->broadcast(floats(1), comm->size()); }),
                   {"broadcast: root ", "is not a rank of this group of"});
  require_contains(error_of([&] { comm->send(floats(1), -1); }),
                   {"send: dst -1 is not a rank of this group of"});
  require_contains(error_of([&] { comm->set_timeout(std::chrono::milliseconds(0)); }),
                   {"set_timeout: timeout must be positive (got 0 ms)"});
  // None of these reached MPI: the next collective is #0 on every rank and succeeds.
  Tensor t = mg::full({2}, 1.0);
  comm->all_reduce(t)->wait();
  REQUIRE(t.to_vector<float>() == std::vector<float>(2, float(comm->size())));
}

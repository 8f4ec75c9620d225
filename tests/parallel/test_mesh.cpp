// tests/parallel/test_mesh.cpp — DeviceMesh (parallel/mesh.cpp) on the local backend: row-major
// coordinates, each dimension's communicator holding the right ranks in the right order, three
// dimensions, and the errors; parse_mesh.
#include <string>
#include <vector>

#include "core/cpu_devices_guard.h"
#include "multigrad/parallel/mesh.h"
#include "parallel/parallel_test_util.h"

using mg::Tensor;
using mg::parallel::Communicator;
using mg::parallel::DeviceMesh;
using mg::parallel::MeshDims;
using mg::parallel::run_ranks;
using namespace mg::test;

namespace {

// Each rank's world rank summed over the communicator of `dim`, as rank threads record it.
struct Seen {
  std::vector<int> coordinate;  // per dimension
  std::vector<double> sum;      // per dimension: the sum of world ranks in this rank's group
  std::vector<int> rank;        // per dimension: this rank's rank in that group
};

std::vector<Seen> run_mesh(int n, const MeshDims& dims) {
  std::vector<Seen> seen(static_cast<size_t>(n));
  run_ranks(cpu_devices(n), [&](Communicator& comm) {
    const DeviceMesh mesh(comm, dims);
    Seen& s = seen[size_t(comm.rank())];
    for (const auto& [name, size] : dims) {
      Tensor t = mg::full({1}, double(comm.rank()), {.device = comm.device()});
      mesh.comm(name).all_reduce(t)->wait();
      s.coordinate.push_back(mesh.coordinate(name));
      s.sum.push_back(t.to(mg::Device("cpu:0")).to_vector<double>()[0]);
      s.rank.push_back(mesh.comm(name).rank());
    }
  });
  return seen;
}

}  // namespace

TEST_CASE("DeviceMesh dp=2, tp=2: rows of ranks 0 1 and 2 3, tp groups 0 1 and 2 3, dp groups 0 2 and 1 3",
          "[parallel][mesh]") {
  CpuDevicesGuard guard(4);
  const auto seen = run_mesh(4, {{"dp", 2}, {"tp", 2}});
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    const Seen& s = seen[size_t(r)];
    CHECK(s.coordinate == std::vector<int>{r / 2, r % 2});
    CHECK(s.rank == s.coordinate);  // a group ranks its members by their coordinate along it
    CHECK(s.sum[0] == double(r % 2 + r % 2 + 2));  // dp: r % 2 and r % 2 + 2
    CHECK(s.sum[1] == double(r / 2 * 4 + 1));      // tp: 2 (r / 2) and 2 (r / 2) + 1
  }
}

TEST_CASE("DeviceMesh dp=2, pp=2, tp=2 on 8 ranks, and a one-dimensional mesh", "[parallel][mesh]") {
  CpuDevicesGuard guard(8);
  const auto seen = run_mesh(8, {{"dp", 2}, {"pp", 2}, {"tp", 2}});
  for (int r = 0; r < 8; ++r) {
    INFO("rank " << r);
    const Seen& s = seen[size_t(r)];
    CHECK(s.coordinate == std::vector<int>{r / 4, r / 2 % 2, r % 2});
    CHECK(s.sum[0] == double(2 * (r % 4) + 4));      // dp: r mod 4 and that + 4
    CHECK(s.sum[1] == double(2 * (r - r / 2 % 2 * 2) + 2));  // pp: the rank with pp 0, and that + 2
    CHECK(s.sum[2] == double(2 * (r / 2 * 2) + 1));  // tp: the even rank and the odd one
  }
  const auto flat = run_mesh(3, {{"dp", 3}});
  for (int r = 0; r < 3; ++r) CHECK(flat[size_t(r)].sum[0] == 3.0);
}

TEST_CASE("DeviceMesh errors name the mesh and the sizes, and parse_mesh reads name=size lists", "[parallel][mesh]") {
  CpuDevicesGuard guard(4);
  const auto errors = rank_errors(run_ranks, cpu_devices(4), [](Communicator& comm) {
    DeviceMesh mesh(comm, {{"dp", 2}, {"tp", 3}});
  });
  require_contains(errors[0], {"the mesh dp=2, tp=3 has 6 ranks, but the communicator has 4"});
  const auto twice = rank_errors(run_ranks, cpu_devices(4), [](Communicator& comm) {
    DeviceMesh mesh(comm, {{"dp", 2}, {"dp", 2}});
  });
  require_contains(twice[0], {"dimension 'dp' is listed twice"});
  const auto unknown = rank_errors(run_ranks, cpu_devices(2), [](Communicator& comm) {
    DeviceMesh mesh(comm, {{"dp", 2}});
    mesh.comm("tp");
  });
  require_contains(unknown[1], {"no dimension 'tp' in the mesh dp=2"});

  CHECK(mg::parallel::parse_mesh("dp=2,tp=2") == MeshDims{{"dp", 2}, {"tp", 2}});
  CHECK(mg::parallel::parse_mesh("pp=4") == MeshDims{{"pp", 4}});
  for (const std::string bad : {"", "dp", "dp=", "=2", "dp=0", "dp=2,", "dp=2x", "dp=-1"}) {
    INFO(bad);
    require_error([&] { mg::parallel::parse_mesh(bad); }, {"mesh '" + bad + "'", "name=size"});
  }
}

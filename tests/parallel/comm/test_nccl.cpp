// tests/parallel/comm/test_nccl.cpp — what the nccl backend (parallel/comm/nccl.cpp) says before it needs a
// GPU: a build without NCCL says how to get it; a build with it refuses CPU devices, pointing to
// the backends that take them. Moving data is tested in tests/cuda/test_cuda_nccl.cpp.
#include "multigrad/parallel/comm/nccl.h"
#include "test_util.h"

using mg::Device;
using mg::parallel::Communicator;
using mg::parallel::nccl_available;
using mg::parallel::nccl_world;
using mg::parallel::run_ranks_nccl;
using mg::test::require_error;

namespace {

void nothing(Communicator&) {}

}  // namespace

TEST_CASE("nccl in a build without NCCL says so and how to get it", "[parallel][nccl]") {
  if (nccl_available()) {
    SUCCEED("skipped: this build has the nccl backend (NCCL was found when configuring)");
    return;
  }
  require_error([] { run_ranks_nccl({Device("cuda:0")}, nothing); },
                {"run_ranks_nccl: this build has no NCCL backend", "NCCL_ROOT", "run_ranks"});
  require_error([] { nccl_world(Device("cuda:0")); }, {"nccl_world: this build has no NCCL backend"});
}

TEST_CASE("nccl refuses CPU devices and no devices, naming them", "[parallel][nccl]") {
  if (!nccl_available()) {
    SUCCEED("skipped: this build has no nccl backend (the test above checks what it says)");
    return;
  }
  require_error([] { run_ranks_nccl({Device("cpu:0")}, nothing); },
                {"run_ranks_nccl: cpu:0 is not a CUDA device", "run_ranks (local.h)", "mpi_world (mpi.h)"});
  require_error([] { nccl_world(Device("cpu:0")); }, {"nccl_world: cpu:0 is not a CUDA device"});
  require_error([] { run_ranks_nccl({}, nothing); }, {"run_ranks_nccl: needs at least one device"});
}

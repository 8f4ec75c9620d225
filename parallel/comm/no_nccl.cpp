// parallel/comm/no_nccl.cpp — the nccl backend's functions in a build without NCCL (the build
// picks this file instead of parallel/comm/nccl/): each says how to get the backend.
#include "multigrad/core/error.h"
#include "multigrad/parallel/comm/nccl.h"

namespace mg::parallel {
namespace {

[[noreturn]] void no_backend(const char* fn) {
  MG_ERROR(fn, ": this build has no NCCL backend (it needs CUDA and NCCL when configuring: CMake looks for nccl.h "
           "and libnccl in the CUDA toolkit's folders and under NCCL_ROOT; install NCCL there, or pass "
           "-DNCCL_ROOT=<dir>, and reconfigure). run_ranks (local.h) runs CUDA devices without NCCL");
}

}  // namespace

bool nccl_available() { return false; }

void run_ranks_nccl(const std::vector<Device>&, const std::function<void(Communicator& comm)>&) {
  no_backend("run_ranks_nccl");
}

std::unique_ptr<Communicator> nccl_over_host(std::shared_ptr<Communicator>, Device) { no_backend("nccl_over_host"); }

std::unique_ptr<Communicator> nccl_world(Device) { no_backend("nccl_world"); }

}  // namespace mg::parallel

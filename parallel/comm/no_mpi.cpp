// parallel/comm/no_mpi.cpp — the mpi backend's functions in a build without MPI (the build picks
// this file instead of mpi.cpp): mpi_world says how to get the backend.
#include <cstdio>
#include <cstdlib>

#include "multigrad/core/error.h"
#include "multigrad/parallel/comm/mpi.h"

namespace mg::parallel {

bool mpi_available() { return false; }

std::unique_ptr<Communicator> mpi_world(Device) {
  MG_ERROR("mpi_world: this build has no MPI backend (OpenMPI was not found when configuring; install "
           "libopenmpi-dev and reconfigure)");
}

void mpi_abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::exit(code);
}

}  // namespace mg::parallel

// parallel/comm/mpi_env.cpp — what mpirun tells a process through its environment (mpi.h), in
// every build, with or without the MPI backend.
#include <cstdlib>

#include "multigrad/parallel/comm/mpi.h"

namespace mg::parallel {
namespace {

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  return *end == '\0' ? int(parsed) : fallback;
}

}  // namespace

int mpi_env_rank() { return env_int("OMPI_COMM_WORLD_RANK", -1); }
int mpi_env_size() { return env_int("OMPI_COMM_WORLD_SIZE", 0); }
int mpi_env_local_size() { return env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 0); }

}  // namespace mg::parallel

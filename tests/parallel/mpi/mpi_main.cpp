// tests/parallel/mpi/mpi_main.cpp — Catch2's main for mg_mpi_tests, which runs under mpiexec
// with 2 or more ranks: MPI is initialized before the first test (mpi_world) and finalized
// when the process exits.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "multigrad/parallel/comm/mpi.h"

int main(int argc, char** argv) {
  const int ranks = mg::parallel::mpi_env_size();
  if (ranks < 2) {
    std::fprintf(stderr, "mg_mpi_tests: needs 2 or more ranks, started by mpiexec (e.g. mpiexec -np 2 %s), got %d\n",
                 argv[0], ranks);
    return 2;
  }
  mg::parallel::mpi_world();  // initializes MPI here, on the main thread
  return Catch::Session().run(argc, argv);
}

// parallel/comm/mpi.h — the mpi backend: one rank per process, started with mpirun, over OpenMPI.
//
// CPU tensors only (CUDA tensors go to the nccl backend). Every rank of MPI_COMM_WORLD calls
// mpi_world() once, at the same point of its program, and then the same collectives in the
// same order. With mg::set_deterministic(true) all_reduce and reduce_scatter sum in rank order
// 0..n-1, bit-identical to the local backend and to one device folding the ranks' tensors.
//
// When one rank fails: OpenMPI's mpirun ends the whole job as soon as any rank exits with a
// non-zero status or dies from a signal (it kills the other ranks and exits non-zero, naming
// the rank). So a rank whose error escapes should print it and call mpi_abort(), which ends
// every rank at once; a rank that merely returns from main would block in MPI_Finalize until
// its peers' collectives time out. A peer that stops answering without dying (a hang, a lost
// host) is caught by the communicator's timeout, as in every backend.
#pragma once

#include <memory>

#include "multigrad/parallel/comm/communicator.h"

namespace mg::parallel {

// True when this build has the MPI backend (OpenMPI was found when configuring).
bool mpi_available();

// This process's rank of MPI_COMM_WORLD, as a Communicator on `device` (a CPU device), with a
// communicator of its own (MPI_Comm_dup). Initializes MPI on first use (MPI_Init_thread, at
// least MPI_THREAD_SERIALIZED) and finalizes it when the process exits; destroy every
// communicator before then. Throws when the build has no MPI backend.
std::unique_ptr<Communicator> mpi_world(Device device = Device("cpu:0"));

// This process's rank and the job's size, read from the environment mpirun sets
// (OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE) without initializing MPI: -1 and 0 when the
// process was not started by mpirun. The CLI uses them to choose its defaults. local_size: the
// job's processes on this host (OMPI_COMM_WORLD_LOCAL_SIZE), 0 outside mpirun.
int mpi_env_rank();
int mpi_env_size();
int mpi_env_local_size();

// Ends the job: MPI_Abort on MPI_COMM_WORLD when MPI is initialized (mpirun kills every rank and
// exits with `code`), else std::exit(code). For a rank whose error escapes; never returns. A rank
// that mpirun cannot kill (its host cut off) exits with `code` itself a few seconds later.
[[noreturn]] void mpi_abort(int code);

}  // namespace mg::parallel

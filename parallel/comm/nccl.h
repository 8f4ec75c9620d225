// parallel/comm/nccl.h — the nccl backend: CUDA tensors, one rank per GPU, over NVIDIA's NCCL.
//
// The ranks are either the threads of one process that drives several GPUs (run_ranks_nccl, the
// same contract as run_ranks in local.h) or one process per GPU under mpirun (nccl_world, the
// NCCL id broadcast over MPI; nccl_over_host over any host communicator). The collectives mean
// what communicator.h says, checked as local.cpp checks them; with mg::set_deterministic(true)
// all_reduce and reduce_scatter fold the ranks' tensors in rank order 0..n-1 with local's
// kernels, so both give the same bits.
//
// NCCL puts every rank of a communicator on a GPU of its own: two logical devices on one GPU
// (MG_CUDA_LOGICAL_DEVICES) are refused; the local backend runs them.
//
// What differs from local, visibly:
//   - The communication runs on the GPU, on a stream of the rank's own: a call returns once it
//     is queued, and Work::wait() orders the caller's current stream after it without blocking
//     on the GPU's work. Work::timing() is host time: from the call that queued the operation to
//     the wait() that saw it complete. For DDPStats (parallel/data/ddp.h) that makes a bucket finished before
//     backward was count as communicating until the wait at the end of backward — hidden, so
//     overlap() stays the fraction hidden, while comm_ms is an upper bound.
//   - send completes when the receiver has received (NCCL's send waits for the matching recv),
//     so two ranks that each send to the other before receiving wait for each other until the
//     timeout; send_recv, one NCCL group whose send and receive progress together, is how they
//     exchange (the pipeline's 1F1B does; run_ranks with LocalOptions::rendezvous_sends imitates
//     these sends on the CPU). A message to oneself is buffered, as in local. recv does not see
//     the sender's shape: the two must agree (local names a mismatch; here it is NCCL's
//     undefined behaviour).
//   - A call may wait on the host: NCCL connects the ranks at the first collective (or message
//     to a peer) that needs a connection, which waits for the peers to make the same call; with
//     fingerprints compared before every collective (below). Both waits have the timeout.
//   - Before every collective the ranks compare fingerprints of it (operation, shape, dtype,
//     sequence number), so a mismatch is an error on every rank naming both calls and starts
//     nothing: run_ranks_nccl's ranks (and groups split from them) in host memory, nccl_world's
//     over MPI (nccl_over_host's over its host communicator). MG_DEBUG_COLL=1 all-gathers them on
//     the device instead, =0 turns the check off.
//   - In nccl_world a rank that fails is seen by the others only through their timeouts or
//     NCCL's own errors; end the job with mpi_abort() (mpi.h) instead.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "multigrad/parallel/comm/communicator.h"

namespace mg::parallel {

// True when this build has the nccl backend (CUDA and NCCL were found when configuring).
bool nccl_available();

// Runs fn(comm) on one thread per device, rank i on devices[i] (CUDA devices on distinct GPUs),
// with NCCL communicators made together as ncclCommInitAll makes them. If a rank throws, the
// group is aborted: the other ranks' pending and later operations fail promptly naming it, and
// the NCCL communicators are aborted; run_ranks_nccl rethrows the failed rank's own exception
// after every thread has ended.
void run_ranks_nccl(const std::vector<Device>& devices, const std::function<void(Communicator& comm)>& fn);

// One process per GPU under mpirun: this process's rank of MPI_COMM_WORLD (its MPI rank and
// size, via mpi_world() in mpi.h) on `device`, a CUDA device. Every rank calls it once, at the
// same point. Throws when the build has no NCCL or no MPI backend.
std::unique_ptr<Communicator> nccl_world(Device device);

// nccl_world over any host communicator (CPU tensors; mpi_world's there, as PyTorch's NCCL
// process group has its store): an NCCL communicator of host's ranks, rank for rank, on `device`.
// Rank 0's NCCL id is broadcast over `host`, and the fingerprints go over it before every
// collective; split splits `host` too. Every rank of `host` calls it at the same point; the NCCL
// communicator keeps `host`.
std::unique_ptr<Communicator> nccl_over_host(std::shared_ptr<Communicator> host, Device device);

}  // namespace mg::parallel

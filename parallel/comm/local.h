// parallel/comm/local.h — the local backend: one rank per device, each a thread of this process.
//
// The reference implementation, written to be read: all_reduce is a ring all-reduce
// (reduce-scatter then all-gather, in chunks, each rank talking only to its ring neighbours);
// with mg::set_deterministic(true) it instead sums in rank order 0, 1, ..., n-1 on
// every rank, so the result is bit-identical to accumulating the ranks' tensors in order on one
// device.
#pragma once

#include <functional>
#include <vector>

#include "multigrad/core/deterministic.h"
#include "multigrad/parallel/comm/communicator.h"

namespace mg::parallel {

struct LocalOptions {
  // Off: a send only queues a copy of its tensor and returns; a rank may send any number of
  // messages before its peers receive them. On: a send returns (its Work complete) only once the
  // receiver has posted the matching recv — a rendezvous, as NCCL's send and MPI_Ssend behave —
  // so that code meant for NCCL (the pipeline's schedules) can show on the CPU that it never
  // waits on a send whose receiver waits too. A message to oneself stays buffered (nccl.h).
  bool rendezvous_sends = false;
};

// Runs fn(comm) on one thread per device, rank i on devices[i], and waits for all of them. If a
// rank throws, the group is aborted: the other ranks' pending and later collectives fail
// promptly with an error naming the failed rank, and run_ranks rethrows the first exception
// (the failed rank's own) after every thread has ended. Each rank draws random numbers from a
// generator of its own that starts at the caller's state (parallel/comm/rank_threads.h).
void run_ranks(const std::vector<Device>& devices, const std::function<void(Communicator& comm)>& fn);
void run_ranks(const std::vector<Device>& devices, const std::function<void(Communicator& comm)>& fn,
               const LocalOptions& options);

}  // namespace mg::parallel

// parallel/local.h — the local backend: one rank per device, each a thread of this process.
//
// The reference implementation, written to be read: all_reduce is a ring all-reduce
// (reduce-scatter then all-gather, in chunks, each rank talking only to its ring neighbours);
// with mg::set_deterministic(true) it instead sums in rank order 0, 1, ..., n-1 on
// every rank, so the result is bit-identical to accumulating the ranks' tensors in order on one
// device.
#pragma once

#include <functional>
#include <vector>

#include "core/deterministic.h"
#include "parallel/communicator.h"

namespace mg::parallel {

// Runs fn(comm) on one thread per device, rank i on devices[i], and waits for all of them. If a
// rank throws, the group is aborted: the other ranks' pending and later collectives fail
// promptly with an error naming the failed rank, and run_ranks rethrows the first exception
// (the failed rank's own) after every thread has ended.
void run_ranks(const std::vector<Device>& devices, const std::function<void(Communicator& comm)>& fn);

}  // namespace mg::parallel

// parallel/comm/nccl/group.h — what the ranks of one NCCL group in this process share (inside the
// nccl backend; see the design note in communicator.cpp): the NCCL calls every file makes, a
// communicator's handle, the group that fails and ends together, the board on which the ranks of
// this process compare fingerprints, and how the communicators are made.
#pragma once

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "multigrad/core/error.h"
#include "multigrad/core/tensor.h"
#include "multigrad/parallel/comm/backend_common.h"

namespace mg::parallel::nccl_backend {

using namespace backend;  // the checks, folds and names every backend shares

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------- NCCL calls

ncclDataType_t nccl_type(DType dtype);

// Avg sums and divides once at the end.
inline ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Max ? ncclMax : ncclSum; }

// "unhandled system error (<NCCL's last message>)".
std::string nccl_error(ncclResult_t result, ncclComm_t comm);

// The state of the last call made on a non-blocking communicator, or the query's own error.
ncclResult_t async_state(ncclComm_t comm);

// Polls until a call on a non-blocking communicator has finished (`result` is what the call
// returned): NCCL's final result, or ncclInProgress if give_up() said to stop first.
template <class GiveUp>
ncclResult_t settle(ncclComm_t comm, ncclResult_t result, GiveUp give_up) {
  for (int polls = 0; result == ncclInProgress; ++polls) {
    if (give_up()) return ncclInProgress;
    back_off(polls);
    result = async_state(comm);
  }
  return result;
}

// ---------------------------------------------------------------- the group

// One NCCL communicator. Every NCCL call on it holds mu; comm is null once aborted or destroyed.
struct Handle {
  std::mutex mu;
  ncclComm_t comm = nullptr;
};

// Stops every operation of the communicator (kernels waiting for a peer exit) and frees it.
// Never throws: it runs on failure paths.
inline void abort_handle(Handle& h) {
  std::lock_guard<std::mutex> lock(h.mu);
  if (h.comm != nullptr) ncclCommAbort(h.comm);
  h.comm = nullptr;
}

// The ranks of one group that live in this process (see "Failure" in the design note).
class Group {
 public:
  Group(int size, std::vector<std::shared_ptr<Handle>> handles, bool all_ranks_here)
      : size_(size),
        handles_(std::move(handles)),
        all_ranks_here_(all_ranks_here),
        collectives_(size_t(size)),
        sends_(size_t(size) * size_t(size)),
        recvs_(size_t(size) * size_t(size)),
        left_(size_t(size)) {}

  int size() const { return size_; }
  bool all_ranks_here() const { return all_ranks_here_; }
  bool failed() const { return failed_.load(); }
  int failed_rank() {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_rank_;
  }
  std::string failure() {  // "rank 2 failed: <its message>"
    std::lock_guard<std::mutex> lock(mu_);
    return failure_;
  }

  // The first failure wins; it aborts every NCCL communicator of the group. Takes no lock that a
  // thread polling NCCL holds while it waits for `failed()`: so never deadlocks with one.
  void fail(int rank, const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failed_rank_ >= 0) return;
      failed_rank_ = rank;
      failure_ = detail::str_cat("rank ", rank, " failed: ", message);
      failed_ = true;
    }
    for (const auto& h : handles_) abort_handle(*h);
  }

  // What each rank has issued, for naming the rank a wait is stuck on: the number of collectives
  // per rank, and of sends and receives per (rank, peer).
  void issued_collective(int rank) { ++collectives_[size_t(rank)]; }
  void issued_send(int src, int dst) { ++sends_[pair(src, dst)]; }
  void issued_recv(int dst, int src) { ++recvs_[pair(dst, src)]; }
  void leave(int rank) { left_[size_t(rank)] = true; }
  bool has_left(int rank) const { return left_[size_t(rank)]; }

  // The rank that has not yet issued its part of what `rank` waits for, or -1 (also when the
  // peers live in other processes).
  int late_for_collective(int rank, uint64_t seq) const {
    if (!all_ranks_here_) return -1;
    for (int p = 0; p < size_; ++p) {
      if (p != rank && collectives_[size_t(p)] <= seq) return p;
    }
    return -1;
  }
  int late_for_recv(int rank, int src, uint64_t k) const {  // src has not sent rank its message k
    return all_ranks_here_ && sends_[pair(src, rank)] <= k ? src : -1;
  }
  int late_for_send(int rank, int dst, uint64_t k) const {  // dst has not posted its receive k
    return all_ranks_here_ && recvs_[pair(dst, rank)] <= k ? dst : -1;
  }

  // NCCL's orderly end, once no rank uses the communicators: ncclCommFinalize on all of them
  // (which flushes their work and meets the other ranks), polled within the timeout, then
  // ncclCommDestroy. A group that failed has been aborted instead. Never throws: it runs from
  // destructors and after a rank's exception; a failure here is printed and aborts.
  void teardown(std::chrono::milliseconds timeout) noexcept {
    if (failed()) return;
    std::string error;
    std::vector<ncclResult_t> state;
    for (const auto& h : handles_) {
      std::lock_guard<std::mutex> lock(h->mu);
      state.push_back(h->comm != nullptr ? ncclCommFinalize(h->comm) : ncclSuccess);
    }
    const auto deadline = Clock::now() + timeout;
    for (size_t i = 0; i < handles_.size() && error.empty(); ++i) {
      std::lock_guard<std::mutex> lock(handles_[i]->mu);
      ncclComm_t comm = handles_[i]->comm;
      if (comm == nullptr) continue;
      const ncclResult_t result = settle(comm, state[i], [&] { return Clock::now() >= deadline; });
      if (result == ncclInProgress) {
        error = detail::str_cat("ncclCommFinalize timed out after ", timeout.count(), " ms");
      } else if (result != ncclSuccess) {
        error = detail::str_cat("ncclCommFinalize failed: ", nccl_error(result, comm));
      }
    }
    if (!error.empty()) {
      std::fprintf(stderr, "nccl: %s; aborting the communicators\n", error.c_str());
      for (const auto& h : handles_) abort_handle(*h);
      return;
    }
    for (const auto& h : handles_) {
      std::lock_guard<std::mutex> lock(h->mu);
      if (h->comm != nullptr) ncclCommDestroy(h->comm);
      h->comm = nullptr;
    }
  }

 private:
  size_t pair(int a, int b) const { return size_t(a) * size_t(size_) + size_t(b); }

  const int size_;
  const std::vector<std::shared_ptr<Handle>> handles_;
  const bool all_ranks_here_;
  std::vector<std::atomic<uint64_t>> collectives_, sends_, recvs_;
  std::vector<std::atomic<bool>> left_;

  std::atomic<bool> failed_{false};  // polled by every wait
  std::mutex mu_;                    // the two below
  int failed_rank_ = -1;
  std::string failure_;
};

// Fingerprints among ranks that all live in this process ("Fingerprints" in the design note),
// compared in host memory: run_ranks_nccl's ranks, and the groups split from them.
class FingerprintBoard {
 public:
  explicit FingerprintBoard(int size) : size_(size) {}

  // `rank` posts its fingerprint of collective fp.seq and waits until every rank has posted theirs,
  // or `stop` (asked every few milliseconds, without the lock) gives a reason to stop, which is
  // thrown. Returns every rank's, as an (n, kWords) Int64 host tensor, row k rank k's.
  Tensor exchange(int rank, const Fingerprint& fp, const std::function<std::string()>& stop) {
    std::unique_lock<std::mutex> lock(mu_);
    Posted& posted = posted_[fp.seq];  // a std::map's entries stay where they are
    if (posted.fingerprints.empty()) posted.fingerprints.resize(size_t(size_));
    posted.fingerprints[size_t(rank)] = fp;
    if (++posted.count == size_) cv_.notify_all();
    while (posted.count < size_) {
      cv_.wait_for(lock, std::chrono::milliseconds(5));
      if (posted.count == size_) break;
      lock.unlock();
      const std::string why = stop();
      if (!why.empty()) MG_ERROR(why);
      lock.lock();
    }
    Tensor all = Tensor::empty({size_, Fingerprint::kWords}, {DType::Int64, Device("cpu:0")});
    for (int k = 0; k < size_; ++k) {
      std::memcpy(all.data<int64_t>() + k * Fingerprint::kWords, &posted.fingerprints[size_t(k)], sizeof(Fingerprint));
    }
    if (++posted.read == size_) posted_.erase(fp.seq);
    return all;
  }

 private:
  struct Posted {  // the fingerprints of one collective
    std::vector<Fingerprint> fingerprints;
    int count = 0, read = 0;
  };
  const int size_;
  std::mutex mu_;  // the two below
  std::condition_variable cv_;
  std::map<int64_t, Posted> posted_;  // by collective number, until every rank has read them
};

// How a communicator's ranks compare fingerprints when MG_DEBUG_COLL is unset: on a board when they
// all live in this process, else over a host communicator of the same ranks (nccl_over_host),
// else not at all.
struct FingerprintPeers {
  std::shared_ptr<FingerprintBoard> board{};
  std::shared_ptr<Communicator> host{};
};

// The board of a group split from ranks of this process: each member finds it by the group's NCCL
// id, which every member holds.
std::shared_ptr<FingerprintBoard> board_of(const ncclUniqueId& id, int size);

// ---------------------------------------------------------------- making the communicators

// The physical GPU of every device. Refuses CPU devices, and two ranks on one GPU, which NCCL
// cannot run in one communicator.
std::vector<int> physical_gpus(const char* fn, const std::vector<Device>& devices);

ncclConfig_t non_blocking_config();

// Polls the new communicators until NCCL has made them; on an error or the timeout aborts them
// all and throws, naming `what`.
void finish_init(const std::string& what, std::vector<ncclComm_t>& comms, ncclResult_t result);

std::vector<std::shared_ptr<Handle>> handles_of(const std::vector<ncclComm_t>& comms);

// One communicator per GPU, rank r on gpus[r], made together as ncclCommInitAll makes them, but
// non-blocking (see the design note).
std::vector<std::shared_ptr<Handle>> make_communicators(const std::vector<Device>& devices,
                                                        const std::vector<int>& gpus);

}  // namespace mg::parallel::nccl_backend

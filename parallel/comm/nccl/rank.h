// parallel/comm/nccl/rank.h — one rank of the nccl backend (see the design note in
// communicator.cpp): its operations queued on the communication stream, the calls into NCCL with
// their timeout, the waits, and the Works a caller holds.
#pragma once

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "multigrad/core/cuda_device_guard.h"
#include "multigrad/core/stream.h"
#include "multigrad/parallel/comm/nccl/group.h"

namespace mg::parallel::nccl_backend {

// One operation queued on a rank's communication stream.
struct Op {
  Op(std::string what_, const Device& device, std::function<int()> late_)
      : what(std::move(what_)), late(std::move(late_)), done(device) {}

  const std::string what;           // "all_reduce #3"
  const std::function<int()> late;  // the peer that has not yet issued its part, or -1
  Event done;                       // recorded on the comm stream behind the operation
  std::vector<Tensor> keep;         // the caller's tensors the comm stream uses
  Clock::time_point queued;

  std::mutex mu;  // the fields below; held by wait()
  bool complete = false;
  Clock::time_point completed;  // when a wait saw it complete
  std::string error;            // once set, every wait throws it
};

// A rank's device, NCCL communicator and communication stream; shared by its communicator and
// its Works (a Work may outlive the communicator).
struct Rank {
  Rank(std::shared_ptr<Group> group_, std::shared_ptr<Handle> handle_, int rank_, Device device_)
      : group(std::move(group_)),
        handle(std::move(handle_)),
        rank(rank_),
        device(device_),
        gpu(cuda_physical_index(device_.index())),
        stream(Stream::create(device_)) {}

  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeout_ms.load()); }

  // Fails the group (if it has not failed already) and throws `message`.
  [[noreturn]] void fail(const std::string& message) {
    group->fail(rank, message);
    MG_ERROR(message);
  }

  void throw_if_failed(const std::string& what) {
    if (group->failed()) MG_ERROR(what, " on rank ", rank, ": ", group->failure());
  }

  // Runs one NCCL call (a group of them counts as one) on this rank's communicator, on the comm
  // stream, and polls until NCCL has queued its work there: a non-blocking communicator may answer
  // ncclInProgress first, while it connects to the peers.
  template <class NcclCall>
  void call(const Op& op, NcclCall nccl_call) {
    const auto limit = timeout();
    const auto deadline = Clock::now() + limit;
    std::string error;
    {
      std::lock_guard<std::mutex> lock(handle->mu);
      if (handle->comm == nullptr) MG_ERROR(op.what, " on rank ", rank, ": ", group->failure());
      detail::CudaDeviceGuard on_gpu(gpu);
      const auto stop = [&] {
        error = stop_waiting(op.what, op.late, deadline, limit);
        return !error.empty();
      };
      const ncclResult_t result =
          settle(handle->comm, nccl_call(handle->comm, static_cast<cudaStream_t>(stream.handle())), stop);
      if (result != ncclSuccess && result != ncclInProgress) {
        error = detail::str_cat(op.what, " on rank ", rank, ": NCCL error: ", nccl_error(result, handle->comm));
      }
    }
    if (!error.empty()) fail(error);  // after the unlock: fail() aborts this communicator too
  }

  // Polls until op's done-event completes, then orders the caller's current stream after it.
  void wait(Op& op) {
    std::lock_guard<std::mutex> lock(op.mu);
    if (!op.error.empty()) MG_ERROR(op.error);
    const auto limit = timeout();
    const auto deadline = Clock::now() + limit;
    for (int polls = 0; !op.complete; ++polls) {
      std::string error;
      if (group->failed()) {  // first: the kernels of an aborted communicator end early, wrongly
        error = detail::str_cat(op.what, " on rank ", rank, ": ", group->failure());
      } else {
        const bool done = op.done.query();  // before the error check: an NCCL error ends kernels early
        const ncclResult_t state = async_error();
        if (state != ncclSuccess && state != ncclInProgress) {
          error = detail::str_cat(op.what, " on rank ", rank, ": NCCL error: ", nccl_error(state, nullptr));
        } else if (done) {
          op.complete = true;
          op.completed = Clock::now();
          break;
        } else {
          error = stop_waiting(op.what, op.late, deadline, limit);
        }
      }
      if (!error.empty()) {
        op.error = error;
        fail(error);
      }
      back_off(polls);
    }
    op.done.wait(current_stream(device));
  }

  // Why a wait for `what` stops before it completes, or "" to go on: the group has failed, the
  // rank it waits for (late(), or -1) has left without issuing its part, or the timeout has passed.
  std::string stop_waiting(const std::string& what, const std::function<int()>& late, Clock::time_point deadline,
                           std::chrono::milliseconds limit) {
    if (group->failed()) return detail::str_cat(what, " on rank ", rank, ": ", group->failure());
    const int peer = late();
    if (peer >= 0 && group->has_left(peer)) {
      return detail::str_cat(what, " on rank ", rank, ": rank ", peer,
                             " has already returned from its run_ranks_nccl function without taking part");
    }
    if (Clock::now() < deadline) return "";
    return timeout_message(what, rank, limit, peer);
  }

  const std::shared_ptr<Group> group;
  const std::shared_ptr<Handle> handle;
  const int rank;
  const Device device;
  const int gpu;        // the physical GPU
  const Stream stream;  // the communication stream
  std::atomic<int64_t> timeout_ms{kDefaultTimeout.count()};

 private:
  ncclResult_t async_error() {
    std::lock_guard<std::mutex> lock(handle->mu);
    return handle->comm != nullptr ? async_state(handle->comm) : ncclSuccess;  // null: the group failed
  }

};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<Rank> rank, std::shared_ptr<Op> op) : rank_(std::move(rank)), op_(std::move(op)) {}

  void wait() override { rank_->wait(*op_); }

  // Host time: from the call that queued the operation to the wait that saw it complete.
  std::optional<WorkTiming> timing() const override {
    std::lock_guard<std::mutex> lock(op_->mu);
    if (!op_->complete) return std::nullopt;
    return WorkTiming{op_->queued, op_->completed};
  }

 private:
  std::shared_ptr<Rank> rank_;
  std::shared_ptr<Op> op_;
};

// A send_recv with a half to or from this rank itself: its send's Work, then its recv's.
class WorkPair final : public Work {
 public:
  WorkPair(std::shared_ptr<Work> first, std::shared_ptr<Work> second)
      : first_(std::move(first)), second_(std::move(second)) {}

  void wait() override {
    first_->wait();
    second_->wait();
  }

  std::optional<WorkTiming> timing() const override {
    const auto a = first_->timing(), b = second_->timing();
    if (!a || !b) return std::nullopt;
    return WorkTiming{std::min(a->start, b->start), std::max(a->end, b->end)};
  }

 private:
  std::shared_ptr<Work> first_, second_;
};

}  // namespace mg::parallel::nccl_backend

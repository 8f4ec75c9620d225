// parallel/comm/local.cpp — the local backend: n ranks are n threads of this process, one per device.
//
// Design note. The ranks share one Group: one Slot per rank (where a rank publishes the tensors
// of its current collective) and one FIFO mailbox per (src, dst) pair for send/recv; every Group
// of one run_ranks (split() makes more, each rank of a group a rank of run_ranks) shares one
// World: a mutex and condition variable, which ranks have returned, and the abort. A collective
// checks its arguments on the calling thread, takes the next sequence number and queues the
// communication on the rank's ProgressThread (parallel/comm/progress_thread.h), returning a Work at once.
// There, every rank publishes its slot, the ranks meet, check that they are in the same
// operation (name, shape, dtype, sequence number; a mismatch fails on every rank naming both
// sides), run the algorithm (the all-reduces are algorithms.h's), and meet again so that no rank
// reuses its slot while a peer still reads it. send and recv run on the calling thread: a
// send only queues a copy, and a recv waits for its message with the same timeout.
//
// Rendezvous sends (LocalOptions::rendezvous_sends). A recv first posts itself: it counts, per
// (src, dst), the receives dst has started. A send then waits, after queueing its copy, until its
// receiver has posted receive number k for message number k; the wait blocks the calling thread,
// as a send blocks every later operation on NCCL's stream. send_recv posts both of its halves
// before it waits for either, which is why two ranks can exchange messages that way.
//
// CUDA devices: a collective records an event on the caller's current stream; the progress
// thread, on the rank's device and its own communication stream, waits for that event and
// synchronizes its stream before every meeting, so what a peer reads is complete and the Work
// is complete only when the result is in memory. Simple rather than fast: this backend is the
// reference; the nccl backend is the fast one on GPUs.
//
// Data movement: a rank only ever writes tensors on its own device. To "receive", it copies a
// peer's published tensor into its own memory (kernels::copy_across_devices); all arithmetic
// runs on its own device.
//
// Meeting ("sync") is a counting barrier: rank r's k-th arrival sets arrivals[r] = k and waits
// until every rank has arrived k times. Every wait has the communicator's timeout; a timeout or
// a failed rank (run_ranks aborts the group) raises an mg::Error naming the operation, its
// sequence number, this rank and the rank it was waiting for. After a timeout the group is
// aborted too: its barrier counts no longer agree, so it cannot be used again. A rank whose
// function has returned has left: waiting for it fails at once instead of at the timeout.
#include "multigrad/parallel/comm/local.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "multigrad/core/error.h"
#include "multigrad/core/stream.h"
#include "multigrad/kernels/kernels.h"
#include "multigrad/parallel/comm/algorithms.h"
#include "multigrad/parallel/comm/backend_common.h"
#include "multigrad/parallel/comm/progress_thread.h"
#include "multigrad/parallel/comm/rank_threads.h"

namespace mg::parallel {
namespace {

using namespace backend;  // the checks, folds and names every backend shares

// What one rank publishes for its current collective.
struct Slot {
  std::string signature;  // "all_reduce(sum, [4], Float32) #3": equal on every rank, or a mismatch
  Tensor tensor;          // all_reduce, broadcast: t flattened; all_gather, reduce_scatter: input
};

// What every group of one run_ranks shares: one lock and one wake-up for all of them (so a
// failure wakes every waiter of every group), the failure that aborts them all, and which of
// run_ranks' ranks have returned.
struct Group;
struct World {
  World(int n, bool rendezvous_sends_) : rendezvous_sends(rendezvous_sends_), left(size_t(n), false) {}

  const bool rendezvous_sends;  // LocalOptions

  std::mutex mu;
  std::condition_variable cv;  // notified on every arrival, mailbox push and abort
  std::vector<bool> left;      // run_ranks' rank r's function returned
  bool aborted = false;
  int failed_rank = -1;  // the first rank that failed; its error is the one run_ranks rethrows
  std::string failure;   // "rank 2 failed: <its message>"
  // Communicator::split: each group being made, by (the group split, its split number, color),
  // and how many of its members have taken it (then the entry goes).
  std::map<std::tuple<const Group*, uint64_t, int>, std::pair<std::shared_ptr<Group>, size_t>> splits;

  // Caller holds mu. The first failure wins; later ones are its consequences.
  void abort(int rank, const std::string& message) {
    if (aborted) return;
    aborted = true;
    failed_rank = rank;
    failure = detail::str_cat("rank ", rank, " failed: ", message);
    cv.notify_all();
  }
};

// The ranks of one communicator: run_ranks' whole set, or a group split from it.
struct Group {
  Group(std::shared_ptr<World> world_, std::vector<int> members_)
      : world(std::move(world_)), members(std::move(members_)), slots(members.size()), arrivals(members.size(), 0) {}

  std::shared_ptr<World> world;
  std::vector<int> members;  // rank r of this group is run_ranks' rank members[r]
  std::vector<Slot> slots;
  std::vector<uint64_t> arrivals;                               // sync() calls per rank
  std::map<std::pair<int, int>, std::deque<Tensor>> mailboxes;  // (src, dst) -> messages in order
  std::map<std::pair<int, int>, uint64_t> posted;               // (src, dst) -> receives dst has started
};

using algorithms::transfer;

class CompletedWork final : public Work {
 public:
  void wait() override {}
};

// The progress thread's CUDA state: the rank's device and a communication stream of its own.
void enter_device(const Device& device) {
  if (!device.is_cuda()) return;
  set_cuda_device(device);
  static thread_local std::unique_ptr<StreamGuard> comm_stream;
  comm_stream = std::make_unique<StreamGuard>(Stream::create(device));
}

// Makes this rank's writes so far visible to its peers (a no-op on CPU devices).
void settle(const Device& device) {
  if (device.is_cuda()) current_stream(device).synchronize();
}

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<Group> group, int rank, Device device)
      : group_(std::move(group)), rank_(rank), device_(device), progress_([device] { enter_device(device); }) {}

  int rank() const override { return rank_; }
  int size() const override { return int(group_->slots.size()); }
  Device device() const override { return device_; }
  void set_timeout(std::chrono::milliseconds timeout) override { timeout_ms_ = checked_timeout_ms(timeout); }

  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op) override {
    check_tensor("all_reduce", t);
    check_avg("all_reduce", op, t.dtype());
    Tensor flat = t.view({t.numel()});
    const bool deterministic = is_deterministic();  // the mode when the call was made
    const std::string sig = call_str(OpCode::AllReduce, t, int64_t(op));
    return collective(OpCode::AllReduce, sig, flat, [this, flat, op, deterministic](const std::string& what) {
      const algorithms::Ranks ranks = peers(what);
      if (deterministic) {
        algorithms::rank_ordered_all_reduce(flat, op, ranks);
      } else {
        algorithms::ring_all_reduce(flat, op, ranks);
      }
      finish_avg(op, flat, size());
    });
  }

  std::shared_ptr<Work> broadcast(const Tensor& t, int root) override {
    check_tensor("broadcast", t);
    check_rank("broadcast", "root", root, size());
    Tensor flat = t.view({t.numel()});
    const std::string sig = call_str(OpCode::Broadcast, t, -1, root);
    return collective(OpCode::Broadcast, sig, flat, [this, flat, root](const std::string&) {
      if (rank_ != root) transfer(group_->slots[size_t(root)].tensor, flat);
    });
  }

  std::shared_ptr<Work> all_gather(const Tensor& output, const Tensor& input) override {
    check_tensor("all_gather", output);
    check_tensor("all_gather", input);
    check_all_gather(output, input, size());
    const int64_t rows = input.size(0);
    const std::string sig = call_str(OpCode::AllGather, input);
    return collective(OpCode::AllGather, sig, input, [this, output, rows](const std::string&) {
      for (int k = 0; k < size(); ++k) {
        transfer(group_->slots[size_t(k)].tensor, output.slice(0, k * rows, (k + 1) * rows));
      }
    });
  }

  // Rank r reduces its rows directly, folding the ranks in order 0..n-1 (so it is deterministic
  // in both modes): n - 1 reads per rank, the same traffic as a ring's reduce-scatter phase.
  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override {
    check_tensor("reduce_scatter", output);
    check_tensor("reduce_scatter", input);
    check_reduce_scatter(output, input, op, size());
    const std::string sig = call_str(OpCode::ReduceScatter, input, int64_t(op));
    return collective(OpCode::ReduceScatter, sig, input, [this, output, op](const std::string&) {
      const int64_t rows = output.size(0);
      auto my_rows = [&](int k) { return group_->slots[size_t(k)].tensor.slice(0, rank_ * rows, (rank_ + 1) * rows); };
      transfer(my_rows(0), output);
      Tensor incoming = Tensor::empty(output.shape(), output.options());
      for (int k = 1; k < size(); ++k) {
        transfer(my_rows(k), incoming);
        fold(op, output, incoming);
      }
      finish_avg(op, output, size());
    });
  }

  // The message is a copy of t (on this device) queued in the (rank, dst) mailbox; the receiver
  // copies it to its own device. Returns at once, or under rendezvous once dst has posted the recv.
  std::shared_ptr<Work> send(const Tensor& t, int dst) override {
    check_tensor("send", t);
    check_rank("send", "dst", dst, size());
    const uint64_t k = sent_[dst]++;
    const std::string what = detail::str_cat("send #", k, " to rank ", dst);
    post_send(t, dst, what);
    wait_for_receiver(dst, k, what);
    return std::make_shared<CompletedWork>();
  }

  std::shared_ptr<Work> recv(const Tensor& t, int src) override {
    check_tensor("recv", t);
    check_rank("recv", "src", src, size());
    const std::string what = detail::str_cat("recv #", received_[src]++, " from rank ", src);
    post_recv(src, what);
    take_message(t, src, what);
    return std::make_shared<CompletedWork>();
  }

  // Both halves are posted before either is waited for: the peer's own send_recv (or plain recv)
  // finds the message, and its send finds the receive posted.
  std::shared_ptr<Work> send_recv(const Tensor& send_t, int dst, const Tensor& recv_t, int src) override {
    check_tensor("send_recv", send_t);
    check_tensor("send_recv", recv_t);
    check_rank("send_recv", "dst", dst, size());
    check_rank("send_recv", "src", src, size());
    const uint64_t k = sent_[dst]++;
    const std::string what = send_recv_what(k, dst, received_[src]++, src);
    post_send(send_t, dst, what);
    post_recv(src, what);
    take_message(recv_t, src, what);
    wait_for_receiver(dst, k, what);
    return std::make_shared<CompletedWork>();
  }

  std::shared_ptr<Work> barrier() override {
    return collective(OpCode::Barrier, call_str(OpCode::Barrier, Tensor()), Tensor(), [](const std::string&) {});
  }

  // The members agree on the new group through the World: the first to arrive makes it.
  std::unique_ptr<Communicator> split(int color, int key) override {
    const std::vector<int> members = split_members(*this, color, key);
    const uint64_t number = splits_++;
    if (members.empty()) return nullptr;
    std::vector<int> world_ranks;
    for (int r : members) world_ranks.push_back(group_->members[size_t(r)]);
    std::shared_ptr<Group> group;
    {
      std::lock_guard<std::mutex> lock(world().mu);
      const auto id = std::make_tuple(group_.get(), number, color);
      auto& [made, taken] = world().splits[id];
      if (!made) made = std::make_shared<Group>(group_->world, world_ranks);
      group = made;
      if (++taken == members.size()) world().splits.erase(id);
    }
    const int rank = int(std::find(members.begin(), members.end(), rank_) - members.begin());
    auto comm = std::make_unique<LocalCommunicator>(group, rank, device_);
    comm->timeout_ms_ = timeout_ms_.load();
    return comm;
  }

 private:
  // This rank's view of the group for algorithms.h: the tensors the ranks published for this
  // collective, and the counting barrier.
  algorithms::Ranks peers(const std::string& what) {
    return {rank_, size(), [this](int k) -> const Tensor& { return group_->slots[size_t(k)].tensor; },
            [this, what] { sync(what); }};
  }

  // ---------------------------------------------------------------- point to point

  // Queues a copy of t, taken now (the caller may change t once send returns), for dst.
  void post_send(const Tensor& t, int dst, const std::string& what) {
    Tensor message = t.clone();
    settle(device_);
    std::lock_guard<std::mutex> lock(world().mu);
    throw_if_aborted(what);
    group_->mailboxes[{rank_, dst}].push_back(std::move(message));
    world().cv.notify_all();
  }

  // Rendezvous sends only: waits until dst has posted its receive of this rank's message k.
  void wait_for_receiver(int dst, uint64_t k, const std::string& what) {
    if (!world().rendezvous_sends || dst == rank_) return;
    std::unique_lock<std::mutex> lock(world().mu);
    const uint64_t& posted = group_->posted[{rank_, dst}];
    wait_until(lock, what, [&] { return posted > k ? -1 : dst; });
  }

  // Tells src that this rank has started receiving its next message (see wait_for_receiver).
  void post_recv(int src, const std::string& what) {
    std::lock_guard<std::mutex> lock(world().mu);
    throw_if_aborted(what);
    ++group_->posted[{src, rank_}];
    world().cv.notify_all();
  }

  // t = the next message from src, once it has arrived; its shape and dtype must be t's.
  void take_message(const Tensor& t, int src, const std::string& what) {
    Tensor message;
    {
      std::unique_lock<std::mutex> lock(world().mu);
      auto& box = group_->mailboxes[{src, rank_}];
      wait_until(lock, what, [&] { return box.empty() ? src : -1; });
      message = std::move(box.front());
      box.pop_front();
    }
    MG_CHECK(message.shape() == t.shape() && message.dtype() == t.dtype(), what, " on rank ", rank_,
             ": got ", message.shape(), " ", message.dtype(), " but the receiving tensor is ", t.shape(),
             " ", t.dtype());
    transfer(message, t);
  }

  // ---------------------------------------------------------------- meeting

  // Takes the next sequence number and queues the collective on the progress thread, where it
  // publishes `tensor` under `signature` (call_str), meets the other ranks, checks they are all in
  // the same operation, runs body (which may sync between its steps) and meets again.
  std::shared_ptr<Work> collective(OpCode code, const std::string& signature, const Tensor& tensor,
                                   std::function<void(const std::string& what)> body) {
    const uint64_t seq = seq_++;
    std::shared_ptr<Event> inputs_ready;  // CUDA: the caller's stream has produced the inputs
    if (device_.is_cuda()) {
      inputs_ready = std::make_shared<Event>(device_);
      inputs_ready->record(current_stream(device_));
    }
    return progress_.submit([this, code, seq, mine = detail::str_cat(signature, " #", seq), tensor,
                             body = std::move(body), inputs_ready] {
      const std::string what = detail::str_cat(op_name(code), " #", seq);
      if (inputs_ready) {
        inputs_ready->wait(current_stream(device_));
        settle(device_);
      }
      {
        std::lock_guard<std::mutex> lock(world().mu);
        throw_if_aborted(what);
        group_->slots[size_t(rank_)] = {mine, tensor};
      }
      sync(what);
      std::string mismatch;
      {
        std::lock_guard<std::mutex> lock(world().mu);
        for (int k = 0; k < size() && mismatch.empty(); ++k) {
          const std::string& theirs = group_->slots[size_t(k)].signature;
          if (theirs != mine) mismatch = mismatch_message(what, rank_, mine, k, theirs);
        }
      }
      if (!mismatch.empty()) {
        sync(what);  // every rank saw the mismatch; no one may reuse its slot before all have looked
        MG_ERROR(mismatch);
      }
      body(what);
      settle(device_);
      sync(what);
      std::lock_guard<std::mutex> lock(world().mu);
      group_->slots[size_t(rank_)].tensor = Tensor();  // do not keep the caller's tensor alive
    });
  }

  // The counting barrier described at the top of the file. Runs on the progress thread.
  void sync(const std::string& what) {
    settle(device_);
    std::unique_lock<std::mutex> lock(world().mu);
    const uint64_t mine = ++group_->arrivals[size_t(rank_)];
    world().cv.notify_all();
    wait_until(lock, what, [&] {
      for (int k = 0; k < size(); ++k) {
        if (group_->arrivals[size_t(k)] < mine) return k;
      }
      return -1;
    });
  }

  // Waits (lock held on world().mu) until late() returns -1; late() names the rank still awaited.
  template <class Late>
  void wait_until(std::unique_lock<std::mutex>& lock, const std::string& what, Late late) {
    const std::chrono::milliseconds timeout(timeout_ms_.load());
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      throw_if_aborted(what);
      const int waiting_for = late();
      if (waiting_for < 0) return;
      if (world().left[size_t(group_->members[size_t(waiting_for)])]) {
        MG_ERROR(what, " on ", who(rank_), ": ", who(waiting_for),
                 " has already returned from its run_ranks function without taking part");
      }
      if (world().cv.wait_until(lock, deadline) == std::cv_status::timeout) {
        throw_if_aborted(what);
        const int still = late();
        if (still < 0) return;
        const std::string message = timeout_message(what, rank_, timeout, still);
        world().abort(rank_, message);
        MG_ERROR(message);
      }
    }
  }

  // Caller holds world().mu.
  void throw_if_aborted(const std::string& what) const {
    if (world().aborted) MG_ERROR(what, " on rank ", rank_, ": ", world().failure);
  }

  void check_tensor(const char* op, const Tensor& t) const { backend::check_tensor(op, t, rank_, device_); }
  World& world() const { return *group_->world; }
  // "rank r", and in a group split from run_ranks' ranks also r's rank there.
  std::string who(int r) const {
    const int outer = group_->members[size_t(r)];
    if (size() == int(world().left.size()) && outer == r) return detail::str_cat("rank ", r);
    return detail::str_cat("rank ", r, " (run_ranks' rank ", outer, ")");
  }

  std::shared_ptr<Group> group_;
  int rank_;
  Device device_;
  std::atomic<int64_t> timeout_ms_{kDefaultTimeout.count()};  // read by the progress thread
  uint64_t seq_ = 0;                                           // collectives issued by this rank
  uint64_t splits_ = 0;                                        // split() calls
  std::map<int, uint64_t> sent_, received_;                    // point-to-point messages per peer
  // Last, so that it is destroyed first: its destructor runs the collectives still queued,
  // which use the members above.
  ProgressThread progress_;
};

}  // namespace

void run_ranks(const std::vector<Device>& devices, const std::function<void(Communicator& comm)>& fn) {
  run_ranks(devices, fn, LocalOptions{});
}

void run_ranks(const std::vector<Device>& devices, const std::function<void(Communicator& comm)>& fn,
               const LocalOptions& options) {
  const int n = int(devices.size());
  MG_CHECK(n > 0, "run_ranks: needs at least one device");
  auto world = std::make_shared<World>(n, options.rendezvous_sends);
  std::vector<int> everyone(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) everyone[size_t(r)] = r;
  auto group = std::make_shared<Group>(world, everyone);
  RankThreadHooks hooks{
      .make_communicator = [&](int r) { return std::make_unique<LocalCommunicator>(group, r, devices[size_t(r)]); },
      .abort =
          [&](int r, const std::string& message) {
            std::lock_guard<std::mutex> lock(world->mu);
            world->abort(r, message);
          },
      .leave =
          [&](int r) {
            std::lock_guard<std::mutex> lock(world->mu);
            world->left[size_t(r)] = true;
            world->cv.notify_all();
          },
      .failed_rank = [&] { return world->failed_rank; },  // every thread has ended: no lock needed
  };
  run_rank_threads(n, hooks, fn);
}

}  // namespace mg::parallel

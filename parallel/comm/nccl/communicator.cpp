// parallel/comm/nccl/communicator.cpp — the nccl backend (parallel/comm/nccl.h): CUDA tensors,
// NVIDIA's NCCL underneath. The build compiles this folder when it finds NCCL, and
// parallel/comm/no_nccl.cpp when it does not. group.h holds what the ranks of a group share,
// rank.h one rank's operations and waits; this file the communicator and the making of groups.
//
// Design note.
//
// Communicators. NCCL communicators are made non-blocking (ncclConfig_t::blocking = 0): every
// NCCL call returns at once, with ncclInProgress while NCCL finishes it on a thread of its own,
// and the caller polls ncclCommGetAsyncError. That is what gives every wait here the timeout,
// including the ones NCCL makes on the host (creating a communicator; connecting to the peers
// at the first collective or message that needs it): inside a blocking call no timeout could
// be enforced. run_ranks_nccl makes its n communicators as ncclCommInitAll does (one
// ncclUniqueId, ncclCommInitRankConfig for every GPU inside one ncclGroupStart/End), only with
// that configuration; nccl_world makes one per process from the id rank 0 broadcasts over MPI
// (nccl_over_host: over any host communicator); split makes one per member of a group from the id
// its first member all-gathers over the parent communicator (PyTorch's new_group; ncclCommSplit
// would need every rank of the parent in one call). A split communicator is a group of its own: a
// rank that fails the parent group leaves the split one's waits to end at their timeout. At the
// end, ncclCommFinalize (polled, within the timeout) then ncclCommDestroy.
//
// Streams. Each rank has a communication stream of its own (Stream::create). An operation
// records an event on the caller's current stream and makes the comm stream wait for it; then
// NCCL's kernels, and ours where the operation has some (deterministic mode, Avg), are queued on
// the comm stream, and a done-event is recorded behind them. The call returns there: no host
// thread takes part in moving data. Work::wait() polls the done-event and the communicator's
// asynchronous error until the event completes, then makes the caller's current stream wait for
// the done-event, so the results are ordered before the caller's later kernels without a host
// synchronization. The operation keeps the caller's tensors alive until its completion is seen
// (they belong to the caller's stream in the caching allocator, which would otherwise reuse
// them while the comm stream still works on them); its temporaries are allocated on the comm
// stream, where a block is reused only behind the work queued before (core/cuda_allocator.cpp).
//
// Failure. A wait that times out, sees an NCCL error, or waits for a peer that has left without
// taking part fails the group: every NCCL communicator of the group is aborted (ncclCommAbort
// makes kernels that wait for a peer exit), and every wait after that fails at once naming the
// first failure — "all_reduce #3 on rank 1 timed out after 2000 ms (waiting for rank 0)" on the
// rank that saw it, "all_reduce #3 on rank 0: rank 1 failed: ..." on the others, local.cpp's
// wording. A rank whose run_ranks_nccl function throws fails the group the same way. Every NCCL
// call on a communicator holds the communicator's mutex, and none blocks inside NCCL, so the
// thread that fails the group can take every mutex and abort every communicator at once. The
// group is this process's ranks: in run_ranks_nccl all of them, so a wait can also name the rank
// it waits for (the one that has not yet issued the operation); in nccl_world only one.
//
// Deterministic mode (mg::set_deterministic). ncclAllReduce promises no summation order, so
// all_reduce instead all-gathers every rank's whole tensor into (n, numel) and folds the rows in
// rank order 0..n-1 with the same kernels as algorithms.h's rank_ordered_all_reduce
// (backend::fold_in_rank_order); reduce_scatter exchanges blocks with grouped ncclSend/ncclRecv
// (an all-to-all) and folds them the same way.
// Both then give local's bits on every rank. Avg is a sum, then one division by n, as in local.
//
// Fingerprints (MG_DEBUG_COLL, read at every collective). Before each collective the ranks
// compare a fixed-size fingerprint of it (operation, reduce op, root, dtype, shape, sequence
// number); on a mismatch every rank throws, naming the first rank that differs and both calls,
// and the collective is not started, so the communicator stays usable. By default the ranks of
// run_ranks_nccl, all in this process, post them on a board in host memory (FingerprintBoard: no
// GPU work, but each rank's thread waits there until every rank has issued the collective), as do
// the groups split from them (each member finds the group's board by its NCCL id); the ranks of
// nccl_world, one per process, all-gather them over MPI (nccl_over_host's host communicator, split
// along with the NCCL one), the same wait. MG_DEBUG_COLL=0 turns the check off. With
// MG_DEBUG_COLL=1 the ranks all-gather the fingerprints on the device instead, which the calling
// thread waits for (so the comm stream's earlier work too). Unchecked, a mismatch does whatever
// NCCL does with it: a hang until the timeout, or wrong data.
//
// Messages to oneself. NCCL pairs a send to oneself with its receive only inside one group, but
// here they are two calls: send copies the tensor into a buffer on the comm stream, and the
// matching recv moves it with a grouped ncclSend/ncclRecv to itself (so one GPU runs NCCL's
// point-to-point path too).
//
// send_recv. An ncclSend completes only once the peer's ncclRecv runs, and a rank's operations
// run in order on its comm stream, so two ranks that send to each other before receiving wait
// for each other. send_recv queues its send and its receive as one NCCL group (ncclGroupStart,
// ncclSend, ncclRecv, ncclGroupEnd), whose halves progress together: one operation, one
// done-event, one Work. A half to or from this rank itself goes through the buffer above
// instead, so such a send_recv is a send and a recv queued one after the other.
#include "multigrad/parallel/comm/nccl.h"

#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "multigrad/core/deterministic.h"
#include "multigrad/kernels/kernels.h"
#include "multigrad/parallel/comm/mpi.h"
#include "multigrad/parallel/comm/nccl/group.h"
#include "multigrad/parallel/comm/nccl/rank.h"
#include "multigrad/parallel/comm/rank_threads.h"

namespace mg::parallel {

// Non-blocking communicators (ncclConfig_t::blocking) and ncclCommFinalize came with NCCL 2.14.
static_assert(NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0), "the nccl backend needs NCCL 2.14 or newer");

namespace {

using namespace nccl_backend;

// Rank p's block `me` of input goes to row p of rows, for every p: grouped sends and receives,
// NCCL's way of writing an all-to-all. input (n * block), rows (n, block).
ncclResult_t all_to_all(const Tensor& input, const Tensor& rows, ncclComm_t comm, cudaStream_t stream) {
  const int n = int(rows.size(0));
  const size_t block = size_t(rows.size(1));
  const size_t bytes = block * input.element_size();
  const ncclDataType_t type = nccl_type(input.dtype());
  const auto* in = static_cast<const char*>(input.data_ptr());
  auto* out = static_cast<char*>(rows.data_ptr());
  ncclResult_t result = ncclGroupStart();
  if (result != ncclSuccess) return result;
  for (int p = 0; p < n && result == ncclSuccess; ++p) {
    result = ncclSend(in + size_t(p) * bytes, block, type, p, comm, stream);
    if (result == ncclSuccess) result = ncclRecv(out + size_t(p) * bytes, block, type, p, comm, stream);
  }
  const ncclResult_t end = ncclGroupEnd();
  return result != ncclSuccess ? result : end;
}

// send_t to dst and recv_t from src as one group, so that both progress together (see
// "send_recv" in the design note); a half without elements is left out.
ncclResult_t send_and_recv(const Tensor& send_t, int dst, const Tensor& recv_t, int src, ncclComm_t comm,
                           cudaStream_t stream) {
  ncclResult_t result = ncclGroupStart();
  if (result != ncclSuccess) return result;
  if (send_t.numel() > 0) {
    result = ncclSend(send_t.data_ptr(), size_t(send_t.numel()), nccl_type(send_t.dtype()), dst, comm, stream);
  }
  if (result == ncclSuccess && recv_t.numel() > 0) {
    result = ncclRecv(recv_t.data_ptr(), size_t(recv_t.numel()), nccl_type(recv_t.dtype()), src, comm, stream);
  }
  const ncclResult_t end = ncclGroupEnd();
  return result != ncclSuccess ? result : end;
}

// ---------------------------------------------------------------- the communicator

class NcclCommunicator final : public Communicator {
 public:
  // owns_group: destroying the communicator ends the group's NCCL communicators (nccl_world);
  // run_ranks_nccl ends them itself once every rank is done.
  NcclCommunicator(std::shared_ptr<Group> group, std::shared_ptr<Handle> handle, int rank, Device device,
                   bool owns_group, FingerprintPeers peers)
      : rank_(std::make_shared<Rank>(std::move(group), std::move(handle), rank, device)),
        owns_group_(owns_group),
        peers_(std::move(peers)) {}

  // Waits for the operations still in flight (a destructor cannot throw: a failure is printed
  // where this rank caused it, and is otherwise the group's, reported by its own rank).
  ~NcclCommunicator() override {
    Group& group = *rank_->group;
    try {
      for (const auto& op : in_flight_) {
        if (!group.failed()) rank_->wait(*op);
      }
    } catch (const std::exception& e) {
      if (group.failed_rank() == rank_->rank) std::fprintf(stderr, "nccl: %s\n", e.what());
    }
    if (group.failed()) {
      // The aborted communicators' kernels exit; the tensors they used may be freed only after.
      try {
        rank_->stream.synchronize();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "nccl: rank %d: %s\n", rank_->rank, e.what());
      }
    }
    in_flight_.clear();
    if (owns_group_) group.teardown(rank_->timeout());
  }

  int rank() const override { return rank_->rank; }
  int size() const override { return rank_->group->size(); }
  Device device() const override { return rank_->device; }
  void set_timeout(std::chrono::milliseconds timeout) override { rank_->timeout_ms = checked_timeout_ms(timeout); }

  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op) override {
    check_tensor("all_reduce", t);
    check_avg("all_reduce", op, t.dtype());
    Fingerprint fp(OpCode::AllReduce, t);
    fp.reduce = int64_t(op);
    const bool deterministic = is_deterministic();  // the mode when the call was made
    const Tensor flat = t.view({t.numel()});
    return collective(fp, {flat}, [=, this](const Op& o) {
      if (flat.numel() == 0) return;
      if (deterministic) {
        rank_ordered_all_reduce(o, flat, op);
      } else {
        rank_->call(o, [&](ncclComm_t comm, cudaStream_t stream) {
          return ncclAllReduce(flat.data_ptr(), flat.data_ptr(), size_t(flat.numel()), nccl_type(flat.dtype()),
                               nccl_op(op), comm, stream);
        });
      }
      finish_avg(op, flat, size());
    });
  }

  std::shared_ptr<Work> broadcast(const Tensor& t, int root) override {
    check_tensor("broadcast", t);
    check_rank("broadcast", "root", root, size());
    Fingerprint fp(OpCode::Broadcast, t);
    fp.root = root;
    const Tensor flat = t.view({t.numel()});
    return collective(fp, {flat}, [=, this](const Op& o) {
      if (flat.numel() == 0) return;
      rank_->call(o, [&](ncclComm_t comm, cudaStream_t stream) {
        return ncclBroadcast(flat.data_ptr(), flat.data_ptr(), size_t(flat.numel()), nccl_type(flat.dtype()), root,
                             comm, stream);
      });
    });
  }

  std::shared_ptr<Work> all_gather(const Tensor& output, const Tensor& input) override {
    check_tensor("all_gather", output);
    check_tensor("all_gather", input);
    check_all_gather(output, input, size());
    return collective(Fingerprint(OpCode::AllGather, input), {output, input}, [=, this](const Op& o) {
      if (input.numel() == 0) return;
      rank_->call(o, [&](ncclComm_t comm, cudaStream_t stream) {
        return ncclAllGather(input.data_ptr(), output.data_ptr(), size_t(input.numel()), nccl_type(input.dtype()),
                             comm, stream);
      });
    });
  }

  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override {
    check_tensor("reduce_scatter", output);
    check_tensor("reduce_scatter", input);
    check_reduce_scatter(output, input, op, size());
    Fingerprint fp(OpCode::ReduceScatter, input);
    fp.reduce = int64_t(op);
    const bool deterministic = is_deterministic();
    const Tensor out = output.view({output.numel()});
    return collective(fp, {out, input}, [=, this](const Op& o) {
      const int64_t block = out.numel();  // the elements this rank keeps
      if (block == 0) return;
      if (deterministic) {
        const Tensor rows = Tensor::empty({size(), block}, out.options());  // (n, block): row p from rank p
        rank_->call(o, [&](ncclComm_t comm, cudaStream_t stream) { return all_to_all(input, rows, comm, stream); });
        fold_in_rank_order(rows, out, op);
      } else {
        rank_->call(o, [&](ncclComm_t comm, cudaStream_t stream) {
          return ncclReduceScatter(input.data_ptr(), out.data_ptr(), size_t(block), nccl_type(input.dtype()),
                                   nccl_op(op), comm, stream);
        });
      }
      finish_avg(op, out, size());
    });
  }

  std::shared_ptr<Work> send(const Tensor& t, int dst) override {
    check_tensor("send", t);
    check_rank("send", "dst", dst, size());
    const uint64_t k = sent_[dst]++;
    const std::string what = detail::str_cat("send #", k, " to rank ", dst);
    rank_->group->issued_send(rank(), dst);
    if (dst == rank()) {
      return enqueue(what, {t}, no_peer, [&](const Op&) {
        Tensor message = Tensor::empty(t.shape(), t.options());  // on the comm stream
        kernels::copy(t, message);
        to_self_.push_back(std::move(message));
      });
    }
    auto late = [group = rank_->group, me = rank(), dst, k] { return group->late_for_send(me, dst, k); };
    return enqueue(what, {t}, late, [&](const Op& o) {
      if (t.numel() == 0) return;
      rank_->call(o, [&](ncclComm_t comm, cudaStream_t stream) {
        return ncclSend(t.data_ptr(), size_t(t.numel()), nccl_type(t.dtype()), dst, comm, stream);
      });
    });
  }

  std::shared_ptr<Work> recv(const Tensor& t, int src) override {
    check_tensor("recv", t);
    check_rank("recv", "src", src, size());
    const uint64_t k = received_[src]++;
    const std::string what = detail::str_cat("recv #", k, " from rank ", src);
    rank_->group->issued_recv(rank(), src);
    if (src == rank()) {
      MG_CHECK(!to_self_.empty(), what, " on rank ", rank(),
               ": this rank has sent itself no message to receive (a send to oneself must come first)");
      const Tensor message = std::move(to_self_.front());
      to_self_.pop_front();
      MG_CHECK(message.shape() == t.shape() && message.dtype() == t.dtype(), what, " on rank ", rank(), ": got ",
               message.shape(), " ", message.dtype(), " but the receiving tensor is ", t.shape(), " ", t.dtype());
      return enqueue(what, {t, message}, no_peer, [&](const Op& o) {
        if (t.numel() == 0) return;
        rank_->call(o, [&](ncclComm_t comm, cudaStream_t stream) {
          return send_and_recv(message, rank(), t, rank(), comm, stream);  // NCCL's point-to-point path
        });
      });
    }
    auto late = [group = rank_->group, me = rank(), src, k] { return group->late_for_recv(me, src, k); };
    return enqueue(what, {t}, late, [&](const Op& o) {
      if (t.numel() == 0) return;
      rank_->call(o, [&](ncclComm_t comm, cudaStream_t stream) {
        return ncclRecv(t.data_ptr(), size_t(t.numel()), nccl_type(t.dtype()), src, comm, stream);
      });
    });
  }

  std::shared_ptr<Work> send_recv(const Tensor& send_t, int dst, const Tensor& recv_t, int src) override {
    check_tensor("send_recv", send_t);
    check_tensor("send_recv", recv_t);
    check_rank("send_recv", "dst", dst, size());
    check_rank("send_recv", "src", src, size());
    if (dst == rank() || src == rank()) {  // a half through the buffer: see the design note
      std::shared_ptr<Work> sent = send(send_t, dst);
      return std::make_shared<WorkPair>(std::move(sent), recv(recv_t, src));
    }
    const uint64_t k = sent_[dst]++, j = received_[src]++;
    const std::string what = send_recv_what(k, dst, j, src);
    rank_->group->issued_send(rank(), dst);
    rank_->group->issued_recv(rank(), src);
    // Stuck on dst until it has posted its receive, else on src until it has sent.
    auto late = [group = rank_->group, me = rank(), dst, src, k, j] {
      const int receiver = group->late_for_send(me, dst, k);
      return receiver >= 0 ? receiver : group->late_for_recv(me, src, j);
    };
    return enqueue(what, {send_t, recv_t}, late, [&](const Op& o) {
      if (send_t.numel() == 0 && recv_t.numel() == 0) return;
      rank_->call(o, [&](ncclComm_t comm, cudaStream_t stream) {
        return send_and_recv(send_t, dst, recv_t, src, comm, stream);
      });
    });
  }

  // A one-element all-reduce: its Work completes once every rank has reached the barrier.
  std::shared_ptr<Work> barrier() override {
    return collective(Fingerprint(OpCode::Barrier, Tensor()), {}, [this](const Op& o) {
      const Tensor token = Tensor::empty({1}, {DType::Float32, device()});  // on the comm stream
      kernels::fill(token, 0.0);
      rank_->call(o, [&](ncclComm_t comm, cudaStream_t stream) {
        return ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclFloat32, ncclSum, comm, stream);
      });
    });
  }
  std::unique_ptr<Communicator> split(int color, int key) override;  // below the helpers it uses


 private:
  static int no_peer() { return -1; }

  // Numbers the collective; with MG_DEBUG_COLL, checks the fingerprints first; then queues it.
  template <class Body>
  std::shared_ptr<Work> collective(Fingerprint fp, std::vector<Tensor> keep, Body body) {
    fp.seq = int64_t(seq_++);
    const std::string what = fp.what();
    rank_->throw_if_failed(what);
    rank_->group->issued_collective(rank());
    auto late = [group = rank_->group, me = rank(), seq = uint64_t(fp.seq)] {
      return group->late_for_collective(me, seq);
    };
    switch (fingerprint_path()) {
      case FingerprintPath::Board: {
        const auto deadline = Clock::now() + rank_->timeout();
        const Tensor all = peers_.board->exchange(rank(), fp, [&] {
          std::string why = rank_->stop_waiting(what, late, deadline, rank_->timeout());
          if (!why.empty()) rank_->group->fail(rank(), why);  // as a wait's failure does
          return why;
        });
        check_fingerprints(fp, all, rank(), what);
        break;
      }
      case FingerprintPath::Host: exchange_fingerprints_over_host(fp, what); break;
      case FingerprintPath::Device: exchange_fingerprints(fp, what, late); break;
      case FingerprintPath::None: break;
    }
    return enqueue(what, std::move(keep), late, body);
  }

  // Queues `body` (NCCL calls and kernels, run with the comm stream current) behind the caller's
  // current stream's work, then the done-event behind it; see "Streams" in the design note.
  std::shared_ptr<Work> enqueue(std::string what, std::vector<Tensor> keep, std::function<int()> late,
                                const std::function<void(const Op&)>& body) {
    rank_->throw_if_failed(what);
    forget_completed();
    auto op = std::make_shared<Op>(std::move(what), device(), std::move(late));
    op->keep = std::move(keep);
    op->queued = Clock::now();
    {
      Event inputs_ready(device());
      inputs_ready.record(current_stream(device()));
      inputs_ready.wait(rank_->stream);
    }
    try {
      StreamGuard on_comm_stream(rank_->stream);
      body(*op);
    } catch (...) {
      op->done.record(rank_->stream);  // what was queued keeps its tensors until it has run
      in_flight_.push_back(op);
      throw;
    }
    op->done.record(rank_->stream);
    in_flight_.push_back(op);
    return std::make_shared<NcclWork>(rank_, op);
  }

  // See "Fingerprints" in the design note: MG_DEBUG_COLL unset or empty takes the peers' default
  // path, "0" none, anything else the device's.
  enum class FingerprintPath { None, Board, Host, Device };
  FingerprintPath fingerprint_path() const {
    const char* value = std::getenv("MG_DEBUG_COLL");
    if (value == nullptr || *value == '\0') {
      return peers_.board ? FingerprintPath::Board : peers_.host ? FingerprintPath::Host : FingerprintPath::None;
    }
    return debug_collectives() ? FingerprintPath::Device : FingerprintPath::None;
  }

  // The fingerprints all-gathered over the host communicator, within this communicator's timeout.
  // A failure there (a timeout, a peer gone) fails the group, as a wait's failure does.
  void exchange_fingerprints_over_host(const Fingerprint& fp, const std::string& what) {
    Communicator& host = *peers_.host;
    const int64_t words = Fingerprint::kWords;
    const Tensor all = Tensor::empty({size() * words}, {DType::Int64, host.device()});  // rank k's at k * kWords
    try {
      host.set_timeout(rank_->timeout());
      host.all_gather(all, fp.to_tensor(host.device()))->wait();
    } catch (const std::exception& e) {
      rank_->fail(detail::str_cat(what, " on rank ", rank(), ": comparing fingerprints over the host communicator: ",
                                  e.what()));
    }
    check_fingerprints(fp, all.view({size(), words}), rank(), what);
  }

  // Drops the operations the GPU has finished (their tensors may go); the rest stay in flight.
  void forget_completed() {
    while (!in_flight_.empty() && in_flight_.front()->done.query()) in_flight_.pop_front();
  }

  // See "MG_DEBUG_COLL" in the design note. The fingerprints go through the caller's stream, as
  // any tensor, and the host reads them after a wait with the timeout.
  void exchange_fingerprints(const Fingerprint& fp, const std::string& what, const std::function<int()>& late) {
    const Device host("cpu:0");
    const int64_t words = Fingerprint::kWords;
    const Tensor mine_on_host = fp.to_tensor(host);
    const Tensor mine = Tensor::empty({words}, {DType::Int64, device()});
    kernels::copy_across_devices(mine_on_host, mine);
    const Tensor all = Tensor::empty({size(), words}, {DType::Int64, device()});  // (n, kWords): row k from rank k
    enqueue(what, {mine, all}, late, [&](const Op& o) {
      rank_->call(o, [&](ncclComm_t comm, cudaStream_t stream) {
        return ncclAllGather(mine.data_ptr(), all.data_ptr(), size_t(words), ncclInt64, comm, stream);
      });
    })->wait();
    Tensor all_on_host = Tensor::empty({size(), words}, {DType::Int64, host});
    kernels::copy_across_devices(all, all_on_host);
    check_fingerprints(fp, all_on_host, rank(), what);
  }

  // algorithms.h's rank_ordered_all_reduce: every rank computes t_0 + t_1 + ... + t_{n-1} itself.
  void rank_ordered_all_reduce(const Op& o, const Tensor& flat, ReduceOp op) {
    const int64_t numel = flat.numel();
    const Tensor rows = Tensor::empty({size(), numel}, flat.options());  // (n, numel): row k = rank k's t
    rank_->call(o, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllGather(flat.data_ptr(), rows.data_ptr(), size_t(numel), nccl_type(flat.dtype()), comm, stream);
    });
    fold_in_rank_order(rows, flat, op);
  }

  // ---------------------------------------------------------------- argument checks

  // backend::check_tensor, and besides a CUDA tensor (said before its device is compared with
  // this rank's).
  void check_tensor(const char* op, const Tensor& t) const {
    MG_CHECK(!t.defined() || t.device().is_cuda(), op, ": the nccl backend takes CUDA tensors; got one on ",
             t.device(), " (rank ", rank(), " is on ", device(), ") — the local and mpi backends take CPU tensors");
    backend::check_tensor(op, t, rank(), device());
  }

  std::shared_ptr<Rank> rank_;
  const bool owns_group_;
  const FingerprintPeers peers_;
  uint64_t seq_ = 0;                         // collectives issued
  std::map<int, uint64_t> sent_, received_;  // messages per peer
  std::deque<Tensor> to_self_;               // messages sent to this rank itself, oldest first
  std::deque<std::shared_ptr<Op>> in_flight_;
};

// Split (the design note): the group's first member makes an NCCL id, every rank all-gathers the
// ids over this communicator (every rank joins, whatever its color), and the members make a
// communicator of their own from their leader's id, as PyTorch's new_group does.
std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  const std::vector<int> members = split_members(*this, color, key);
  static_assert(sizeof(ncclUniqueId) % sizeof(int64_t) == 0);  // the ids travel as Int64 words
  constexpr int64_t kIdWords = sizeof(ncclUniqueId) / sizeof(int64_t);
  const Device host("cpu:0");
  const Tensor mine = Tensor::empty({kIdWords}, {DType::Int64, host});
  std::memset(mine.data_ptr(), 0, sizeof(ncclUniqueId));
  if (!members.empty() && members[0] == rank()) {
    ncclUniqueId id;
    const ncclResult_t got_id = ncclGetUniqueId(&id);
    MG_CHECK(got_id == ncclSuccess, "split: ncclGetUniqueId failed on rank ", rank(), ": ",
             nccl_error(got_id, nullptr));
    std::memcpy(mine.data_ptr(), &id, sizeof(id));
  }
  const Tensor all = Tensor::empty({size() * kIdWords}, {DType::Int64, device()});
  all_gather(all, mine.to(device()))->wait();
  const int n = int(members.size()), index = int(std::find(members.begin(), members.end(), rank()) - members.begin());
  // The members' fingerprint peers: a board of their own in this process, or their host group.
  FingerprintPeers peers;
  if (peers_.host) {
    peers.host = peers_.host->split(color, key);  // every rank of the host group, as here
    MG_CHECK(members.empty() || peers.host->rank() == index, "split: the host communicator's split put rank ",
             rank(), " at rank ", peers.host->rank(), ", not where the nccl split puts it (", index, ")");
  }
  if (members.empty()) return nullptr;
  ncclUniqueId id;
  std::memcpy(&id, all.to(host).data<int64_t>() + members[0] * kIdWords, sizeof(id));
  std::vector<ncclComm_t> comms(1, nullptr);
  ncclConfig_t config = non_blocking_config();
  ncclResult_t result;
  {
    detail::CudaDeviceGuard on_gpu(physical_gpus("split", {device()})[0]);
    result = ncclCommInitRankConfig(&comms[0], n, id, index, &config);
  }
  finish_init(detail::str_cat("split: making the NCCL communicator of rank ", index, " of ", n, " (color ", color,
                              ") on ", device()),
              comms, result);
  std::vector<std::shared_ptr<Handle>> handles = handles_of(comms);
  if (peers_.board) peers.board = board_of(id, n);
  auto group = std::make_shared<Group>(n, handles, /*all_ranks_here=*/false);
  auto out = std::make_unique<NcclCommunicator>(group, handles[0], index, device(), /*owns_group=*/true,
                                                std::move(peers));
  out->set_timeout(rank_->timeout());
  return out;
}

}  // namespace

bool nccl_available() { return true; }

void run_ranks_nccl(const std::vector<Device>& devices, const std::function<void(Communicator& comm)>& fn) {
  const int n = int(devices.size());
  MG_CHECK(n > 0, "run_ranks_nccl: needs at least one device");
  const std::vector<int> gpus = physical_gpus("run_ranks_nccl", devices);
  std::vector<std::shared_ptr<Handle>> handles = make_communicators(devices, gpus);
  auto group = std::make_shared<Group>(n, handles, /*all_ranks_here=*/true);
  const FingerprintPeers peers{.board = std::make_shared<FingerprintBoard>(n)};
  RankThreadHooks hooks{
      .make_communicator =
          [&](int r) {
            set_cuda_device(devices[size_t(r)]);
            return std::make_unique<NcclCommunicator>(group, handles[size_t(r)], r, devices[size_t(r)],
                                                      /*owns_group=*/false, peers);
          },
      .abort = [&](int r, const std::string& message) { group->fail(r, message); },
      .leave = [&](int r) { group->leave(r); },
      .failed_rank = [&] { return group->failed_rank(); },
  };
  try {
    run_rank_threads(n, hooks, fn);
  } catch (...) {
    group->teardown(backend::kDefaultTimeout);
    throw;
  }
  group->teardown(backend::kDefaultTimeout);
}

std::unique_ptr<Communicator> nccl_over_host(std::shared_ptr<Communicator> host, Device device) {
  MG_CHECK(host != nullptr, "nccl_over_host: no host communicator");
  MG_CHECK(host->device().is_cpu(), "nccl_over_host: the host communicator must be on a CPU device, got one on ",
           host->device());
  const int gpu = physical_gpus("nccl_over_host", {device})[0];
  // ncclUniqueId is opaque bytes; the host group moves it as Int64 words.
  static_assert(sizeof(ncclUniqueId) % sizeof(int64_t) == 0);
  constexpr int64_t kIdWords = sizeof(ncclUniqueId) / sizeof(int64_t);
  const int rank = host->rank(), size = host->size();
  ncclUniqueId id;
  Tensor words = Tensor::empty({kIdWords}, {DType::Int64, host->device()});
  if (rank == 0) {
    const ncclResult_t got_id = ncclGetUniqueId(&id);
    MG_CHECK(got_id == ncclSuccess, "nccl_over_host: ncclGetUniqueId failed on rank 0: ", nccl_error(got_id, nullptr));
    std::memcpy(words.data_ptr(), &id, sizeof(id));
  }
  host->broadcast(words, 0)->wait();
  std::memcpy(&id, words.data_ptr(), sizeof(id));
  std::vector<ncclComm_t> comms(1, nullptr);
  ncclConfig_t config = non_blocking_config();
  ncclResult_t result;
  {
    detail::CudaDeviceGuard on_gpu(gpu);
    result = ncclCommInitRankConfig(&comms[0], size, id, rank, &config);
  }
  finish_init(detail::str_cat("nccl_over_host: making the NCCL communicator of rank ", rank, " of ", size, " on ",
                              device),
              comms, result);
  std::vector<std::shared_ptr<Handle>> handles = handles_of(comms);
  auto group = std::make_shared<Group>(size, handles, /*all_ranks_here=*/false);
  set_cuda_device(device);
  return std::make_unique<NcclCommunicator>(group, handles[0], rank, device, /*owns_group=*/true,
                                            FingerprintPeers{.host = std::move(host)});
}

std::unique_ptr<Communicator> nccl_world(Device device) {
  MG_CHECK(mpi_available(), "nccl_world: the ranks exchange the NCCL id over MPI, and this build has no MPI "
           "backend (OpenMPI was not found when configuring; install libopenmpi-dev and reconfigure) — or drive "
           "every GPU from one process with run_ranks_nccl");
  physical_gpus("nccl_world", {device});  // a bad device is named before MPI starts
  return nccl_over_host(mpi_world(Device("cpu:0")), device);
}

}  // namespace mg::parallel

// parallel/comm/mpi.cpp — the mpi backend (mpi.h): one rank per process, OpenMPI underneath. The
// build compiles it when it finds MPI, and no_mpi.cpp when it does not; mpi_env.cpp reads
// mpirun's variables in both.
//
// Design note.
//
// Threads. A call (all_reduce, send, ...) checks its arguments on the caller's thread, with the
// same checks and messages as local.cpp (backend_common.h), numbers the operation and queues a
// job on the rank's ProgressThread (progress_thread.h); the job does the communication. Every MPI call
// of the process is made under one mutex, so MPI_THREAD_SERIALIZED is enough whichever thread
// makes it; apart from initialization and a few queries (rank, size, mpi_abort), they come from
// progress threads.
//
// Waiting. A job starts nonblocking operations (MPI_Iallreduce, MPI_Ibcast, ...) and tests them
// until they complete: MPI moves data only inside MPI calls, so a waiting job keeps calling
// MPI_Testall, yielding between tests at first (small messages are latency-bound) and then
// sleeping briefly, so that an idle wait costs little CPU on a shared machine. Every wait has
// the communicator's timeout. MPI cannot cancel a collective, so after a timeout the operation
// stays in flight: its buffers are kept alive until the process ends (MPI may still write into
// them), and the communicator is broken — every later operation fails at once, naming the first
// failure. An MPI error breaks it the same way.
//
// Deterministic mode (mg::set_deterministic). MPI_Allreduce promises no summation order, so
// all_reduce instead all-gathers every rank's whole tensor into (n, numel) and folds the rows
// in rank order 0..n-1 with the same kernels as algorithms.h's rank_ordered_all_reduce
// (backend::fold_in_rank_order); reduce_scatter exchanges blocks with MPI_Ialltoall and folds
// them the same way. Both backends then give the same bits, on every rank. Otherwise
// MPI_Iallreduce and MPI_Ireduce_scatter_block run whatever algorithm OpenMPI picks. Avg is a
// sum, then one division by n, as in local.cpp.
//
// Fingerprints. Before each collective the ranks all-gather a fixed-size fingerprint of it
// (operation, reduce op, root, dtype, shape, sequence number); on a mismatch every rank fails,
// naming the first rank that differs and both calls, and the operation itself is not started,
// so the communicator stays usable. On by default: ranks started apart can disagree (another
// batch size puts collectives of other sizes in step), and what MPI does with a mismatch is a
// crash inside OpenMPI, a hang or wrong data. The cost is one small all-gather per collective
// on the progress thread, so the caller does not wait for it; MG_DEBUG_COLL=0 turns it off.
//
// send and recv. send sends a copy of the tensor, preceded by a header (dtype, shape) that recv
// checks against its own tensor; on a mismatch recv still takes the data, so the next message
// lines up, and fails naming both. As with local, send does not wait for the receiver: its Work
// is complete once the message is handed to MPI, which delivers it in the background, tested by
// every later wait and, when nothing else is queued, by a drain job; so two ranks may each send
// before they receive. A message still undelivered after the timeout breaks the communicator.
// send_recv starts its send the same way, then receives, then waits for its send too (one Work
// for both halves); if the receive fails, the send goes on in the background as send's does.
#include "multigrad/parallel/comm/mpi.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "multigrad/core/error.h"
#include "multigrad/parallel/comm/backend_common.h"
#include "multigrad/parallel/comm/local.h"
#include "multigrad/parallel/comm/progress_thread.h"

namespace mg::parallel {
namespace {

using namespace backend;  // the checks, folds and names every backend shares

// One tag for every message: MPI delivers messages with the same (source, tag) in send order.
constexpr int kMessageTag = 0;
// How long mpi_abort waits inside MPI_Abort for mpirun to kill this rank before it exits itself.
constexpr std::chrono::seconds kAbortGrace{5};

// Every MPI call of the process holds it (see the design note).
std::mutex& mpi_mutex() {
  static std::mutex mu;
  return mu;
}

std::string mpi_error_string(int code) {  // caller holds mpi_mutex()
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return detail::str_cat("MPI error ", code);
  return std::string(text, size_t(length));
}

void finalize_at_exit() {
  std::lock_guard<std::mutex> lock(mpi_mutex());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// Initializes MPI on first use and checks that its progress threads may call it.
void initialize_mpi() {
  std::lock_guard<std::mutex> lock(mpi_mutex());
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  MG_CHECK(!finalized, "mpi_world: MPI has already been finalized in this process");
  int provided = 0;
  if (initialized) {
    MPI_Query_thread(&provided);  // initialized by the program itself
  } else {
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    std::atexit(finalize_at_exit);
  }
  MG_CHECK(provided >= MPI_THREAD_SERIALIZED, "mpi_world: MPI provides thread level ", provided,
           " but the mpi backend needs MPI_THREAD_SERIALIZED (", MPI_THREAD_SERIALIZED,
           "): its progress threads call MPI");
}

// The buffers of operations that timed out: MPI may still read or write them, so they are never
// freed (a few operations per broken communicator).
void keep_forever(const std::vector<Tensor>& buffers) {
  static std::mutex mu;
  static auto* kept = new std::vector<Tensor>();
  std::lock_guard<std::mutex> lock(mu);
  kept->insert(kept->end(), buffers.begin(), buffers.end());
}

// Fingerprints before each collective: on unless MG_DEBUG_COLL=0; read once per process.
bool fingerprints_on() {
  static const bool on = [] {
    const char* value = std::getenv("MG_DEBUG_COLL");
    return value == nullptr || std::string(value) != "0";
  }();
  return on;
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Int64: return MPI_INT64_T;
    default: MG_ERROR("mpi: no MPI datatype for ", dtype);  // check_tensor rejects it earlier
  }
}

// Avg sums and divides once at the end.
MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }

// A send in flight (see "send and recv" above).
struct PendingSend {
  std::vector<MPI_Request> requests;  // header, data
  std::vector<Tensor> buffers;        // what MPI reads until then
  std::string what;                   // "send #3 to rank 1"
  int dst;
  std::chrono::steady_clock::time_point deadline;
};

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(Device device) : device_(device) {
    initialize_mpi();
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
      MPI_Comm_size(MPI_COMM_WORLD, &size_);
    }
    progress_ = std::make_unique<ProgressThread>();
    submit([this] { duplicate_world(); })->wait();
  }

  // Takes `comm` (made by split()) as its own.
  MpiCommunicator(Device device, MPI_Comm comm) : device_(device), comm_(comm) {
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      MPI_Comm_rank(comm_, &rank_);
      MPI_Comm_size(comm_, &size_);
    }
    progress_ = std::make_unique<ProgressThread>();
    submit([this] {
      call("MPI_Comm_set_errhandler", "split", [&] { return MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN); });
    })->wait();
  }

  // Runs what is queued, finishes the background sends, frees the MPI communicator.
  ~MpiCommunicator() override {
    submit([this] { release(); })->wait();  // release never throws; nothing is queued after it
    progress_.reset();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return device_; }
  void set_timeout(std::chrono::milliseconds timeout) override { timeout_ms_ = checked_timeout_ms(timeout); }

  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op) override {
    check_tensor("all_reduce", t);
    check_avg("all_reduce", op, t.dtype());
    Fingerprint sig(OpCode::AllReduce, t);
    sig.reduce = int64_t(op);
    const bool deterministic = is_deterministic();  // as it is when the call is made
    Tensor flat = t.view({t.numel()});
    return collective(sig, [=, this](const std::string& what) {
      if (deterministic) {
        rank_ordered_all_reduce(flat, op, what);
      } else {
        MPI_Request request;
        call("MPI_Iallreduce", what, [&] {
          return MPI_Iallreduce(MPI_IN_PLACE, flat.data_ptr(), int(flat.numel()), mpi_type(flat.dtype()),
                                mpi_op(op), comm_, &request);
        });
        wait_for({request}, {flat}, what);
      }
      finish_avg(op, flat, size_);
    });
  }

  std::shared_ptr<Work> broadcast(const Tensor& t, int root) override {
    check_tensor("broadcast", t);
    check_rank("broadcast", "root", root, size_);
    Fingerprint sig(OpCode::Broadcast, t);
    sig.root = root;
    return collective(sig, [=, this](const std::string& what) {
      MPI_Request request;
      call("MPI_Ibcast", what, [&] {
        return MPI_Ibcast(t.data_ptr(), int(t.numel()), mpi_type(t.dtype()), root, comm_, &request);
      });
      wait_for({request}, {t}, what);
    });
  }

  std::shared_ptr<Work> all_gather(const Tensor& output, const Tensor& input) override {
    check_tensor("all_gather", output);
    check_tensor("all_gather", input);
    check_all_gather(output, input, size_);
    return collective(Fingerprint(OpCode::AllGather, input), [=, this](const std::string& what) {
      const int count = int(input.numel());
      const MPI_Datatype type = mpi_type(input.dtype());
      MPI_Request request;
      call("MPI_Iallgather", what, [&] {
        return MPI_Iallgather(input.data_ptr(), count, type, output.data_ptr(), count, type, comm_, &request);
      });
      wait_for({request}, {input, output}, what);
    });
  }

  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override {
    check_tensor("reduce_scatter", output);
    check_tensor("reduce_scatter", input);
    check_reduce_scatter(output, input, op, size_);
    Fingerprint sig(OpCode::ReduceScatter, input);
    sig.reduce = int64_t(op);
    const bool deterministic = is_deterministic();
    return collective(sig, [=, this](const std::string& what) {
      const int block = int(output.numel());  // elements each rank keeps
      const MPI_Datatype type = mpi_type(input.dtype());
      MPI_Request request;
      if (deterministic) {
        // Row k of blocks is rank k's block for this rank; folded in rank order below.
        Tensor blocks = Tensor::empty({size_, output.numel()}, output.options());  // (n, block)
        call("MPI_Ialltoall", what, [&] {
          return MPI_Ialltoall(input.data_ptr(), block, type, blocks.data_ptr(), block, type, comm_, &request);
        });
        wait_for({request}, {input, blocks}, what);
        fold_in_rank_order(blocks, output.view({output.numel()}), op);
      } else {
        call("MPI_Ireduce_scatter_block", what, [&] {
          return MPI_Ireduce_scatter_block(input.data_ptr(), output.data_ptr(), block, type, mpi_op(op), comm_,
                                           &request);
        });
        wait_for({request}, {input, output}, what);
      }
      finish_avg(op, output, size_);
    });
  }

  std::shared_ptr<Work> send(const Tensor& t, int dst) override {
    check_tensor("send", t);
    check_rank("send", "dst", dst, size_);
    const std::string what = detail::str_cat("send #", sent_[dst]++, " to rank ", dst);
    throw_if_broken(what);
    const Tensor header = Fingerprint(OpCode::Message, t).to_tensor(device_);
    const Tensor message = t.clone();  // the caller may change t once send returns
    return submit([=, this] {
      throw_if_broken(what);
      send_in_background({start_send(header, message, dst, what), {header, message}, what, dst, send_deadline()});
    });
  }

  std::shared_ptr<Work> recv(const Tensor& t, int src) override {
    check_tensor("recv", t);
    check_rank("recv", "src", src, size_);
    const std::string what = detail::str_cat("recv #", received_[src]++, " from rank ", src);
    throw_if_broken(what);
    return submit([=, this] {
      throw_if_broken(what);
      receive_message(t, src, what);
    });
  }

  std::shared_ptr<Work> send_recv(const Tensor& send_t, int dst, const Tensor& recv_t, int src) override {
    check_tensor("send_recv", send_t);
    check_tensor("send_recv", recv_t);
    check_rank("send_recv", "dst", dst, size_);
    check_rank("send_recv", "src", src, size_);
    const uint64_t k = sent_[dst]++;
    const std::string what = send_recv_what(k, dst, received_[src]++, src);
    throw_if_broken(what);
    const Tensor header = Fingerprint(OpCode::Message, send_t).to_tensor(device_);
    const Tensor message = send_t.clone();
    return submit([=, this] {
      throw_if_broken(what);
      PendingSend sending{start_send(header, message, dst, what), {header, message}, what, dst, send_deadline()};
      try {
        receive_message(recv_t, src, what);  // MPI moves the send meanwhile: its progress is global
      } catch (...) {
        send_in_background(std::move(sending));
        throw;
      }
      wait_for(std::move(sending.requests), sending.buffers, what, dst);
    });
  }

  std::shared_ptr<Work> barrier() override {
    return collective(Fingerprint(OpCode::Barrier, Tensor()), [this](const std::string& what) {
      MPI_Request request;
      call("MPI_Ibarrier", what, [&] { return MPI_Ibarrier(comm_, &request); });
      wait_for({request}, {}, what);
    });
  }
  // Every rank has shown up (split_members' all_gather, with the timeout) before the blocking
  // MPI_Comm_split, which orders a color's ranks by (key, rank) as split_members does.
  std::unique_ptr<Communicator> split(int color, int key) override {
    const std::vector<int> members = split_members(*this, color, key);
    MPI_Comm sub = MPI_COMM_NULL;
    submit([&] {
      call("MPI_Comm_split", "split", [&] {
        return MPI_Comm_split(comm_, members.empty() ? MPI_UNDEFINED : color, key, &sub);
      });
    })->wait();
    if (members.empty()) return nullptr;
    auto comm = std::make_unique<MpiCommunicator>(device_, sub);
    comm->timeout_ms_ = timeout_ms_.load();
    return comm;
  }


 private:
  // ---------------------------------------------------------------- jobs (progress thread)

  // Every job goes through here. After a job that leaves sends in flight with nothing queued
  // behind it, a drain job keeps testing them (MPI progresses only inside MPI calls) until they
  // complete or another job arrives, which tests them in turn.
  std::shared_ptr<Work> submit(std::function<void()> job) {
    const uint64_t ticket = ++submitted_;
    return progress_->submit([this, ticket, job = std::move(job)] {
      struct DrainAfter {
        MpiCommunicator* self;
        uint64_t ticket;
        ~DrainAfter() {
          if (!self->pending_sends_.empty() && self->submitted_ == ticket && !self->broken()) {
            self->submit([s = self, next = ticket + 1] { s->drain(next); });
          }
        }
      } drain_after{this, ticket};  // also when the job throws
      job();
    });
  }

  // Tests the background sends until they complete or a job after `ticket` (this one's) is queued.
  void drain(uint64_t ticket) {
    for (int polls = 0; !pending_sends_.empty() && submitted_ == ticket && !broken(); ++polls) {
      back_off(polls);
      test_pending_sends();
    }
  }

  // Numbers the collective, then queues: the fingerprint check (unless MG_DEBUG_COLL=0), then body.
  template <class Body>
  std::shared_ptr<Work> collective(Fingerprint sig, Body body) {
    sig.seq = int64_t(seq_++);
    const std::string what = sig.what();
    throw_if_broken(what);
    return submit([this, sig, what, body = std::move(body)] {
      throw_if_broken(what);
      if (fingerprints_on()) exchange_fingerprints(sig, what);
      body(what);
    });
  }

  // Every rank's fingerprint of this collective; all ranks see the same table and fail alike.
  void exchange_fingerprints(const Fingerprint& sig, const std::string& what) {
    const Tensor mine = sig.to_tensor(device_);
    const Tensor all = Tensor::empty({size_, Fingerprint::kWords}, {DType::Int64, device_});  // (n, kWords)
    MPI_Request request;
    call("MPI_Iallgather", what, [&] {
      return MPI_Iallgather(mine.data_ptr(), Fingerprint::kWords, MPI_INT64_T, all.data_ptr(), Fingerprint::kWords,
                            MPI_INT64_T, comm_, &request);
    });
    wait_for({request}, {mine, all}, what);
    check_fingerprints(sig, all, rank_, what);
  }

  void rank_ordered_all_reduce(const Tensor& flat, ReduceOp op, const std::string& what) {
    const int64_t numel = flat.numel();
    const Tensor gathered = Tensor::empty({size_, numel}, flat.options());  // (n, numel): row k = rank k's
    const MPI_Datatype type = mpi_type(flat.dtype());
    MPI_Request request;
    call("MPI_Iallgather", what, [&] {
      return MPI_Iallgather(flat.data_ptr(), int(numel), type, gathered.data_ptr(), int(numel), type, comm_,
                            &request);
    });
    wait_for({request}, {flat, gathered}, what);
    fold_in_rank_order(gathered, flat, op);
  }

  // Starts the two messages of a send to dst: its header, then its data (message, a copy).
  std::vector<MPI_Request> start_send(const Tensor& header, const Tensor& message, int dst, const std::string& what) {
    std::vector<MPI_Request> requests(2);
    call("MPI_Isend", what, [&] {
      return MPI_Isend(header.data_ptr(), Fingerprint::kWords, MPI_INT64_T, dst, kMessageTag, comm_, &requests[0]);
    });
    call("MPI_Isend", what, [&] {
      return MPI_Isend(message.data_ptr(), int(message.numel()), mpi_type(message.dtype()), dst, kMessageTag, comm_,
                       &requests[1]);
    });
    return requests;
  }

  // Leaves a started send to complete in the background (see "send and recv" above).
  void send_in_background(PendingSend send) {
    pending_sends_.push_back(std::move(send));
    test_pending_sends();  // a small message is usually complete already
  }

  // t = the next message from src, after its header. A header that does not match t: the data is
  // still taken (so that the next message lines up), then the error names both.
  void receive_message(const Tensor& t, int src, const std::string& what) {
    const Tensor header = Tensor::empty({Fingerprint::kWords}, {DType::Int64, device_});
    receive(header, src, what);
    const Fingerprint got = Fingerprint::from(header.data<int64_t>());
    const Fingerprint mine(OpCode::Message, t);
    if (got == mine) {
      receive(t, src, what);
      return;
    }
    receive(Tensor::empty({got.numel}, {DType(got.dtype), device_}), src, what);
    MG_ERROR(what, " on rank ", rank_, ": got ", got.shape_str(), " ", got.type_str(), " but the receiving tensor is ",
             t.shape(), " ", t.dtype());
  }

  // t = the next message from src (its header or its data).
  void receive(const Tensor& t, int src, const std::string& what) {
    MPI_Request request;
    call("MPI_Irecv", what, [&] {
      return MPI_Irecv(t.data_ptr(), int(t.numel()), mpi_type(t.dtype()), src, kMessageTag, comm_, &request);
    });
    wait_for({request}, {t}, what, src);
  }

  void duplicate_world() {
    const std::string what = "mpi_world";
    MPI_Request request;
    call("MPI_Comm_idup", what, [&] { return MPI_Comm_idup(MPI_COMM_WORLD, &comm_, &request); });
    wait_for({request}, {}, what);
    call("MPI_Comm_set_errhandler", what, [&] { return MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN); });
  }

  void release() {
    if (!pending_sends_.empty()) {
      try {
        throw_if_broken("the sends still in flight at destruction");
        for (int polls = 0; !pending_sends_.empty(); ++polls) {
          back_off(polls);
          test_pending_sends();
        }
      } catch (const std::exception& e) {  // a destructor cannot throw: say why messages were lost
        std::fprintf(stderr, "mpi: %s\n", e.what());
        for (const PendingSend& p : pending_sends_) keep_forever(p.buffers);
        pending_sends_.clear();
      }
    }
    std::lock_guard<std::mutex> lock(mpi_mutex());
    int finalized = 0;
    MPI_Finalized(&finalized);
    // A broken communicator still has an operation in flight: it is left to MPI_Finalize.
    if (!finalized && comm_ != MPI_COMM_NULL && !broken()) MPI_Comm_free(&comm_);
  }

  // Tests requests (and the background sends) until they complete; every wait goes through here.
  // On the timeout the communicator breaks, naming `peer` if known. If the wait fails, the
  // operation stays in flight and MPI may still use its buffers: they are kept forever.
  void wait_for(std::vector<MPI_Request> requests, const std::vector<Tensor>& buffers, const std::string& what,
                int peer = -1) {
    const auto limit = timeout();
    const auto deadline = std::chrono::steady_clock::now() + limit;
    try {
      for (int polls = 0;; ++polls) {
        int done = 0;
        call("MPI_Testall", what, [&] {
          return MPI_Testall(int(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
        });
        test_pending_sends();
        if (done) return;
        // Of two ranks, the one waited for is the other: name it (MPI does not say who is late).
        if (std::chrono::steady_clock::now() >= deadline)
          fail(timeout_message(what, rank_, limit, peer >= 0 ? peer : size_ == 2 ? 1 - rank_ : -1));
        back_off(polls);
      }
    } catch (...) {
      keep_forever(buffers);
      throw;
    }
  }

  // Drops the background sends MPI has completed; one past its deadline breaks the communicator.
  void test_pending_sends() {
    for (size_t i = 0; i < pending_sends_.size();) {
      PendingSend& p = pending_sends_[i];
      int done = 0;
      call("MPI_Testall", p.what, [&] {
        return MPI_Testall(int(p.requests.size()), p.requests.data(), &done, MPI_STATUSES_IGNORE);
      });
      if (done) {
        pending_sends_.erase(pending_sends_.begin() + std::ptrdiff_t(i));
        continue;
      }
      if (std::chrono::steady_clock::now() >= p.deadline) {
        keep_forever(p.buffers);
        const std::string message = timeout_message(p.what, rank_, timeout(), p.dst);
        pending_sends_.erase(pending_sends_.begin() + std::ptrdiff_t(i));
        fail(message);
      }
      ++i;
    }
  }

  // Runs one MPI call under the process's MPI mutex; an error breaks the communicator.
  template <class Call>
  void call(const char* name, const std::string& what, Call mpi_call) {
    std::string error;
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      const int code = mpi_call();
      if (code != MPI_SUCCESS) error = mpi_error_string(code);
    }
    if (!error.empty()) fail(detail::str_cat(what, " on rank ", rank_, ": ", name, " failed: ", error));
  }

  // ---------------------------------------------------------------- failure

  [[noreturn]] void fail(const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(failure_mu_);
      if (failure_.empty()) failure_ = message;
    }
    MG_ERROR(message);
  }

  bool broken() {
    std::lock_guard<std::mutex> lock(failure_mu_);
    return !failure_.empty();
  }

  void throw_if_broken(const std::string& what) {
    std::lock_guard<std::mutex> lock(failure_mu_);
    if (!failure_.empty()) MG_ERROR(what, " on rank ", rank_, ": this communicator failed earlier: ", failure_);
  }

  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeout_ms_.load()); }
  // When a send started now must have been delivered.
  std::chrono::steady_clock::time_point send_deadline() const { return std::chrono::steady_clock::now() + timeout(); }

  // ---------------------------------------------------------------- argument checks (caller's thread)

  // backend::check_tensor, and besides: a CPU tensor (said before its device is compared with
  // this rank's), of a size an MPI count can hold.
  void check_tensor(const char* op, const Tensor& t) const {
    MG_CHECK(!t.defined() || !t.device().is_cuda(), op, ": the mpi backend takes CPU tensors; got ", t.device(),
             " — use the nccl backend");
    backend::check_tensor(op, t, rank_, device_);
    MG_CHECK(t.numel() <= INT_MAX, op, ": tensor ", t.shape(), " has ", t.numel(),
             " elements, more than an MPI count can hold (", INT_MAX, ")");
  }

  // ---------------------------------------------------------------- state

  Device device_;
  int rank_ = -1;
  int size_ = 0;
  MPI_Comm comm_ = MPI_COMM_NULL;  // this object's duplicate of MPI_COMM_WORLD, or a split of one
  std::atomic<int64_t> timeout_ms_{kDefaultTimeout.count()};

  // The caller's thread: numbering.
  uint64_t seq_ = 0;                         // collectives issued
  std::map<int, uint64_t> sent_, received_;  // messages per peer
  std::atomic<uint64_t> submitted_{0};       // jobs queued, drain jobs included

  // The progress thread.
  std::vector<PendingSend> pending_sends_;

  std::mutex failure_mu_;
  std::string failure_;  // the first failure; once set, every operation fails naming it

  std::unique_ptr<ProgressThread> progress_;
};

}  // namespace

bool mpi_available() { return true; }

std::unique_ptr<Communicator> mpi_world(Device device) {
  MG_CHECK(!device.is_cuda(), "mpi_world: the mpi backend takes CPU tensors; got ", device,
           " — use the nccl backend");
  check_device_exists(device);
  return std::make_unique<MpiCommunicator>(device);
}

void mpi_abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());  // no other MPI call may run beside MPI_Abort
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) {
      int rank = -1, size = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      MPI_Comm_size(MPI_COMM_WORLD, &size);
      // Said here because mpirun's own MPI_ABORT notice is sometimes lost (OpenMPI 4.1 garbles
      // it when the ranks die while it is being sent).
      std::fprintf(stderr, "mpi_abort: rank %d of %d ends the job with exit code %d\n", rank, size, code);
      std::fflush(stderr);
      // MPI_Abort asks mpirun to end the job, and waits to be killed; when mpirun cannot reach
      // another host (a cut link) that wait has no end. This rank ends itself regardless.
      std::thread([code] {
        std::this_thread::sleep_for(kAbortGrace);
        std::_Exit(code);
      }).detach();
      MPI_Abort(MPI_COMM_WORLD, code);  // does not return
    }
  }
  std::exit(code);
}

}  // namespace mg::parallel

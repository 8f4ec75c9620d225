// sim/nccl.cpp — the NCCL functions multigrad calls, simulated for ranks that are threads of one
// process (run_ranks_nccl), on the simulated devices of runtime.cpp.
//
// Communicators made from one ncclUniqueId form a clique. Non-blocking ones (config.blocking =
// 0) answer ncclInProgress until every rank has joined, and ncclCommGetAsyncError says when they
// are ready; blocking ones wait for that (inside ncclGroupStart/End: at ncclGroupEnd).
// Every operation is queued on the caller's stream and runs there as NCCL's kernel would, waiting
// on the stream for its peers:
//   - a collective (all_reduce, broadcast, all_gather, reduce_scatter) is matched by its sequence
//     number on the communicator (its issue order, which must be the same on every rank). Once
//     every rank's part has arrived, each computes its result from the peers' inputs (sums in
//     rank order 0..n-1), waits until every rank has read the inputs, then writes its output, so
//     in-place operations are right. Parts that disagree (operation, count, type, reduction,
//     root) are an asynchronous error, ncclInvalidUsage, on every rank.
//   - ncclSend posts a message and waits until the peer's ncclRecv has taken it, as NCCL's send
//     completes only when the receiver has the data; messages between two ranks match in order.
//     A receive of another count or type than the message is ncclInvalidUsage.
//   - inside ncclGroupStart/End, a communicator's operations become one operation on its stream
//     that posts every send first, then takes every receive and runs every collective, then
//     waits for its sends: so grouped sends and receives between ranks progress together.
// ncclCommAbort makes the communicator's waiting operations stop at once (their outputs are
// undefined, as after an aborted NCCL kernel) and frees it; ncclCommFinalize answers
// ncclInProgress until the communicator's queued operations have run.
// Not simulated: other processes (ncclGetUniqueId's id means nothing outside this process), the
// network and NVLink, and NCCL's own summation orders.
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "multigrad/sim/ledger.h"
#include "multigrad/sim/state.h"

namespace mg::sim {
namespace {

std::mutex error_mutex;
std::string last_error;  // ncclGetLastError's text

ncclResult_t fail(ncclResult_t result, const std::string& message) {
  std::lock_guard<std::mutex> lock(error_mutex);
  last_error = message;
  return result;
}

size_t type_size(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

// out[i] = op over the ranks' in[r][i], in rank order; types and reductions multigrad uses.
template <class T>
void reduce_typed(const std::vector<const void*>& in, void* out, size_t count, ncclRedOp_t op) {
  auto* y = static_cast<T*>(out);
  const auto* first = static_cast<const T*>(in[0]);
  for (size_t i = 0; i < count; ++i) y[i] = first[i];
  for (size_t r = 1; r < in.size(); ++r) {
    const auto* x = static_cast<const T*>(in[r]);
    for (size_t i = 0; i < count; ++i) {
      switch (op) {
        case ncclSum:
        case ncclAvg:
          y[i] = y[i] + x[i];
          break;
        case ncclProd:
          y[i] = y[i] * x[i];
          break;
        case ncclMax:
          y[i] = x[i] > y[i] || x[i] != x[i] ? x[i] : y[i];
          break;  // NaN wins
        case ncclMin:
          y[i] = x[i] < y[i] || x[i] != x[i] ? x[i] : y[i];
          break;
        default:
          break;
      }
    }
  }
  if (op == ncclAvg)
    for (size_t i = 0; i < count; ++i) y[i] = y[i] / T(in.size());
}

bool reducible(ncclDataType_t type, ncclRedOp_t op) {
  const bool known_type = type == ncclFloat32 || type == ncclFloat64 || type == ncclInt32 || type == ncclInt64;
  const bool known_op = op == ncclSum || op == ncclProd || op == ncclMax || op == ncclMin || op == ncclAvg;
  return known_type && known_op && !(op == ncclAvg && (type == ncclInt32 || type == ncclInt64));
}

void reduce(const std::vector<const void*>& in, void* out, size_t count, ncclDataType_t type, ncclRedOp_t op) {
  switch (type) {
    case ncclFloat32:
      return reduce_typed<float>(in, out, count, op);
    case ncclFloat64:
      return reduce_typed<double>(in, out, count, op);
    case ncclInt32:
      return reduce_typed<int32_t>(in, out, count, op);
    case ncclInt64:
      return reduce_typed<int64_t>(in, out, count, op);
    default:
      return;
  }
}

enum class Kind { AllReduce, Broadcast, AllGather, ReduceScatter, Send, Recv };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::AllReduce:
      return "ncclAllReduce";
    case Kind::Broadcast:
      return "ncclBroadcast";
    case Kind::AllGather:
      return "ncclAllGather";
    case Kind::ReduceScatter:
      return "ncclReduceScatter";
    case Kind::Send:
      return "ncclSend";
    case Kind::Recv:
      return "ncclRecv";
  }
  return "?";
}

// One rank's part of an operation. count: elements sent by this rank (all_gather), received
// (reduce_scatter), or of the buffer (the others).
struct Part {
  Kind kind;
  const void* send;
  void* recv;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op = ncclSum;
  int root_or_peer = 0;
  uint64_t seq = 0;  // collectives: the sequence number on the communicator
};

bool same_collective(const Part& a, const Part& b) {
  return a.kind == b.kind && a.count == b.count && a.type == b.type && a.op == b.op &&
         (a.kind != Kind::Broadcast || a.root_or_peer == b.root_or_peer);
}

std::string describe(const Part& p) {
  return std::string(kind_name(p.kind)) + "(count " + std::to_string(p.count) + ", type " +
         std::to_string(int(p.type)) + ", op " + std::to_string(int(p.op)) + ", root " +
         std::to_string(p.root_or_peer) + ")";
}

struct Message {
  const void* data;
  size_t count;
  ncclDataType_t type;
  bool taken = false;
};

struct Collective {
  std::vector<const Part*> parts;  // by rank; null until it arrives
  int arrived = 0, read = 0, left = 0;
};

struct CommState;

// The communicators of one ncclUniqueId.
struct Clique {
  explicit Clique(int n) : nranks(n), members(size_t(n), nullptr), mailboxes(size_t(n) * size_t(n)) {}
  const int nranks;
  std::mutex mu;  // everything below
  std::condition_variable cv;
  std::vector<CommState*> members;
  int joined = 0;
  std::map<uint64_t, Collective> collectives;
  std::vector<std::deque<std::shared_ptr<Message>>> mailboxes;  // [src * n + dst]
};

struct CommState {
  std::shared_ptr<Clique> clique;
  int rank = 0, device = 0;
  bool aborted = false;                          // under clique->mu
  uint64_t collectives_issued = 0;               // host side: the next collective's sequence number
  std::atomic<ncclResult_t> async{ncclSuccess};  // an error found while running
  std::atomic<int> in_flight{0};                 // operations queued and not yet finished
  std::atomic<bool> finalizing{false};
};

std::mutex cliques_mutex;
std::map<std::string, std::weak_ptr<Clique>> cliques;  // by ncclUniqueId bytes
std::atomic<uint64_t> next_id{1};

// Sets the communicator's asynchronous error (the first one stays).
void async_fail(CommState& c, ncclResult_t result, const std::string& message) {
  ncclResult_t expected = ncclSuccess;
  if (c.async.compare_exchange_strong(expected, result)) fail(result, message);
}

// Runs one collective part on the stream (see the top of the file); stops early if aborted.
void run_collective(CommState& c, const Part& part) {
  Clique& q = *c.clique;
  const int n = q.nranks;
  std::unique_lock<std::mutex> lock(q.mu);
  Collective& col = q.collectives[part.seq];
  if (col.parts.empty()) col.parts.assign(size_t(n), nullptr);
  col.parts[size_t(c.rank)] = &part;
  ++col.arrived;
  q.cv.notify_all();
  q.cv.wait(lock, [&] { return c.aborted || col.arrived == n; });
  if (c.aborted) return;
  for (int r = 0; r < n; ++r) {
    if (!same_collective(*col.parts[size_t(r)], part)) {
      lock.unlock();
      async_fail(c, ncclInvalidUsage,
                 "collective #" + std::to_string(part.seq) + ": rank " + std::to_string(c.rank) + " called " +
                     describe(part) + ", rank " + std::to_string(r) + " " + describe(*col.parts[size_t(r)]));
      lock.lock();
      break;
    }
  }
  std::vector<unsigned char> result;
  if (c.async.load() == ncclSuccess) {
    const size_t bytes = type_size(part.type);
    std::vector<const void*> inputs;
    for (const Part* p : col.parts) inputs.push_back(p->send);
    lock.unlock();  // the peers wait below until every rank has read their inputs
    switch (part.kind) {
      case Kind::AllReduce:
        result.resize(part.count * bytes);
        reduce(inputs, result.data(), part.count, part.type, part.op);
        break;
      case Kind::Broadcast: {
        const auto* root = static_cast<const unsigned char*>(inputs[size_t(part.root_or_peer)]);
        result.assign(root, root + part.count * bytes);
        break;
      }
      case Kind::AllGather:
        result.resize(size_t(n) * part.count * bytes);
        for (int r = 0; r < n; ++r)
          std::memcpy(result.data() + size_t(r) * part.count * bytes, inputs[size_t(r)], part.count * bytes);
        break;
      case Kind::ReduceScatter: {
        std::vector<const void*> blocks;  // block `rank` of every rank's input
        for (const void* in : inputs)
          blocks.push_back(static_cast<const unsigned char*>(in) + size_t(c.rank) * part.count * bytes);
        result.resize(part.count * bytes);
        reduce(blocks, result.data(), part.count, part.type, part.op);
        break;
      }
      default:
        break;
    }
    lock.lock();
  }
  ++col.read;
  q.cv.notify_all();
  q.cv.wait(lock, [&] { return c.aborted || col.read == n; });
  if (c.aborted) return;
  if (!result.empty()) std::memcpy(part.recv, result.data(), result.size());
  if (++col.left == n) q.collectives.erase(part.seq);
}

std::shared_ptr<Message> post_send(CommState& c, const Part& part) {
  Clique& q = *c.clique;
  auto m = std::make_shared<Message>(Message{part.send, part.count, part.type});
  std::lock_guard<std::mutex> lock(q.mu);
  q.mailboxes[size_t(c.rank) * size_t(q.nranks) + size_t(part.root_or_peer)].push_back(m);
  q.cv.notify_all();
  return m;
}

void wait_taken(CommState& c, const std::shared_ptr<Message>& m) {
  std::unique_lock<std::mutex> lock(c.clique->mu);
  c.clique->cv.wait(lock, [&] { return c.aborted || m->taken; });
}

void take_recv(CommState& c, const Part& part) {
  Clique& q = *c.clique;
  auto& box = q.mailboxes[size_t(part.root_or_peer) * size_t(q.nranks) + size_t(c.rank)];
  std::unique_lock<std::mutex> lock(q.mu);
  q.cv.wait(lock, [&] { return c.aborted || !box.empty(); });
  if (c.aborted) return;
  std::shared_ptr<Message> m = box.front();
  box.pop_front();
  if (m->count != part.count || m->type != part.type) {
    lock.unlock();
    async_fail(c, ncclInvalidUsage,
               "ncclRecv on rank " + std::to_string(c.rank) + " of " + std::to_string(part.count) +
                   " elements of type " + std::to_string(int(part.type)) + " from rank " +
                   std::to_string(part.root_or_peer) + ", which sent " + std::to_string(m->count) + " of type " +
                   std::to_string(int(m->type)));
    lock.lock();
  } else {
    std::memcpy(part.recv, m->data, part.count * type_size(part.type));
  }
  m->taken = true;  // the sender goes on either way
  q.cv.notify_all();
}

// One operation on the stream: a communicator's parts of a group (or a single call).
void run_parts(CommState& c, const std::vector<Part>& parts) {
  std::vector<std::shared_ptr<Message>> sent;
  for (const Part& p : parts)
    if (p.kind == Kind::Send && p.count > 0) sent.push_back(post_send(c, p));
  for (const Part& p : parts) {
    if (p.kind == Kind::Send) continue;
    if (p.kind == Kind::Recv) {
      if (p.count > 0) take_recv(c, p);
    } else {
      run_collective(c, p);
    }
  }
  for (const auto& m : sent) wait_taken(c, m);
}

}  // namespace
}  // namespace mg::sim

using namespace mg::sim;

struct ncclComm {
  std::shared_ptr<CommState> state = std::make_shared<CommState>();
};

namespace mg::sim {
namespace {

// The calls between ncclGroupStart and ncclGroupEnd on this thread.
struct PendingOp {
  ncclComm_t comm;
  cudaStream_t stream;
  Part part;
};
thread_local int group_depth = 0;
thread_local std::vector<PendingOp> group_ops;
thread_local std::vector<ncclComm_t> group_blocking_inits;

bool ready(const CommState& c) {
  std::lock_guard<std::mutex> lock(c.clique->mu);
  return c.clique->joined == c.clique->nranks;
}

void wait_ready(const CommState& c) {
  std::unique_lock<std::mutex> lock(c.clique->mu);
  c.clique->cv.wait(lock, [&] { return c.clique->joined == c.clique->nranks; });
}

// Queues a communicator's parts as one operation on `stream`.
ncclResult_t launch(ncclComm_t comm, cudaStream_t stream, std::vector<Part> parts) {
  if (ledger::record_only()) return ncclSuccess;  // recorded by submit; nothing moves
  std::shared_ptr<CommState> c = comm->state;
  ++c->in_flight;
  const cudaError_t err = enqueue(stream, [c, parts = std::move(parts)] {
    run_parts(*c, parts);
    --c->in_flight;
  });
  if (err != cudaSuccess) {
    --c->in_flight;
    return fail(ncclUnhandledCudaError, std::string("the stream's device has failed: ") + cudaGetErrorString(err));
  }
  return ncclSuccess;
}

// Checks a call and queues it (or keeps it for ncclGroupEnd). `bytes_send`/`bytes_recv`: the
// extent of each buffer, checked against the device's allocations.
ncclResult_t submit(ncclComm_t comm, cudaStream_t stream, Part part, size_t send_elems, size_t recv_elems) {
  const char* fn = kind_name(part.kind);
  if (comm == nullptr) return fail(ncclInvalidArgument, std::string(fn) + ": null communicator");
  CommState& c = *comm->state;
  const size_t bytes = type_size(part.type);
  if (bytes == 0)
    return fail(ncclInvalidArgument, std::string(fn) + ": unknown datatype " + std::to_string(int(part.type)));
  const bool collective = part.kind != Kind::Send && part.kind != Kind::Recv;
  if ((part.kind == Kind::AllReduce || part.kind == Kind::ReduceScatter) && !reducible(part.type, part.op))
    return fail(ncclInvalidArgument, std::string(fn) + ": reduction " + std::to_string(int(part.op)) + " of datatype " +
                                         std::to_string(int(part.type)) + " is not simulated");
  if ((part.kind == Kind::Send || part.kind == Kind::Recv || part.kind == Kind::Broadcast) &&
      (part.root_or_peer < 0 || part.root_or_peer >= c.clique->nranks))
    return fail(ncclInvalidArgument, std::string(fn) + ": rank " + std::to_string(part.root_or_peer) +
                                         " is not one of the " + std::to_string(c.clique->nranks) + " ranks");
  if (stream_device(stream) != c.device)
    return fail(ncclInvalidArgument, std::string(fn) + ": the stream is on device " +
                                         std::to_string(stream_device(stream)) + ", the communicator on device " +
                                         std::to_string(c.device));
  const bool needs_send = part.kind != Kind::Recv && !(part.kind == Kind::Broadcast && part.root_or_peer != c.rank);
  const bool needs_recv = part.kind != Kind::Send;
  auto on_device = [&](const void* p, size_t elems) {
    return elems == 0 || (device_range(p, elems * bytes) && pointer_info(p).device == c.device);
  };
  if ((needs_send && !on_device(part.send, send_elems)) || (needs_recv && !on_device(part.recv, recv_elems)))
    return fail(ncclInvalidArgument, std::string(fn) + " on rank " + std::to_string(c.rank) +
                                         ": a buffer is not device memory of device " + std::to_string(c.device) +
                                         " of the size the count needs");
  if (!ready(c) && group_depth == 0)
    return fail(ncclInvalidUsage, std::string(fn) + ": the communicator is still being made (ncclInProgress)");
  if (collective) part.seq = c.collectives_issued++;
  if (ledger::on())  // bytes: what this rank sends (all-gather: its part), or receives (recv)
    ledger::record("nccl", "\"call\": \"" + std::string(fn) + "\", \"bytes\": " +
                               std::to_string((part.kind == Kind::Recv ? recv_elems : send_elems) * bytes) +
                               ", \"ranks\": " + std::to_string(c.clique->nranks) + ", \"rank\": " +
                               std::to_string(c.rank) + ", \"device\": " + std::to_string(c.device) +
                               ", \"stream\": " + std::to_string(ledger::stream_number(stream)));
  if (group_depth > 0) {
    group_ops.push_back({comm, stream, part});
    return ncclSuccess;
  }
  return launch(comm, stream, {part});
}

ncclResult_t init_rank(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank, bool blocking) {
  *out = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument,
                "ncclCommInitRank: rank " + std::to_string(rank) + " of " + std::to_string(nranks) + " ranks");
  const std::string key(id.internal, sizeof(id.internal));
  std::shared_ptr<Clique> clique;
  {
    std::lock_guard<std::mutex> lock(cliques_mutex);
    clique = cliques[key].lock();
    if (!clique) {
      clique = std::make_shared<Clique>(nranks);
      cliques[key] = clique;
    }
  }
  if (clique->nranks != nranks)
    return fail(ncclInvalidArgument, "ncclCommInitRank: " + std::to_string(nranks) +
                                         " ranks, but rank(s) of this id said " + std::to_string(clique->nranks));
  auto* comm = new ncclComm;
  CommState& c = *comm->state;
  c.clique = clique;
  c.rank = rank;
  c.device = current_device();
  {
    std::lock_guard<std::mutex> lock(clique->mu);
    if (clique->members[size_t(rank)] != nullptr) {
      delete comm;
      return fail(ncclInvalidUsage, "ncclCommInitRank: rank " + std::to_string(rank) + " joined twice");
    }
    clique->members[size_t(rank)] = &c;
    ++clique->joined;
    clique->cv.notify_all();
  }
  *out = comm;
  if (blocking) {
    if (group_depth > 0) {
      group_blocking_inits.push_back(comm);
    } else {
      wait_ready(c);
    }
    return ncclSuccess;
  }
  return ready(c) ? ncclSuccess : ncclInProgress;
}

void release(ncclComm_t comm) {
  CommState& c = *comm->state;
  {
    std::lock_guard<std::mutex> lock(c.clique->mu);
    c.clique->members[size_t(c.rank)] = nullptr;
  }
  delete comm;  // queued operations keep the state alive
}

}  // namespace
}  // namespace mg::sim

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return fail(ncclInvalidArgument, "ncclGetUniqueId: null id");
  std::memset(id->internal, 0, sizeof(id->internal));
  const uint64_t n = next_id++;
  std::memcpy(id->internal, &n, sizeof(n));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommInitRankConfig: null comm");
  const bool blocking = config == nullptr || config->blocking != 0;  // NCCL_CONFIG_UNDEF_INT: blocking
  return init_rank(comm, nranks, id, rank, blocking);
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr || ndev < 1) return fail(ncclInvalidArgument, "ncclCommInitAll: no communicators");
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  int previous = 0;
  cudaGetDevice(&previous);
  ncclResult_t result = ncclSuccess;
  ncclGroupStart();
  for (int r = 0; r < ndev && result == ncclSuccess; ++r) {
    if (cudaSetDevice(devlist != nullptr ? devlist[r] : r) != cudaSuccess) {
      result = fail(ncclInvalidArgument,
                    "ncclCommInitAll: no device " + std::to_string(devlist != nullptr ? devlist[r] : r));
      break;
    }
    result = init_rank(&comms[r], ndev, id, r, true);
  }
  const ncclResult_t end = ncclGroupEnd();
  cudaSetDevice(previous);
  return result != ncclSuccess ? result : end;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommFinalize: null communicator");
  comm->state->finalizing = true;
  return comm->state->in_flight.load() == 0 ? ncclSuccess : ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  release(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  CommState& c = *comm->state;
  {
    std::lock_guard<std::mutex> lock(c.clique->mu);
    c.aborted = true;
    c.clique->cv.notify_all();
  }
  release(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr || async_error == nullptr)
    return fail(ncclInvalidArgument, "ncclCommGetAsyncError: null argument");
  const CommState& c = *comm->state;
  const ncclResult_t error = c.async.load();
  if (error != ncclSuccess) {
    *async_error = error;
  } else if (!ready(c) || (c.finalizing && c.in_flight.load() > 0)) {
    *async_error = ncclInProgress;
  } else {
    *async_error = ncclSuccess;
  }
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) {
  thread_local std::string copy;
  std::lock_guard<std::mutex> lock(error_mutex);
  copy = last_error;
  return copy.c_str();
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return submit(comm, stream, {Kind::AllReduce, sendbuff, recvbuff, count, datatype, op}, count, count);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return submit(comm, stream, {Kind::Broadcast, sendbuff, recvbuff, count, datatype, ncclSum, root}, count, count);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  const size_t n = comm != nullptr ? size_t(comm->state->clique->nranks) : 0;
  return submit(comm, stream, {Kind::AllGather, sendbuff, recvbuff, sendcount, datatype}, sendcount, n * sendcount);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const size_t n = comm != nullptr ? size_t(comm->state->clique->nranks) : 0;
  return submit(comm, stream, {Kind::ReduceScatter, sendbuff, recvbuff, recvcount, datatype, op}, n * recvcount,
                recvcount);
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return submit(comm, stream, {Kind::Send, sendbuff, nullptr, count, datatype, ncclSum, peer}, count, 0);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return submit(comm, stream, {Kind::Recv, nullptr, recvbuff, count, datatype, ncclSum, peer}, 0, count);
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--group_depth > 0) return ncclSuccess;
  std::vector<PendingOp> ops = std::move(group_ops);
  std::vector<ncclComm_t> inits = std::move(group_blocking_inits);
  group_ops.clear();
  group_blocking_inits.clear();
  for (ncclComm_t comm : inits) wait_ready(*comm->state);
  // One operation per (communicator, stream), its parts in call order.
  ncclResult_t result = ncclSuccess;
  std::vector<bool> done(ops.size(), false);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (done[i]) continue;
    std::vector<Part> parts;
    for (size_t j = i; j < ops.size(); ++j) {
      if (!done[j] && ops[j].comm == ops[i].comm && ops[j].stream == ops[i].stream) {
        parts.push_back(ops[j].part);
        done[j] = true;
      }
    }
    if (!ready(*ops[i].comm->state)) wait_ready(*ops[i].comm->state);
    const ncclResult_t r = launch(ops[i].comm, ops[i].stream, std::move(parts));
    if (result == ncclSuccess) result = r;
  }
  return result;
}

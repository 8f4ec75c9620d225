// parallel/comm/communicator.h — collectives between ranks (docs/design.md).
//
// A Communicator is one rank's handle on a group of `size()` ranks, each with its own device.
// Collectives are called by every rank of the group in the same order; each returns a Work
// whose wait() blocks until this rank's part is done (collectives on one communicator complete
// in call order). Every wait has a timeout: a timeout, or a peer that failed, raises an
// mg::Error naming the operation, its sequence number, the rank and the timeout — never a
// silent hang.
//
// Backends: `local` (parallel/comm/local.h: one rank per device, each a thread of this process; the
// readable reference), `mpi` (mpi.h: one rank per process, CPU tensors) and `nccl` (nccl.h:
// CUDA tensors, one GPU per rank).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "multigrad/core/device.h"
#include "multigrad/core/tensor.h"

namespace mg::parallel {

enum class ReduceOp { Sum, Avg, Max };
const char* reduce_op_name(ReduceOp op);

// When a backend ran an operation, on the steady clock (DDP's overlap statistics).
struct WorkTiming {
  std::chrono::steady_clock::time_point start, end;
};

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until this rank's part of the operation is done; throws as described above.
  virtual void wait() = 0;
  // After wait(): when the operation ran; nullopt where the backend does not know.
  virtual std::optional<WorkTiming> timing() const { return std::nullopt; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Device device() const = 0;

  // In place on every rank: t = op over ranks of t. t is contiguous, on device(), and has the
  // same shape and dtype on every rank (Float32, Float64, Int64; Avg only for floating).
  virtual std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum) = 0;
  // t = root's t on every rank.
  virtual std::shared_ptr<Work> broadcast(const Tensor& t, int root) = 0;
  // output (size * n, ...) = the ranks' inputs (n, ...) concatenated along dim 0 in rank order.
  virtual std::shared_ptr<Work> all_gather(const Tensor& output, const Tensor& input) = 0;
  // input (size * n, ...) reduced over ranks; rank r keeps rows [r n, (r + 1) n) in output (n, ...).
  virtual std::shared_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input,
                                               ReduceOp op = ReduceOp::Sum) = 0;
  // Point to point (pipelines): t goes to rank dst / arrives from rank src (same shape, dtype).
  // Messages between two ranks arrive in the order they were sent. Whether a send waits for its
  // receiver depends on the backend: local and mpi buffer it (send returns once the message is
  // handed over), nccl does not (a send completes only once dst has posted the matching recv —
  // a rendezvous, which local can imitate: LocalOptions in local.h). Under rendezvous, two ranks
  // that each send to the other before receiving wait for each other until the timeout.
  virtual std::shared_ptr<Work> send(const Tensor& t, int dst) = 0;
  virtual std::shared_ptr<Work> recv(const Tensor& t, int src) = 0;
  // A send to dst and a recv from src issued together, both halves in flight at once (PyTorch's
  // batch_isend_irecv of the pair; one NCCL group): one Work, complete when both are. It counts
  // as this rank's next send to dst and next recv from src, so a peer may match it with a plain
  // recv and send, or with a send_recv of its own. Two ranks that exchange with each other this
  // way never wait for each other, whatever the backend. send_t and recv_t must not overlap.
  virtual std::shared_ptr<Work> send_recv(const Tensor& send_t, int dst, const Tensor& recv_t, int src) = 0;
  virtual std::shared_ptr<Work> barrier() = 0;

  // Collective (every rank calls it): the ranks that pass the same color form a new
  // communicator, ranked by key (ties by rank here), each on its device here — MPI_Comm_split's
  // rule, and PyTorch's new_group's result. A negative color joins no group: nullptr. The new
  // communicator is independent of this one (its own collectives, messages and timeout, this
  // one's to start with); a failed rank fails both (nccl: the new one's waits end at its timeout).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // The timeout of every wait (default 300 s).
  virtual void set_timeout(std::chrono::milliseconds timeout) = 0;
};

// For split(): every rank's (color, key) through comm (an all_gather, so a missing rank times
// out as any collective does), and the ranks that share this rank's color ordered by (key,
// rank), this rank among them; empty for a negative color.
std::vector<int> split_members(Communicator& comm, int color, int key);

// Every rank's `mine`, in rank order, on every rank. Two all_gathers that every rank can join
// whatever its text: the lengths (one Int64 each), then the texts padded to the longest.
std::vector<std::string> all_gather_text(Communicator& comm, const std::string& mine);

}  // namespace mg::parallel

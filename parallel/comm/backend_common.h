// parallel/comm/backend_common.h — what the three backends (local.cpp, mpi.cpp, nccl/) share, so
// that they check their arguments with the same messages, reduce with the same kernels in the
// same order (hence the same bits in deterministic mode) and name a call the same way in their
// errors. Internal to the backends: nothing outside parallel/comm/ includes it.
//
// Namespace mg::parallel::backend (not `detail`: inside mg::parallel that name would hide
// mg::detail, and with it detail::str_cat).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "multigrad/core/tensor.h"
#include "multigrad/kernels/kernels.h"
#include "multigrad/parallel/comm/communicator.h"

namespace mg::parallel::backend {

constexpr std::chrono::milliseconds kDefaultTimeout{300'000};  // docs/design.md: 300 s

// ---------------------------------------------------------------- argument checks (caller's thread)

// t is defined, on `device` (rank `rank`'s), contiguous, and Float32, Float64 or Int64. A backend
// that takes one kind of device only checks that first, for defined tensors.
void check_tensor(const char* op, const Tensor& t, int rank, const Device& device);
// r (a root, dst or src: `role`) is a rank of a group of `size`.
void check_rank(const char* op, const char* role, int r, int size);
// Avg only for floating dtypes.
void check_avg(const char* op, ReduceOp reduce, DType dtype);
// output (size * n, ...) for input (n, ...), same dtype; both already passed check_tensor.
void check_all_gather(const Tensor& output, const Tensor& input, int size);
// input (size * n, ...), output (n, ...), same dtype, Avg only for floating; both already passed
// check_tensor.
void check_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op, int size);
// set_timeout's argument, in milliseconds: positive.
int64_t checked_timeout_ms(std::chrono::milliseconds timeout);

// ---------------------------------------------------------------- reducing

// The elementwise op that folds one rank's contribution into another's (Avg sums, then divides).
kernels::BinaryOp combine_op(ReduceOp op);
// acc = combine(acc, incoming); Avg's division is done once at the end (finish_avg).
void fold(ReduceOp op, const Tensor& acc, const Tensor& incoming);
// out (m) = rows[0] op rows[1] op ... op rows[n-1], folded left to right: the order, and the
// kernels, of algorithms.h's rank_ordered_all_reduce and local.cpp's reduce_scatter, hence the same bits.
void fold_in_rank_order(const Tensor& rows, const Tensor& out, ReduceOp op);  // rows (n, m)
// t /= n for Avg; nothing for the other ops.
void finish_avg(ReduceOp op, const Tensor& t, int n);

// ---------------------------------------------------------------- naming and comparing calls

// Message: the mpi backend's header of a send (dtype and shape, checked by recv).
enum class OpCode : int64_t { AllReduce, Broadcast, AllGather, ReduceScatter, Barrier, Message };
const char* op_name(OpCode op);

// "all_reduce(sum, [4], Float32)", "broadcast(root 0, [4], Float32)", "barrier()": how a
// mismatch error names a call (with " #<sequence number>" after it). reduce: a ReduceOp, or -1;
// root: broadcast's, or -1; t: undefined for a barrier.
std::string call_str(OpCode code, const Tensor& t, int64_t reduce = -1, int64_t root = -1);

// "send_recv (send #3 to rank 1, recv #2 from rank 1)": how errors name a send_recv, by the numbers
// its halves have among this rank's messages to dst and from src (those of send and recv).
std::string send_recv_what(uint64_t sent, int dst, uint64_t received, int src);

// What the ranks must agree on before a collective (MG_DEBUG_COLL in mpi and nccl), or the mpi
// backend's message header. All int64 and fixed-size, so that MPI and NCCL move it as kWords
// Int64; a shape of more than kMaxDims dims is compared by its numel and first kMaxDims sizes.
// (local compares call_str, which holds the whole shape.)
struct Fingerprint {
  int64_t op = 0;       // OpCode
  int64_t reduce = -1;  // ReduceOp, or -1
  int64_t root = -1;    // broadcast's root, or -1
  int64_t dtype = -1;   // DType, or -1 for a barrier
  int64_t ndim = 0;
  int64_t numel = 0;
  int64_t seq = 0;
  int64_t dims[kMaxDims] = {};

  static constexpr int kWords = 7 + kMaxDims;

  Fingerprint() = default;
  Fingerprint(OpCode code, const Tensor& t);  // t undefined for a barrier
  bool operator==(const Fingerprint&) const = default;

  std::string shape_str() const;  // "[4]"; past kMaxDims dims, the first kMaxDims and ", ..."
  std::string type_str() const;   // "Float32"
  std::string str() const;        // "all_reduce(sum, [4], Float32) #2": call_str's wording
  std::string what() const;       // "all_reduce #2": how errors name the operation

  // As kWords Int64 on `device` (a CPU device), and back.
  Tensor to_tensor(const Device& device) const;
  static Fingerprint from(const int64_t* words);
};

// MG_DEBUG_COLL is set, and not "0".
bool debug_collectives();

// "all_reduce #3 on rank 0 does not match rank 1: rank 0 called <mine>, rank 1 called <theirs>".
std::string mismatch_message(const std::string& what, int rank, const std::string& mine, int other,
                             const std::string& theirs);
// Throws mismatch_message for the first row of `all` ((n, kWords) Int64 on the CPU: row k is rank
// k's fingerprint) that differs from mine.
void check_fingerprints(const Fingerprint& mine, const Tensor& all, int rank, const std::string& what);

// ---------------------------------------------------------------- waiting

// "all_reduce #3 on rank 1 timed out after 2000 ms (waiting for rank 0)"; no parenthesis when
// peer is -1 (not known).
std::string timeout_message(const std::string& what, int rank, std::chrono::milliseconds timeout, int peer);

// Between two polls of a wait: yields for the first kSpinPolls polls, then sleeps kPollSleep —
// about a millisecond of eager polling for small operations, then little CPU for long waits.
void back_off(int polls);

}  // namespace mg::parallel::backend

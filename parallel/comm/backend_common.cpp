// parallel/comm/backend_common.cpp — what the backends share (backend_common.h).
#include "multigrad/parallel/comm/backend_common.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <type_traits>

#include "multigrad/core/error.h"

namespace mg::parallel::backend {
namespace {

// A polled wait yields between its first kSpinPolls polls, then sleeps kPollSleep between polls.
constexpr int kSpinPolls = 1000;
constexpr std::chrono::microseconds kPollSleep{50};

// call_str's wording, from a shape and dtype already printed.
std::string format_call(OpCode code, int64_t reduce, int64_t root, const std::string& shape, const std::string& dtype) {
  std::string args;
  if (code == OpCode::AllReduce || code == OpCode::ReduceScatter) {
    args = detail::str_cat(reduce_op_name(ReduceOp(reduce)), ", ");
  } else if (code == OpCode::Broadcast) {
    args = detail::str_cat("root ", root, ", ");
  }
  if (code != OpCode::Barrier) args += detail::str_cat(shape, ", ", dtype);
  return detail::str_cat(op_name(code), "(", args, ")");
}

}  // namespace

// ---------------------------------------------------------------- argument checks

void check_tensor(const char* op, const Tensor& t, int rank, const Device& device) {
  MG_CHECK(t.defined(), op, ": tensor is undefined (rank ", rank, ")");
  MG_CHECK(t.device() == device, op, ": tensor is on ", t.device(), " but rank ", rank, " is on ", device);
  MG_CHECK(t.is_contiguous(), op, ": tensor ", t.shape(), " must be contiguous (rank ", rank, ")");
  const DType d = t.dtype();
  MG_CHECK(d == DType::Float32 || d == DType::Float64 || d == DType::Int64, op,
           ": dtype must be Float32, Float64 or Int64 (got ", d, ")");
}

void check_rank(const char* op, const char* role, int r, int size) {
  MG_CHECK(r >= 0 && r < size, op, ": ", role, " ", r, " is not a rank of this group of ", size);
}

void check_avg(const char* op, ReduceOp reduce, DType dtype) {
  MG_CHECK(reduce != ReduceOp::Avg || is_floating(dtype), op, ": avg needs a floating dtype (got ", dtype, ")");
}

void check_all_gather(const Tensor& output, const Tensor& input, int size) {
  MG_CHECK(input.dim() > 0, "all_gather: input must have at least one dimension (got a scalar)");
  Shape want = input.shape();
  want[0] = input.size(0) * size;
  MG_CHECK(output.shape() == want && output.dtype() == input.dtype(), "all_gather: output must be ", want, " ",
           input.dtype(), " for input ", input.shape(), " on ", size, " ranks (got ", output.shape(), " ",
           output.dtype(), ")");
}

void check_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op, int size) {
  check_avg("reduce_scatter", op, input.dtype());
  MG_CHECK(input.dim() > 0 && input.size(0) % size == 0, "reduce_scatter: input ", input.shape(),
           " must have a first dimension divisible by the ", size, " ranks");
  Shape want = input.shape();
  want[0] /= size;
  MG_CHECK(output.shape() == want && output.dtype() == input.dtype(), "reduce_scatter: output must be ", want, " ",
           input.dtype(), " for input ", input.shape(), " (got ", output.shape(), " ", output.dtype(), ")");
}

int64_t checked_timeout_ms(std::chrono::milliseconds timeout) {
  MG_CHECK(timeout.count() > 0, "set_timeout: timeout must be positive (got ", timeout.count(), " ms)");
  return timeout.count();
}

// ---------------------------------------------------------------- reducing

kernels::BinaryOp combine_op(ReduceOp op) {
  return op == ReduceOp::Max ? kernels::BinaryOp::Maximum : kernels::BinaryOp::Add;
}

void fold(ReduceOp op, const Tensor& acc, const Tensor& incoming) {
  if (acc.numel() > 0) kernels::binary(combine_op(op), acc, incoming, acc);
}

void fold_in_rank_order(const Tensor& rows, const Tensor& out, ReduceOp op) {
  const int64_t m = out.numel();
  if (m == 0) return;
  kernels::copy(rows.slice(0, 0, 1).view({m}), out);
  for (int64_t k = 1; k < rows.size(0); ++k) fold(op, out, rows.slice(0, k, k + 1).view({m}));
}

void finish_avg(ReduceOp op, const Tensor& t, int n) {
  if (op == ReduceOp::Avg && t.numel() > 0) {
    kernels::binary_scalar(kernels::BinaryOp::Div, t, double(n), false, t);
  }
}

// ---------------------------------------------------------------- naming and comparing calls

const char* op_name(OpCode op) {
  switch (op) {
    case OpCode::AllReduce: return "all_reduce";
    case OpCode::Broadcast: return "broadcast";
    case OpCode::AllGather: return "all_gather";
    case OpCode::ReduceScatter: return "reduce_scatter";
    case OpCode::Barrier: return "barrier";
    case OpCode::Message: return "message";
  }
  return "?";
}

std::string call_str(OpCode code, const Tensor& t, int64_t reduce, int64_t root) {
  if (!t.defined()) return format_call(code, reduce, root, "", "");
  return format_call(code, reduce, root, to_string(t.shape()), dtype_name(t.dtype()));
}

std::string send_recv_what(uint64_t sent, int dst, uint64_t received, int src) {
  return detail::str_cat("send_recv (send #", sent, " to rank ", dst, ", recv #", received, " from rank ", src, ")");
}

Fingerprint::Fingerprint(OpCode code, const Tensor& t) : op(int64_t(code)) {
  if (!t.defined()) return;
  dtype = int64_t(t.dtype());
  ndim = t.dim();
  numel = t.numel();
  for (int64_t d = 0; d < std::min<int64_t>(ndim, kMaxDims); ++d) dims[d] = t.size(d);
}

std::string Fingerprint::shape_str() const {
  std::string s = to_string(Shape(dims, dims + std::min<int64_t>(ndim, kMaxDims)));
  if (ndim > kMaxDims) s.insert(s.size() - 1, ", ...");
  return s;
}

std::string Fingerprint::type_str() const { return dtype_name(DType(dtype)); }

std::string Fingerprint::str() const {
  const auto code = OpCode(op);
  const bool has_tensor = code != OpCode::Barrier;
  return detail::str_cat(format_call(code, reduce, root, has_tensor ? shape_str() : "", has_tensor ? type_str() : ""),
                         " #", seq);
}

std::string Fingerprint::what() const { return detail::str_cat(op_name(OpCode(op)), " #", seq); }

Tensor Fingerprint::to_tensor(const Device& device) const {
  Tensor t = Tensor::empty({kWords}, {DType::Int64, device});
  std::memcpy(t.data_ptr(), this, sizeof(*this));
  return t;
}

Fingerprint Fingerprint::from(const int64_t* words) {
  Fingerprint f;
  std::memcpy(static_cast<void*>(&f), words, sizeof(f));  // trivially copyable: all int64
  return f;
}

static_assert(sizeof(Fingerprint) == Fingerprint::kWords * sizeof(int64_t) &&
              std::is_trivially_copyable_v<Fingerprint>);

bool debug_collectives() {
  const char* value = std::getenv("MG_DEBUG_COLL");
  return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
}

std::string mismatch_message(const std::string& what, int rank, const std::string& mine, int other,
                             const std::string& theirs) {
  return detail::str_cat(what, " on rank ", rank, " does not match rank ", other, ": rank ", rank, " called ", mine,
                         ", rank ", other, " called ", theirs);
}

void check_fingerprints(const Fingerprint& mine, const Tensor& all, int rank, const std::string& what) {
  for (int k = 0; k < int(all.size(0)); ++k) {
    const Fingerprint theirs = Fingerprint::from(all.data<int64_t>() + k * Fingerprint::kWords);
    if (!(theirs == mine)) MG_ERROR(mismatch_message(what, rank, mine.str(), k, theirs.str()));
  }
}

// ---------------------------------------------------------------- waiting

std::string timeout_message(const std::string& what, int rank, std::chrono::milliseconds timeout, int peer) {
  return detail::str_cat(what, " on rank ", rank, " timed out after ", timeout.count(), " ms",
                         peer >= 0 ? detail::str_cat(" (waiting for rank ", peer, ")") : "");
}

void back_off(int polls) {
  if (polls < kSpinPolls) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(kPollSleep);
  }
}

}  // namespace mg::parallel::backend

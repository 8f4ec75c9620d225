// kernels/kernels.h — raw compute on tensors, no autograd: the seam between the functional API
// (autograd/ops.cpp) and the per-device implementations (kernels/cpu, kernels/cuda).
//
// Contract for every function here:
//   - The caller (the functional API) has checked shapes, dtypes and devices and allocated the
//     outputs; these functions check only the preconditions they rely on and say so.
//   - Every tensor argument is on one device; the function dispatches on it: CPU runs on the
//     calling thread, parallel inside the op within the device's thread budget; CUDA enqueues
//     on the device's current stream and returns.
//   - Outputs may be strided views (copy into a slice, cat) unless a function says
//     "contiguous"; an output never overlaps an input unless it is the same tensor.
#pragma once

#include <cstdint>

#include "multigrad/core/random.h"
#include "multigrad/core/tensor.h"

namespace mg::kernels {

// RoundBFloat16 and RoundFloat16 round Float32 to the nearest bfloat16 / IEEE binary16 value and
// keep it in Float32 (autograd/autocast.h's emulated lower precision); Float32 only.
enum class UnaryOp : uint8_t {
  Neg, Exp, Log, Sqrt, Abs, Relu, Gelu, Sigmoid, Tanh, Sin, Cos, Erf, Expm1, Log1p, RoundBFloat16, RoundFloat16
};
// Comparisons (Eq ... Ge) write a Bool output; the rest write the inputs' dtype.
// ReluBackward(g, y) = y > 0 ? g : 0: relu's gradient from its output y in one pass (PyTorch's
// threshold_backward at 0), not a comparison, a Bool mask and a select. GeluBackward(g, x) =
// g gelu'(x), the tanh form's gradient in one pass (PyTorch's gelu_backward), floating only.
enum class BinaryOp : uint8_t {
  Add, Sub, Mul, Div, Pow, Maximum, Minimum, ReluBackward, GeluBackward, Eq, Ne, Lt, Le, Gt, Ge
};
enum class ReduceOp : uint8_t { Sum, Mean, Max, Min };

const char* op_name(UnaryOp op);   // "exp"
const char* op_name(BinaryOp op);  // "add"
const char* op_name(ReduceOp op);  // "sum"
inline bool is_comparison(BinaryOp op) { return op >= BinaryOp::Eq; }

// out = op(in). in and out have one shape and one arithmetic dtype.
void unary(UnaryOp op, const Tensor& in, const Tensor& out);
// out = op(a, b). a and b have out's shape (broadcast inputs arrive expanded, stride 0) and one
// arithmetic dtype; out has that dtype, or Bool for comparisons.
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
// out = op(a, s), or op(s, a) when scalar_first. s is converted to a's dtype.
void binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first, const Tensor& out);
// out = min(max(in, lo), hi); NaN stays NaN.
void clamp(const Tensor& in, double lo, double hi, const Tensor& out);
// out = cond ? a : b. cond is Bool; a, b, out share a dtype (any); all have out's shape.
void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);

// dst = src, element by element, converting dtype. Same shape, same device; any strides.
void copy(const Tensor& src, const Tensor& dst);
// dst = src where the two are on different devices (cpu:i <-> cpu:j, host <-> cuda, cuda <->
// cuda). Both contiguous, same shape and dtype. Ordered on the current stream of the CUDA side.
// When it returns, the source has been read and may be freed or reused (PyTorch's
// non_blocking=False), except for a host -> cuda copy from pinned memory with `non_blocking`:
// that one is asynchronous, and the caller keeps the source alive and unchanged until the
// stream has passed the copy (the data loader does, with an event).
void copy_across_devices(const Tensor& src, const Tensor& dst, bool non_blocking = false);
void fill(const Tensor& out, double value);
// out[i] = start + i * step; out contiguous 1-d.
void arange(const Tensor& out, double start, double step);
// Philox draws (core/random.h); out contiguous Float32 or Float64; `state` from philox_reserve
// with random_blocks(n, dtype) blocks for a draw of n elements, of which out's element i is
// element window(i) (the default: out is the whole draw).
void uniform(const Tensor& out, PhiloxState state, double low, double high, DrawWindow window = {});
void normal(const Tensor& out, PhiloxState state, double mean, double std, DrawWindow window = {});
uint64_t random_blocks(int64_t numel, DType dtype, bool normal);

// Row reductions: in is contiguous (rows, cols), out contiguous with `rows` elements.
// Sum and Mean of an empty row give 0 and NaN; Max/Min of an empty row is an error upstream.
// Float32 sums accumulate in float64 on the CPU and in float32 tree order on CUDA.
void reduce_rows(ReduceOp op, const Tensor& in, const Tensor& out);
// out[r] = index of the first maximum of row r (NaN counts as the maximum); out Int64.
void argmax_rows(const Tensor& in, const Tensor& out);
// Softmax (or log-softmax) of each row; in, out contiguous (rows, cols), floating.
void softmax_rows(const Tensor& in, const Tensor& out, bool log);

// Batched matrix product out[b] = a[b] @ b_[b]: a (B, M, K), b_ (B, K, N), out (B, M, N).
// a and b_ may have any batch stride (0 when broadcast). A matrix that is row-major (inner
// stride 1) or transposed (row stride 1) goes to BLAS without a copy; any other layout is
// copied first. K == 0 gives zeros. out contiguous. Float32 and Float64 through BLAS / cuBLAS;
// Int64 by a plain loop (CPU only). On CUDA, MG_GEMM=native selects the handwritten tiled
// SGEMM for Float32.
// GemmInputs::BFloat16 says the Float32 operands hold bfloat16 values (autocast's rounded ones):
// they are then multiplied in bf16 with float32 accumulation where the device can (the CPU with
// AVX-512 BF16: cpu/matmul_bf16.h, oneDNN; CUDA: cuBLAS's bf16 GEMM), else in float32 as usual,
// which gives the same products. GemmInputs::Float16 likewise for IEEE binary16 values: cuBLAS's
// fp16 GEMM on CUDA, float32 on the CPU (no fp16 GEMM there; the products of two binary16 values
// are exact in float32 too).
enum class GemmInputs : uint8_t { Float32, BFloat16, Float16 };
void batched_matmul(const Tensor& a, const Tensor& b_, const Tensor& out, GemmInputs inputs = GemmInputs::Float32);

}  // namespace mg::kernels

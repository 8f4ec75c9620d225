// kernels/dispatch.cpp — kernels/kernels.h: each op checks that its tensors share one device
// and forwards to that device's implementation: kernels/cpu on a CPU device (synchronous), and
// kernels/cuda on a CUDA device (enqueued on the calling thread's current stream of it).
// A build without CUDA has no CUDA devices, so the CUDA branch only throws there.
#include <cstring>

#include "multigrad/kernels/cpu/cpu_kernels.h"
#include "multigrad/kernels/device_dispatch.h"
#include "multigrad/kernels/kernels.h"

#if MG_WITH_CUDA
#include "multigrad/kernels/cuda/cuda_kernels.h"
#endif

namespace mg::kernels {

const char* op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return "neg";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Log: return "log";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Abs: return "abs";
    case UnaryOp::Relu: return "relu";
    case UnaryOp::Gelu: return "gelu";
    case UnaryOp::Sigmoid: return "sigmoid";
    case UnaryOp::Tanh: return "tanh";
    case UnaryOp::Sin: return "sin";
    case UnaryOp::Cos: return "cos";
    case UnaryOp::Erf: return "erf";
    case UnaryOp::Expm1: return "expm1";
    case UnaryOp::Log1p: return "log1p";
    case UnaryOp::RoundBFloat16: return "round_to_bfloat16";
    case UnaryOp::RoundFloat16: return "round_to_float16";
  }
  return "unary";
}

const char* op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
    case BinaryOp::Pow: return "pow";
    case BinaryOp::Maximum: return "maximum";
    case BinaryOp::Minimum: return "minimum";
    case BinaryOp::ReluBackward: return "relu_backward";
    case BinaryOp::GeluBackward: return "gelu_backward";
    case BinaryOp::Eq: return "eq";
    case BinaryOp::Ne: return "ne";
    case BinaryOp::Lt: return "lt";
    case BinaryOp::Le: return "le";
    case BinaryOp::Gt: return "gt";
    case BinaryOp::Ge: return "ge";
  }
  return "binary";
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "reduce";
}

void unary(UnaryOp op, const Tensor& in, const Tensor& out) {
  const Device device = one_device(op_name(op), {&in, &out});
  MG_RUN_ON_DEVICE(device, op_name(op), unary, op, in, out);
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const Device device = one_device(op_name(op), {&a, &b, &out});
  MG_CHECK(op != BinaryOp::GeluBackward || is_floating(a.dtype()), "gelu_backward: expected Float32 or Float64, got ",
           a.dtype());
  MG_RUN_ON_DEVICE(device, op_name(op), binary, op, a, b, out);
}

void binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first, const Tensor& out) {
  const Device device = one_device(op_name(op), {&a, &out});
  MG_RUN_ON_DEVICE(device, op_name(op), binary_scalar, op, a, s, scalar_first, out);
}

void clamp(const Tensor& in, double lo, double hi, const Tensor& out) {
  const Device device = one_device("clamp", {&in, &out});
  MG_RUN_ON_DEVICE(device, "clamp", clamp, in, lo, hi, out);
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  const Device device = one_device("where", {&cond, &a, &b, &out});
  MG_RUN_ON_DEVICE(device, "where", where, cond, a, b, out);
}

void copy(const Tensor& src, const Tensor& dst) {
  const Device device = one_device("copy", {&src, &dst});
  MG_RUN_ON_DEVICE(device, "copy", copy, src, dst);
}

void copy_across_devices(const Tensor& src, const Tensor& dst, bool non_blocking) {
  MG_CHECK(src.shape() == dst.shape() && src.dtype() == dst.dtype(),
           "copy_across_devices: source ", src.shape(), " ", src.dtype(), " differs from destination ",
           dst.shape(), " ", dst.dtype());
  MG_CHECK(src.is_contiguous() && dst.is_contiguous(),
           "copy_across_devices: both tensors must be contiguous, got strides ", src.strides(), " and ",
           dst.strides());
  if (src.device().is_cpu() && dst.device().is_cpu()) {
    // Virtual CPU devices share one address space: a plain copy of the bytes.
    if (src.numel() > 0) std::memcpy(dst.data_ptr(), src.data_ptr(), size_t(src.numel()) * src.element_size());
    return;
  }
#if MG_WITH_CUDA
  // Ordered on the current stream of the destination when it is a GPU, else of the source.
  const Device& gpu = dst.device().is_cuda() ? dst.device() : src.device();
  cuda::copy_across_devices(src, dst, non_blocking, stream_for(gpu));
#else
  MG_ERROR("copy_across_devices: multigrad was built without CUDA (", src.device(), " -> ", dst.device(),
           ")");
#endif
}

void fill(const Tensor& out, double value) {
  const Device device = out.device();
  MG_RUN_ON_DEVICE(device, "fill", fill, out, value);
}

void arange(const Tensor& out, double start, double step) {
  const Device device = out.device();
  MG_RUN_ON_DEVICE(device, "arange", arange, out, start, step);
}

void uniform(const Tensor& out, PhiloxState state, double low, double high, DrawWindow window) {
  const Device device = out.device();
  MG_RUN_ON_DEVICE(device, "uniform", uniform, out, state, low, high, window);
}

void normal(const Tensor& out, PhiloxState state, double mean, double std, DrawWindow window) {
  const Device device = out.device();
  MG_RUN_ON_DEVICE(device, "normal", normal, out, state, mean, std, window);
}

// Blocks per draw, from the element -> block mapping of philox_uniform / philox_normal
// (kernels/functors.h): 4 Float32 or 2 Float64 elements per block, for both distributions.
uint64_t random_blocks(int64_t numel, DType dtype, bool normal) {
  MG_CHECK(numel >= 0, "random_blocks: negative element count ", numel);
  const char* name = normal ? "normal" : "uniform";
  switch (dtype) {
    case DType::Float32: return uint64_t(numel + 3) / 4;
    case DType::Float64: return uint64_t(numel + 1) / 2;
    default: break;
  }
  MG_ERROR(name, ": expected a Float32 or Float64 tensor, got ", dtype);
}

void reduce_rows(ReduceOp op, const Tensor& in, const Tensor& out) {
  const Device device = one_device(op_name(op), {&in, &out});
  MG_RUN_ON_DEVICE(device, op_name(op), reduce_rows, op, in, out);
}

void argmax_rows(const Tensor& in, const Tensor& out) {
  const Device device = one_device("argmax", {&in, &out});
  MG_RUN_ON_DEVICE(device, "argmax", argmax_rows, in, out);
}

void softmax_rows(const Tensor& in, const Tensor& out, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  const Device device = one_device(name, {&in, &out});
  MG_RUN_ON_DEVICE(device, name, softmax_rows, in, out, log);
}

void batched_matmul(const Tensor& a, const Tensor& b_, const Tensor& out, GemmInputs inputs) {
  const Device device = one_device("matmul", {&a, &b_, &out});
  MG_RUN_ON_DEVICE(device, "matmul", batched_matmul, a, b_, out, inputs);
}

}  // namespace mg::kernels

// kernels/cpu/cpu_kernels.h — the CPU implementations behind kernels/kernels.h.
// Same contracts as there; each runs on the calling thread with OpenMP inside the op, using at
// most cpu_thread_budget(device) threads.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "multigrad/kernels/kernels.h"

namespace mg::kernels::cpu {

void unary(UnaryOp op, const Tensor& in, const Tensor& out);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first, const Tensor& out);
void clamp(const Tensor& in, double lo, double hi, const Tensor& out);
void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);
void copy(const Tensor& src, const Tensor& dst);
void fill(const Tensor& out, double value);
void arange(const Tensor& out, double start, double step);
void uniform(const Tensor& out, PhiloxState state, double low, double high, DrawWindow window);
void normal(const Tensor& out, PhiloxState state, double mean, double std, DrawWindow window);
void reduce_rows(ReduceOp op, const Tensor& in, const Tensor& out);
void argmax_rows(const Tensor& in, const Tensor& out);
void softmax_rows(const Tensor& in, const Tensor& out, bool log);
void batched_matmul(const Tensor& a, const Tensor& b, const Tensor& out, GemmInputs inputs);

// The ways this CPU converts contiguous Float32 to Float16 (dst[j] = Float16(src[j]), j < n), the
// one copy() uses first: "f16c" (x86's VCVTPS2PH, 8 values at a time) where the CPU has it, and
// "loop" (Float16's own conversion). Both give Float16's bits; the list is for the test of that.
using ToFloat16 = void (*)(const float* src, Float16* dst, int64_t n);
const std::vector<std::pair<const char*, ToFloat16>>& to_float16_variants();

}  // namespace mg::kernels::cpu

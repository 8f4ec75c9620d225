// kernels/cuda/cuda_kernels.h — the CUDA launchers behind kernels/kernels.h.
// Same contracts as there; each enqueues on `stream` and checks the launch (MG_CUDA_CHECK on
// cudaGetLastError; with MG_CUDA_SYNC=1 it also synchronises, to localise faults).
// Included only by builds with CUDA.
#pragma once

#include <cuda_runtime.h>

#include "multigrad/kernels/kernels.h"

namespace mg::kernels::cuda {

void unary(UnaryOp op, const Tensor& in, const Tensor& out, cudaStream_t stream);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, cudaStream_t stream);
void binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first, const Tensor& out,
                   cudaStream_t stream);
void clamp(const Tensor& in, double lo, double hi, const Tensor& out, cudaStream_t stream);
void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out, cudaStream_t stream);
void copy(const Tensor& src, const Tensor& dst, cudaStream_t stream);
// Both contiguous, same shape and dtype, at least one on a CUDA device; `non_blocking` as in
// kernels/kernels.h.
void copy_across_devices(const Tensor& src, const Tensor& dst, bool non_blocking, cudaStream_t stream);
void fill(const Tensor& out, double value, cudaStream_t stream);
void arange(const Tensor& out, double start, double step, cudaStream_t stream);
void uniform(const Tensor& out, PhiloxState state, double low, double high, DrawWindow window, cudaStream_t stream);
void normal(const Tensor& out, PhiloxState state, double mean, double std, DrawWindow window, cudaStream_t stream);
void reduce_rows(ReduceOp op, const Tensor& in, const Tensor& out, cudaStream_t stream);
void argmax_rows(const Tensor& in, const Tensor& out, cudaStream_t stream);
void softmax_rows(const Tensor& in, const Tensor& out, bool log, cudaStream_t stream);
void batched_matmul(const Tensor& a, const Tensor& b, const Tensor& out, GemmInputs inputs, cudaStream_t stream);

}  // namespace mg::kernels::cuda

// core/cuda_check.h — error checks for CUDA runtime, cuBLAS, cuDNN and NCCL calls.
// Each throws mg::Error naming the call, the library's error string and the source line.
// Include only from sources compiled with CUDA (MG_WITH_CUDA).
#pragma once

#include <cuda_runtime.h>

#include "multigrad/core/error.h"

// A failed call also left its error for cudaGetLastError; it is taken here (a sticky error
// stays), so that the next MG_CUDA_CHECK_LAUNCH does not report it as its own.
#define MG_CUDA_CHECK(expr)                                                              \
  do {                                                                                   \
    cudaError_t mg_err_ = (expr);                                                        \
    if (mg_err_ != cudaSuccess) {                                                        \
      (void)cudaGetLastError();                                                          \
      MG_ERROR("CUDA error in ", #expr, ": ", cudaGetErrorString(mg_err_), " (",        \
               cudaGetErrorName(mg_err_), ")");                                          \
    }                                                                                    \
  } while (0)

// After a kernel launch: the launch error, and with MG_CUDA_SYNC=1 the kernel's own error.
namespace mg::detail {
bool cuda_sync_launches();  // reads MG_CUDA_SYNC once
}
#define MG_CUDA_CHECK_LAUNCH(stream)                                         \
  do {                                                                       \
    MG_CUDA_CHECK(cudaGetLastError());                                       \
    if (::mg::detail::cuda_sync_launches()) MG_CUDA_CHECK(cudaStreamSynchronize(stream)); \
  } while (0)

#if __has_include(<cublas_v2.h>)
#include <cublas_v2.h>
#define MG_CUBLAS_CHECK(expr)                                                            \
  do {                                                                                   \
    cublasStatus_t mg_st_ = (expr);                                                      \
    if (mg_st_ != CUBLAS_STATUS_SUCCESS)                                                 \
      MG_ERROR("cuBLAS error in ", #expr, ": ", cublasGetStatusString(mg_st_));         \
  } while (0)
#endif

#if __has_include(<cudnn.h>)
#include <cudnn.h>
#define MG_CUDNN_CHECK(expr)                                                             \
  do {                                                                                   \
    cudnnStatus_t mg_st_ = (expr);                                                       \
    if (mg_st_ != CUDNN_STATUS_SUCCESS)                                                  \
      MG_ERROR("cuDNN error in ", #expr, ": ", cudnnGetErrorString(mg_st_));            \
  } while (0)
#endif

#if __has_include(<nccl.h>)
#include <nccl.h>
#define MG_NCCL_CHECK(expr)                                                              \
  do {                                                                                   \
    ncclResult_t mg_st_ = (expr);                                                        \
    if (mg_st_ != ncclSuccess) MG_ERROR("NCCL error in ", #expr, ": ", ncclGetErrorString(mg_st_)); \
  } while (0)
#endif

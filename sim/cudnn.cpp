// sim/cudnn.cpp — the cuDNN functions multigrad calls, with cuDNN's documented semantics.
//
// Descriptors hold what was set; the calls check it as cuDNN does (CUDNN_STATUS_BAD_PARAM): NCHW
// float or double tensors, a filter whose input channels times the group count are the input's,
// an output whose sizes are the convolution's
//   oH = (H + 2 pad_h - dil_h (kH - 1) - 1) / stride_h + 1   (likewise oW),
// one data type throughout, a workspace at least as large as the algorithm asked for. The
// algorithm queries rank a non-deterministic candidate first (as cuDNN's heuristics may), so a
// caller that ignores `determinism` shows it; every algorithm computes the same sums here:
//   forward          y = alpha sum_{c in k's group, r, s} x[n, c, p u - pad_h + r dil_h, ...] w[k, c, r, s] + beta y
//   backward data    dx = alpha (the transposed sum of dy and w) + beta dx
//   backward filter  dw = alpha sum_{n, p, q} dy[n, k, p, q] x[n, c, ...] + beta dw
// (CUDNN_CONVOLUTION flips r and s; beta == 0 does not read the output), and cudnnAddTensor
// C = alpha A + beta C with A broadcast over the dims where it has size 1. Everything runs on the
// handle's stream in the data type.
#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include <string>

#include "multigrad/sim/ledger.h"
#include "multigrad/sim/state.h"

struct cudnnContext {
  cudaStream_t stream = nullptr;
};
struct cudnnTensorStruct {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int n = 0, c = 0, h = 0, w = 0;
  bool set = false;
};
struct cudnnFilterStruct {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int k = 0, c = 0, h = 0, w = 0;
  bool set = false;
};
struct cudnnConvolutionStruct {
  int pad_h = 0, pad_w = 0, u = 1, v = 1, dil_h = 1, dil_w = 1, groups = 1;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  bool set = false;
};

namespace {

constexpr size_t kWorkspaceBytes = 256;  // what every algorithm asks for: a caller must pass it

// The shapes of one convolution, checked against each other.
struct Conv {
  cudnnDataType_t type;
  int N, C, H, W, K, Cg, R, S, P, Q;
  cudnnConvolutionStruct p;
};

bool make_conv(const cudnnTensorStruct* x, const cudnnFilterStruct* w, const cudnnConvolutionStruct* conv,
               const cudnnTensorStruct* y, Conv& out) {
  if (x == nullptr || w == nullptr || conv == nullptr || y == nullptr) return false;
  if (!x->set || !w->set || !conv->set || !y->set) return false;
  if (x->type != w->type || x->type != y->type || x->type != conv->compute) return false;
  if (x->type != CUDNN_DATA_FLOAT && x->type != CUDNN_DATA_DOUBLE) return false;
  const cudnnConvolutionStruct& p = *conv;
  if (p.groups < 1 || w->c * p.groups != x->c || w->k % p.groups != 0 || y->c != w->k || y->n != x->n) return false;
  const int P = (x->h + 2 * p.pad_h - p.dil_h * (w->h - 1) - 1) / p.u + 1;
  const int Q = (x->w + 2 * p.pad_w - p.dil_w * (w->w - 1) - 1) / p.v + 1;
  if (P <= 0 || Q <= 0 || y->h != P || y->w != Q) return false;
  out = {x->type, x->n, x->c, x->h, x->w, w->k, w->c, w->h, w->w, P, Q, p};
  return true;
}

// Calls f(x index, w index, y index) for every product of the convolution.
template <class F>
void for_each_term(const Conv& g, const F& f) {
  const int Kg = g.K / g.p.groups;
  for (int n = 0; n < g.N; ++n)
    for (int k = 0; k < g.K; ++k)
      for (int pi = 0; pi < g.P; ++pi)
        for (int qi = 0; qi < g.Q; ++qi)
          for (int ci = 0; ci < g.Cg; ++ci)
            for (int r = 0; r < g.R; ++r)
              for (int s = 0; s < g.S; ++s) {
                const int h = pi * g.p.u - g.p.pad_h + r * g.p.dil_h, w = qi * g.p.v - g.p.pad_w + s * g.p.dil_w;
                if (h < 0 || h >= g.H || w < 0 || w >= g.W) continue;
                const int c = (k / Kg) * g.Cg + ci;
                const bool flip = g.p.mode == CUDNN_CONVOLUTION;
                const int fr = flip ? g.R - 1 - r : r, fs = flip ? g.S - 1 - s : s;
                f(((int64_t(n) * g.C + c) * g.H + h) * g.W + w, ((int64_t(k) * g.Cg + ci) * g.R + fr) * g.S + fs,
                  ((int64_t(n) * g.K + k) * g.P + pi) * g.Q + qi);
              }
}

// out = alpha * sum + beta * out over `count` elements, beta 0 not reading out.
template <class T>
void scale_into(T* out, const std::vector<T>& sum, T alpha, T beta) {
  for (size_t i = 0; i < sum.size(); ++i) out[i] = beta == T(0) ? alpha * sum[i] : alpha * sum[i] + beta * out[i];
}

// Enqueues the pass on the handle's stream in the data type of `g`. which: 0 forward (a = x,
// b = w, into y), 1 backward data (a = dy, b = w, into dx), 2 backward filter (a = x, b = dy, into dw).
template <class T>
cudnnStatus_t run(cudnnHandle_t h, int which, const Conv& g, const void* alpha, const void* a, const void* b,
                  const void* beta, void* out) {
  const T al = *static_cast<const T*>(alpha), be = *static_cast<const T*>(beta);
  const T* A = static_cast<const T*>(a);
  const T* B = static_cast<const T*>(b);
  T* O = static_cast<T*>(out);
  const size_t count = which == 0   ? size_t(g.N) * g.K * g.P * g.Q
                       : which == 1 ? size_t(g.N) * g.C * g.H * g.W
                                    : size_t(g.K) * g.Cg * g.R * g.S;
  const cudaError_t err = mg::sim::enqueue(h->stream, [=] {
    std::vector<T> sum(count, T(0));
    for_each_term(g, [&](int64_t xi, int64_t wi, int64_t yi) {
      if (which == 0) sum[size_t(yi)] += A[xi] * B[wi];
      if (which == 1) sum[size_t(xi)] += A[yi] * B[wi];
      if (which == 2) sum[size_t(wi)] += B[yi] * A[xi];
    });
    scale_into(O, sum, al, be);
  });
  return err == cudaSuccess ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
}

cudnnStatus_t convolve(cudnnHandle_t h, int which, const Conv& g, const void* alpha, const void* a, const void* b,
                       const void* beta, void* out, const void* workspace, size_t workspace_bytes) {
  if (h == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;
  if (workspace_bytes < kWorkspaceBytes || workspace == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (alpha == nullptr || beta == nullptr || a == nullptr || b == nullptr || out == nullptr)
    return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (mg::sim::ledger::on()) {
    const char* pass = which == 0 ? "forward" : which == 1 ? "backward_data" : "backward_filter";
    auto field = [](const char* name, int v) { return ", \"" + std::string(name) + "\": " + std::to_string(v); };
    mg::sim::ledger::record("conv",
                            "\"pass\": \"" + std::string(pass) + "\"" + field("N", g.N) + field("C", g.C) +
                                field("H", g.H) + field("W", g.W) + field("K", g.K) + field("C_per_group", g.Cg) +
                                field("R", g.R) + field("S", g.S) + field("P", g.P) + field("Q", g.Q) +
                                ", \"type\": \"" + (g.type == CUDNN_DATA_FLOAT ? "f32" : "f64") + "\"" +
                                field("stream", mg::sim::ledger::stream_number(h->stream)),
                            true);
  }
  if (mg::sim::ledger::record_only()) return CUDNN_STATUS_SUCCESS;
  return g.type == CUDNN_DATA_FLOAT ? run<float>(h, which, g, alpha, a, b, beta, out)
                                    : run<double>(h, which, g, alpha, a, b, beta, out);
}

// The ranked candidates of a query: a non-deterministic algorithm first, then a deterministic one.
template <class Perf, class Algo>
cudnnStatus_t rank(const cudnnConvolutionStruct* conv, Algo nondeterministic, Algo deterministic, int requested,
                   int* returned, Perf* perfs) {
  if (requested < 1) return CUDNN_STATUS_BAD_PARAM;
  const Perf candidates[] = {
      {nondeterministic, CUDNN_STATUS_SUCCESS, 0.5f, kWorkspaceBytes, CUDNN_NON_DETERMINISTIC, conv->math, {}},
      {deterministic, CUDNN_STATUS_SUCCESS, 1.0f, kWorkspaceBytes, CUDNN_DETERMINISTIC, conv->math, {}},
  };
  *returned = std::min(requested, 2);
  std::copy(candidates, candidates + *returned, perfs);
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  *handle = new cudnnContext;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS:
      return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED:
      return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM:
      return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_BAD_PARAM_NULL_POINTER:
      return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case CUDNN_STATUS_NOT_SUPPORTED:
      return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_EXECUTION_FAILED:
      return "CUDNN_STATUS_EXECUTION_FAILED";
    default:
      return "CUDNN_UNKNOWN_STATUS_FOUND";
  }
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* desc) {
  *desc = new cudnnTensorStruct;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t desc, cudnnTensorFormat_t format, cudnnDataType_t type,
                                         int n, int c, int h, int w) {
  if (format != CUDNN_TENSOR_NCHW) return CUDNN_STATUS_NOT_SUPPORTED;
  if (n <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
  *desc = {type, n, c, h, w, true};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* desc) {
  *desc = new cudnnFilterStruct;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t desc, cudnnDataType_t type, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w) {
  if (format != CUDNN_TENSOR_NCHW) return CUDNN_STATUS_NOT_SUPPORTED;
  if (k <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
  *desc = {type, k, c, h, w, true};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* desc) {
  *desc = new cudnnConvolutionStruct;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t desc, int pad_h, int pad_w, int u, int v,
                                              int dil_h, int dil_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
  if (pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dil_h <= 0 || dil_w <= 0) return CUDNN_STATUS_BAD_PARAM;
  if (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION) return CUDNN_STATUS_BAD_PARAM;
  desc->pad_h = pad_h, desc->pad_w = pad_w, desc->u = u, desc->v = v, desc->dil_h = dil_h, desc->dil_w = dil_w;
  desc->mode = mode;
  desc->compute = compute;
  desc->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t desc, int groups) {
  if (groups < 1) return CUDNN_STATUS_BAD_PARAM;
  desc->groups = groups;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t desc, cudnnMathType_t math) {
  desc->math = math;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t, const cudnnTensorDescriptor_t x,
                                                     const cudnnFilterDescriptor_t w,
                                                     const cudnnConvolutionDescriptor_t conv,
                                                     const cudnnTensorDescriptor_t y, const int requested,
                                                     int* returned, cudnnConvolutionFwdAlgoPerf_t* perfs) {
  Conv g;
  if (!make_conv(x, w, conv, y, g)) return CUDNN_STATUS_BAD_PARAM;
  return rank(conv, CUDNN_CONVOLUTION_FWD_ALGO_FFT, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, requested, returned,
              perfs);
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t x,
                                                      const cudnnFilterDescriptor_t w,
                                                      const cudnnConvolutionDescriptor_t conv,
                                                      const cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t,
                                                      size_t* bytes) {
  Conv g;
  if (!make_conv(x, w, conv, y, g)) return CUDNN_STATUS_BAD_PARAM;
  *bytes = kWorkspaceBytes;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t x_desc,
                                      const void* x, const cudnnFilterDescriptor_t w_desc, const void* w,
                                      const cudnnConvolutionDescriptor_t conv, cudnnConvolutionFwdAlgo_t,
                                      void* workspace, size_t workspace_bytes, const void* beta,
                                      const cudnnTensorDescriptor_t y_desc, void* y) {
  Conv g;
  if (!make_conv(x_desc, w_desc, conv, y_desc, g)) return CUDNN_STATUS_BAD_PARAM;
  return convolve(handle, 0, g, alpha, x, w, beta, y, workspace, workspace_bytes);
}

cudnnStatus_t cudnnAddTensor(cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t a_desc,
                             const void* a, const void* beta, const cudnnTensorDescriptor_t c_desc, void* c) {
  if (handle == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;
  if (a_desc == nullptr || c_desc == nullptr || !a_desc->set || !c_desc->set || a_desc->type != c_desc->type)
    return CUDNN_STATUS_BAD_PARAM;
  const cudnnTensorStruct A = *a_desc, C = *c_desc;
  for (auto [da, dc] : {std::pair{A.n, C.n}, {A.c, C.c}, {A.h, C.h}, {A.w, C.w}})
    if (da != 1 && da != dc) return CUDNN_STATUS_BAD_PARAM;
  if (mg::sim::ledger::record_only()) return CUDNN_STATUS_SUCCESS;
  auto add = [&](auto zero) -> cudnnStatus_t {
    using T = decltype(zero);
    const T al = *static_cast<const T*>(alpha), be = *static_cast<const T*>(beta);
    const T* src = static_cast<const T*>(a);
    T* dst = static_cast<T*>(c);
    const cudaError_t err = mg::sim::enqueue(handle->stream, [=] {
      for (int n = 0; n < C.n; ++n)
        for (int ch = 0; ch < C.c; ++ch)
          for (int h = 0; h < C.h; ++h)
            for (int w = 0; w < C.w; ++w) {
              const int64_t ai =
                  ((int64_t(A.n == 1 ? 0 : n) * A.c + (A.c == 1 ? 0 : ch)) * A.h + (A.h == 1 ? 0 : h)) * A.w +
                  (A.w == 1 ? 0 : w);
              T& out = dst[((int64_t(n) * C.c + ch) * C.h + h) * C.w + w];
              out = be == T(0) ? al * src[ai] : al * src[ai] + be * out;
            }
    });
    return err == cudaSuccess ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
  };
  return C.type == CUDNN_DATA_FLOAT ? add(0.f) : add(0.0);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t, const cudnnFilterDescriptor_t w,
                                                          const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t conv,
                                                          const cudnnTensorDescriptor_t dx, const int requested,
                                                          int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perfs) {
  Conv g;
  if (!make_conv(dx, w, conv, dy, g)) return CUDNN_STATUS_BAD_PARAM;
  return rank(conv, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, requested, returned, perfs);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t, const cudnnFilterDescriptor_t w,
                                                           const cudnnTensorDescriptor_t dy,
                                                           const cudnnConvolutionDescriptor_t conv,
                                                           const cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t, size_t* bytes) {
  Conv g;
  if (!make_conv(dx, w, conv, dy, g)) return CUDNN_STATUS_BAD_PARAM;
  *bytes = kWorkspaceBytes;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha,
                                           const cudnnFilterDescriptor_t w_desc, const void* w,
                                           const cudnnTensorDescriptor_t dy_desc, const void* dy,
                                           const cudnnConvolutionDescriptor_t conv, cudnnConvolutionBwdDataAlgo_t,
                                           void* workspace, size_t workspace_bytes, const void* beta,
                                           const cudnnTensorDescriptor_t dx_desc, void* dx) {
  Conv g;
  if (!make_conv(dx_desc, w_desc, conv, dy_desc, g)) return CUDNN_STATUS_BAD_PARAM;
  return convolve(handle, 1, g, alpha, dy, w, beta, dx, workspace, workspace_bytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t, const cudnnTensorDescriptor_t x,
                                                            const cudnnTensorDescriptor_t dy,
                                                            const cudnnConvolutionDescriptor_t conv,
                                                            const cudnnFilterDescriptor_t dw, const int requested,
                                                            int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perfs) {
  Conv g;
  if (!make_conv(x, dw, conv, dy, g)) return CUDNN_STATUS_BAD_PARAM;
  return rank(conv, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, requested, returned,
              perfs);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t x,
                                                             const cudnnTensorDescriptor_t dy,
                                                             const cudnnConvolutionDescriptor_t conv,
                                                             const cudnnFilterDescriptor_t dw,
                                                             cudnnConvolutionBwdFilterAlgo_t, size_t* bytes) {
  Conv g;
  if (!make_conv(x, dw, conv, dy, g)) return CUDNN_STATUS_BAD_PARAM;
  *bytes = kWorkspaceBytes;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t x_desc, const void* x,
                                             const cudnnTensorDescriptor_t dy_desc, const void* dy,
                                             const cudnnConvolutionDescriptor_t conv, cudnnConvolutionBwdFilterAlgo_t,
                                             void* workspace, size_t workspace_bytes, const void* beta,
                                             const cudnnFilterDescriptor_t dw_desc, void* dw) {
  Conv g;
  if (!make_conv(x_desc, dw_desc, conv, dy_desc, g)) return CUDNN_STATUS_BAD_PARAM;
  return convolve(handle, 2, g, alpha, x, dy, beta, dw, workspace, workspace_bytes);
}

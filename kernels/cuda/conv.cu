// kernels/cuda/conv.cu — 2-d convolution on CUDA through cuDNN: forward, backward-data and
// backward-filter (the formulas are in kernels/conv.h).
//
// Each call describes its tensors to cuDNN (NCHW, contiguous, Float32 or Float64; the weight as
// a filter (O, C / groups, kH, kW); the convolution as cross-correlation with PyTorch's stride,
// padding, dilation and group count), picks an algorithm and runs it on the caller's stream.
// Outputs are assigned (alpha 1, beta 0); the bias is then added with cudnnAddTensor.
//
// Algorithms: cudnnGet*Algorithm_v7 ranks the algorithms by cuDNN's heuristics; we take the
// first one that is supported and deterministic (some backward algorithms sum with atomics), so
// a training run repeats bit for bit. The choice depends only on the shapes, so it is cached
// per (physical GPU, pass, shapes, parameters, dtype).
// Math: Float32 runs with CUDNN_FMA_MATH, which forbids TF32 tensor cores (as cuBLAS's default
// math does for matmul): results keep float32 precision and compare with the CPU's.
//
// Handles: one cuDNN handle per thread and GPU, bound to the caller's stream on every call
// (kernels/cuda/handle_pool.cuh).
// Workspace: taken from the caching allocator for each call and released on return. That is the
// per-device cache: the allocator hands the same block back to the next call on the stream
// without a cudaMalloc, and, being stream-ordered, never to work on another stream while this
// call's kernels may still use it.
#include <cudnn.h>

#include <climits>
#include <map>
#include <mutex>
#include <vector>

#include "multigrad/core/cuda_check.h"
#include "multigrad/core/stream.h"
#include "multigrad/kernels/conv.h"
#include "multigrad/kernels/cuda/handle_pool.cuh"
#include "multigrad/kernels/cuda/kernel_timer.cuh"

namespace mg::kernels::cuda {
namespace {

struct Cudnn {
  using Handle = cudnnHandle_t;
  static Handle create() {
    Handle h = nullptr;
    MG_CUDNN_CHECK(cudnnCreate(&h));
    return h;
  }
  static void set_stream(Handle h, cudaStream_t stream) { MG_CUDNN_CHECK(cudnnSetStream(h, stream)); }
};

cudnnHandle_t cudnn_handle(cudaStream_t stream) { return thread_handle<Cudnn>(stream); }

int current_gpu() {
  int gpu = 0;
  MG_CUDA_CHECK(cudaGetDevice(&gpu));
  return gpu;
}

// ---- descriptors (RAII) ----

cudnnDataType_t cudnn_dtype(DType dtype) {
  MG_CHECK(dtype == DType::Float32 || dtype == DType::Float64, "conv2d (CUDA): expected Float32 or Float64, got ",
           dtype);
  return dtype == DType::Float32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_DOUBLE;
}

int as_int(int64_t v, const char* what) {
  MG_CHECK(v >= 0 && v <= INT_MAX, "conv2d (CUDA): ", what, " = ", v, " exceeds cuDNN's 32-bit sizes");
  return int(v);
}

// A contiguous (N, C, H, W) tensor, or a bias (O) seen as (1, O, 1, 1).
struct TensorDesc {
  cudnnTensorDescriptor_t desc = nullptr;
  explicit TensorDesc(const Tensor& t) {
    MG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc));
    const bool bias = t.dim() == 1;
    MG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, cudnn_dtype(t.dtype()),
                                              bias ? 1 : as_int(t.size(0), "N"), as_int(t.size(bias ? 0 : 1), "C"),
                                              bias ? 1 : as_int(t.size(2), "H"), bias ? 1 : as_int(t.size(3), "W")));
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(desc); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t desc = nullptr;
  explicit FilterDesc(const Tensor& w) {  // (O, C / groups, kH, kW)
    MG_CUDNN_CHECK(cudnnCreateFilterDescriptor(&desc));
    MG_CUDNN_CHECK(cudnnSetFilter4dDescriptor(desc, cudnn_dtype(w.dtype()), CUDNN_TENSOR_NCHW, as_int(w.size(0), "O"),
                                              as_int(w.size(1), "C / groups"), as_int(w.size(2), "kH"),
                                              as_int(w.size(3), "kW")));
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(desc); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t desc = nullptr;
  ConvDesc(const Conv2dParams& p, DType dtype) {
    MG_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&desc));
    MG_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        desc, as_int(p.padding[0], "padding"), as_int(p.padding[1], "padding"), as_int(p.stride[0], "stride"),
        as_int(p.stride[1], "stride"), as_int(p.dilation[0], "dilation"), as_int(p.dilation[1], "dilation"),
        CUDNN_CROSS_CORRELATION, cudnn_dtype(dtype)));
    MG_CUDNN_CHECK(cudnnSetConvolutionGroupCount(desc, as_int(p.groups, "groups")));
    MG_CUDNN_CHECK(
        cudnnSetConvolutionMathType(desc, dtype == DType::Float32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH));
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(desc); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// Everything one convolution call describes to cuDNN. x: input (N, C, H, W), w: weight, y: output
// (N, O, oH, oW) — in a backward pass, the gradients with those shapes.
struct ConvCall {
  cudnnHandle_t handle;
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  ConvCall(const Tensor& x_t, const Tensor& w_t, const Tensor& y_t, const Conv2dParams& p, cudaStream_t stream)
      : handle(cudnn_handle(stream)), x(x_t), y(y_t), w(w_t), conv(p, x_t.dtype()) {}
};

// ---- algorithm choice ----

enum class Pass : int64_t { Forward, BackwardData, BackwardFilter };

// Key of the algorithm cache: the GPU, the pass, every size and parameter, the dtype.
std::vector<int64_t> algo_key(Pass pass, const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  std::vector<int64_t> key{current_gpu(), int64_t(pass), int64_t(x.dtype()), p.groups};
  for (const Tensor* t : {&x, &w})
    for (int64_t s : t->shape()) key.push_back(s);
  for (const auto* pair : {&p.stride, &p.padding, &p.dilation}) key.insert(key.end(), pair->begin(), pair->end());
  return key;
}

// The first of cuDNN's ranked candidates that is supported and deterministic, cached by key.
template <class Perf, class Query>
decltype(Perf::algo) choose_algo(const std::vector<int64_t>& key, const char* pass_name, const Query& query) {
  static std::mutex mutex;
  static std::map<std::vector<int64_t>, decltype(Perf::algo)> cache;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  // cuDNN has at most 8 algorithms per pass; ask for a few more so none is cut.
  constexpr int kCandidates = 16;
  Perf perfs[kCandidates];
  int returned = 0;
  query(kCandidates, &returned, perfs);
  for (int i = 0; i < returned; ++i)
    if (perfs[i].status == CUDNN_STATUS_SUCCESS && perfs[i].determinism == CUDNN_DETERMINISTIC) {
      std::lock_guard<std::mutex> lock(mutex);
      cache.emplace(key, perfs[i].algo);
      return perfs[i].algo;
    }
  MG_ERROR("conv2d (CUDA): cuDNN offers no deterministic ", pass_name, " algorithm for this shape (", returned,
           " candidates)");
}

// Workspace from the caching allocator on the device of `like` (see the top).
Tensor workspace(size_t bytes, const Tensor& like) {
  return Tensor::empty({int64_t((bytes + 7) / 8)}, {DType::Int64, like.device()});
}

void check_contiguous(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    MG_CHECK(t->is_contiguous(), op, " (CUDA): expected contiguous tensors, got shape ", t->shape(),
             " with strides ", t->strides());
}

// alpha = 1 and beta = 0 in the data's type (cuDNN reads them as float for Float32 data and
// as double for Float64).
struct Scaling {
  float f_one = 1.f, f_zero = 0.f;
  double d_one = 1.0, d_zero = 0.0;
  bool is_double;
  explicit Scaling(DType dtype) : is_double(dtype == DType::Float64) {}
  const void* one() const { return is_double ? static_cast<const void*>(&d_one) : &f_one; }
  const void* zero() const { return is_double ? static_cast<const void*>(&d_zero) : &f_zero; }
};

}  // namespace

// ============================== launchers ==============================

bool has_cudnn() { return true; }

void conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& out,
                    const Conv2dParams& p, cudaStream_t stream) {
  check_contiguous("conv2d", {&input, &weight, &out});
  set_cuda_device(out.device());
  if (out.numel() == 0) return;
  ConvCall call(input, weight, out, p, stream);
  const auto algo = choose_algo<cudnnConvolutionFwdAlgoPerf_t>(
      algo_key(Pass::Forward, input, weight, p), "forward", [&](int n, int* returned, auto* perfs) {
        MG_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(call.handle, call.x.desc, call.w.desc, call.conv.desc,
                                                              call.y.desc, n, returned, perfs));
      });
  size_t bytes = 0;
  MG_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(call.handle, call.x.desc, call.w.desc, call.conv.desc,
                                                         call.y.desc, algo, &bytes));
  const Tensor ws = workspace(bytes, out);
  const Scaling s(out.dtype());
  const KernelTimer timer_fwd(__FILE__, "cudnn_conv_fwd", stream);
  MG_CUDNN_CHECK(cudnnConvolutionForward(call.handle, s.one(), call.x.desc, input.data_ptr(), call.w.desc,
                                         weight.data_ptr(), call.conv.desc, algo, ws.data_ptr(), bytes, s.zero(),
                                         call.y.desc, out.data_ptr()));
  if (bias.defined()) {
    check_contiguous("conv2d", {&bias});
    const TensorDesc b(bias);  // (1, O, 1, 1), broadcast over N, oH, oW
    const KernelTimer timer_bias(__FILE__, "cudnn_add_bias", stream);
    MG_CUDNN_CHECK(cudnnAddTensor(call.handle, s.one(), b.desc, bias.data_ptr(), s.one(), call.y.desc,
                                  out.data_ptr()));
  }
}

void conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_input,
                           const Conv2dParams& p, cudaStream_t stream) {
  check_contiguous("conv2d_backward_input", {&grad_out, &weight, &grad_input});
  set_cuda_device(grad_input.device());
  if (grad_input.numel() == 0) return;
  ConvCall call(grad_input, weight, grad_out, p, stream);
  const auto algo = choose_algo<cudnnConvolutionBwdDataAlgoPerf_t>(
      algo_key(Pass::BackwardData, grad_input, weight, p), "backward-data", [&](int n, int* returned, auto* perfs) {
        MG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(call.handle, call.w.desc, call.y.desc,
                                                                   call.conv.desc, call.x.desc, n, returned, perfs));
      });
  size_t bytes = 0;
  MG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(call.handle, call.w.desc, call.y.desc, call.conv.desc,
                                                              call.x.desc, algo, &bytes));
  const Tensor ws = workspace(bytes, grad_input);
  const Scaling s(grad_input.dtype());
  const KernelTimer timer_data(__FILE__, "cudnn_conv_bwd_data", stream);
  MG_CUDNN_CHECK(cudnnConvolutionBackwardData(call.handle, s.one(), call.w.desc, weight.data_ptr(), call.y.desc,
                                              grad_out.data_ptr(), call.conv.desc, algo, ws.data_ptr(), bytes,
                                              s.zero(), call.x.desc, grad_input.data_ptr()));
}

void conv2d_backward_weight(const Tensor& grad_out, const Tensor& input, const Tensor& grad_weight,
                            const Conv2dParams& p, cudaStream_t stream) {
  check_contiguous("conv2d_backward_weight", {&grad_out, &input, &grad_weight});
  set_cuda_device(grad_weight.device());
  if (grad_weight.numel() == 0) return;
  if (input.numel() == 0) {  // an empty batch contributes nothing
    MG_CUDA_CHECK(cudaMemsetAsync(grad_weight.data_ptr(), 0, size_t(grad_weight.numel()) * grad_weight.element_size(),
                                  stream));
    return;
  }
  ConvCall call(input, grad_weight, grad_out, p, stream);
  const auto algo = choose_algo<cudnnConvolutionBwdFilterAlgoPerf_t>(
      algo_key(Pass::BackwardFilter, input, grad_weight, p), "backward-filter",
      [&](int n, int* returned, auto* perfs) {
        MG_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(call.handle, call.x.desc, call.y.desc,
                                                                     call.conv.desc, call.w.desc, n, returned, perfs));
      });
  size_t bytes = 0;
  MG_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(call.handle, call.x.desc, call.y.desc,
                                                                call.conv.desc, call.w.desc, algo, &bytes));
  const Tensor ws = workspace(bytes, grad_weight);
  const Scaling s(grad_weight.dtype());
  const KernelTimer timer_filter(__FILE__, "cudnn_conv_bwd_filter", stream);
  MG_CUDNN_CHECK(cudnnConvolutionBackwardFilter(call.handle, s.one(), call.x.desc, input.data_ptr(), call.y.desc,
                                                grad_out.data_ptr(), call.conv.desc, algo, ws.data_ptr(), bytes,
                                                s.zero(), call.w.desc, grad_weight.data_ptr()));
}

}  // namespace mg::kernels::cuda

// kernels/cuda/no_cudnn.cu — conv2d on CUDA in a build without cuDNN (CMake found none, or
// MG_CUDNN=OFF): compiled in place of conv.cu, each launcher throws an error that names the build
// option, so a CNN on a GPU fails at its first convolution with the fix in the message. Pooling
// (pool.cu) and everything else on CUDA do not need cuDNN.
#include "multigrad/core/error.h"
#include "multigrad/kernels/conv.h"

namespace mg::kernels::cuda {
namespace {

[[noreturn]] void no_cudnn(const char* op) {
  MG_ERROR(op, " on CUDA needs cuDNN, and this build has none: configure with cuDNN installed, or with "
           "-DCUDNN_ROOT=<folder holding include/cudnn.h and lib/libcudnn.so*> (MG_CUDNN=ON makes a missing "
           "cuDNN a configure error); or run the convolution on a CPU device");
}

}  // namespace

bool has_cudnn() { return false; }

void conv2d_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&, cudaStream_t) {
  no_cudnn("conv2d");
}

void conv2d_backward_input(const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&, cudaStream_t) {
  no_cudnn("conv2d_backward_input");
}

void conv2d_backward_weight(const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&, cudaStream_t) {
  no_cudnn("conv2d_backward_weight");
}

}  // namespace mg::kernels::cuda

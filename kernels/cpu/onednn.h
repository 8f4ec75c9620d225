// kernels/cpu/onednn.h — what the CPU kernels that call oneDNN share (conv_onednn.cpp,
// matmul_bf16.cpp). Included only where MG_WITH_ONEDNN is defined (CMakeLists.txt).
#pragma once

#include <omp.h>

#include <dnnl.hpp>

namespace mg::kernels::cpu {

// The CPU engine every oneDNN primitive here runs on, made once.
inline dnnl::engine& onednn_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// In this scope, the OpenMP regions oneDNN starts on this thread use `threads` threads (oneDNN
// sizes a primitive's work for omp_get_max_threads() when it is made); restored on exit.
class OmpThreads {
 public:
  explicit OmpThreads(int threads) : saved_(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ~OmpThreads() { omp_set_num_threads(saved_); }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_;
};

}  // namespace mg::kernels::cpu

// kernels/cuda/bad_index.cuh — reporting an out-of-range index found inside a kernel as an
// mg::Error on the host (cross-entropy targets; the index ops' indices, the embedding's included).
//
// PyTorch's CUDA kernels assert on the device, which poisons the context; here a kernel records
// the smallest offending position in an 8-byte device word (atomicMin, so the report names the
// first bad element whatever the block order) and the launcher reads it back. The price: one
// 8-byte device-to-host copy and a synchronisation of the stream per call, so the host waits for
// the kernel (and all work queued before it) before the op returns. A second 8-byte copy fetches
// the offending value, only when there is one.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "multigrad/core/cuda_check.h"
#include "multigrad/core/tensor.h"
#if MG_CUDA_SIM
#include "multigrad/sim/ledger.h"
#endif

namespace mg::kernels::cuda {

class BadIndexFlag {
 public:
  static constexpr unsigned long long kNone = ~0ull;  // all bits set: what the memset writes

  BadIndexFlag(const Device& device, cudaStream_t stream)
      : word_(Tensor::empty({1}, {DType::Int64, device})), stream_(stream) {
    MG_CUDA_CHECK(cudaMemsetAsync(data(), 0xFF, sizeof(unsigned long long), stream_));
  }

  unsigned long long* data() const { return static_cast<unsigned long long*>(word_.data_ptr()); }

  // Waits for the stream; the first bad position, or -1 when every index was in range.
  int64_t first_bad() const {
    unsigned long long host = kNone;
    MG_CUDA_CHECK(cudaMemcpyAsync(&host, data(), sizeof(host), cudaMemcpyDeviceToHost, stream_));
    MG_CUDA_CHECK(cudaStreamSynchronize(stream_));
#if MG_CUDA_SIM
    if (sim::ledger::record_only()) return -1;  // no kernel ran, so no index was checked
#endif
    return host == kNone ? -1 : int64_t(host);
  }

  // The Int64 at device address `p` (the offending index), read synchronously.
  int64_t read(const int64_t* p) const {
    int64_t host = 0;
    MG_CUDA_CHECK(cudaMemcpyAsync(&host, p, sizeof(host), cudaMemcpyDeviceToHost, stream_));
    MG_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return host;
  }

 private:
  Tensor word_;  // (1), device memory holding the smallest bad position
  cudaStream_t stream_;
};

// In a kernel: records position `pos` as bad; the smallest recorded position wins.
__device__ __forceinline__ void report_bad_index(unsigned long long* flag, int64_t pos) {
  atomicMin(flag, static_cast<unsigned long long>(pos));
}

}  // namespace mg::kernels::cuda

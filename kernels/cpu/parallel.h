// kernels/cpu/parallel.h — how the CPU kernels split work across the threads of a device.
//
// A CPU device may use cpu_thread_budget(device) threads (cpu_thread_count() / CPU devices), so N
// devices driven by N threads never oversubscribe the cores. Each op asks for at most that many
// OpenMP threads, and fewer when the work is small.
#pragma once

#include <algorithm>
#include <cstdint>

#include "multigrad/core/device.h"

namespace mg::kernels::cpu {

// Elements of simple elementwise work below which an op stays on one thread: waking an OpenMP
// team costs a few microseconds, about what one core needs for 32k such elements.
inline constexpr int64_t kGrain = 32768;

// Cuts [0, n) into one contiguous chunk per thread and calls body(begin, end) on each chunk,
// with at most cpu_thread_budget(device) threads and at least `grain` units per thread.
// Chunk boundaries depend on the thread count: work whose result must not (reductions) is
// split into fixed blocks by the caller. `body` must not throw: an exception cannot leave an
// OpenMP region, so kernels check everything before they get here.
template <class Body>
void parallel_for(const Device& device, int64_t n, int64_t grain, const Body& body) {
  if (n <= 0) return;
  const int64_t wanted = n / std::max<int64_t>(grain, 1);
  if (wanted <= 1) return body(0, n);  // small work skips the OpenMP runtime altogether
  const int64_t threads = std::min<int64_t>(cpu_thread_budget(device), wanted);
  if (threads == 1) return body(0, n);
#pragma omp parallel for schedule(static, 1) num_threads(int(threads))
  for (int64_t t = 0; t < threads; ++t) body(n * t / threads, n * (t + 1) / threads);
}

}  // namespace mg::kernels::cpu

// kernels/kernel_times.cpp — the ledger of kernels/kernel_times.h and, with CUDA, the KernelTimer
// that fills it (kernels/cuda/kernel_timer.cuh).
//
// Events are created with timing (cudaEventDefault) on the GPU current at the launch, which the
// launchers have set to their tensors' device, and are reused: each GPU keeps a free list that
// take_kernel_times() refills. An interval is a (file or family, kernel, gpu, start, stop) row
// until then.
#include "multigrad/kernels/kernel_times.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string_view>
#include <utility>

#if MG_WITH_CUDA
#include "multigrad/core/cuda_check.h"
#include "multigrad/kernels/cuda/kernel_timer.cuh"
#endif
#if MG_CUDA_SIM
#include "multigrad/sim/ledger.h"
#endif

namespace mg {
namespace {

// -1 until the first query reads MG_KERNEL_TIMES, then 0 or 1.
std::atomic<int> timing_state{-1};

}  // namespace

void set_kernel_timing(bool on) { timing_state.store(on ? 1 : 0, std::memory_order_relaxed); }

bool kernel_timing() {
  int state = timing_state.load(std::memory_order_relaxed);
  if (state < 0) {
    const char* env = std::getenv("MG_KERNEL_TIMES");
    int from_env = env != nullptr && std::strcmp(env, "1") == 0 ? 1 : 0;
    timing_state.compare_exchange_strong(state, from_env, std::memory_order_relaxed);
    state = timing_state.load(std::memory_order_relaxed);
  }
  return state == 1;
}

#if MG_WITH_CUDA

namespace {

struct Interval {
  const char* file;
  const char* kernel;
  int gpu;
  cudaEvent_t start, stop;
};

struct Ledger {
  std::mutex mutex;
  std::vector<Interval> intervals;
  std::map<int, std::vector<cudaEvent_t>> free_events;  // per physical GPU
};

// Leaked: launches during static destruction may still record.
Ledger& ledger() {
  static auto* l = new Ledger;
  return *l;
}

cudaEvent_t take_event(int gpu) {
  Ledger& l = ledger();
  {
    std::lock_guard<std::mutex> lock(l.mutex);
    std::vector<cudaEvent_t>& free = l.free_events[gpu];
    if (!free.empty()) {
      cudaEvent_t e = free.back();
      free.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  MG_CUDA_CHECK(cudaEventCreate(&e));  // on the current GPU, which is `gpu`
  return e;
}

// "kernels/cuda/norm.cu" -> "norm"
std::string stem(const char* file) {
  std::string_view s(file);
  if (const size_t slash = s.find_last_of('/'); slash != std::string_view::npos) s.remove_prefix(slash + 1);
  if (const size_t dot = s.find('.'); dot != std::string_view::npos) s = s.substr(0, dot);
  return std::string(s);
}

}  // namespace

namespace kernels::cuda {

namespace {
thread_local const char* family_override = nullptr;  // KernelFamilyScope's
}  // namespace

KernelFamilyScope::KernelFamilyScope(const char* family) : previous_(family_override) { family_override = family; }
KernelFamilyScope::~KernelFamilyScope() { family_override = previous_; }

KernelTimer::KernelTimer(const char* file, const char* kernel, cudaStream_t stream)
    : file_(family_override != nullptr ? family_override : file), kernel_(kernel), stream_(stream) {
#if MG_CUDA_SIM
  sim::ledger::context().family = file_;  // the family of the launch or library call this brackets
#endif
  if (!kernel_timing()) return;
  MG_CUDA_CHECK(cudaGetDevice(&gpu_));
  start_ = take_event(gpu_);
  MG_CUDA_CHECK(cudaEventRecord(start_, stream_));
}

KernelTimer::~KernelTimer() {
  if (gpu_ < 0) return;
  cudaEvent_t stop = take_event(gpu_);
  // A destructor must not throw: a failed record leaves the pair out of the ledger.
  if (cudaEventRecord(stop, stream_) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  Ledger& l = ledger();
  std::lock_guard<std::mutex> lock(l.mutex);
  l.intervals.push_back({file_, kernel_, gpu_, start_, stop});
}

}  // namespace kernels::cuda

std::vector<KernelTime> take_kernel_times() {
  Ledger& l = ledger();
  std::vector<Interval> intervals;
  {
    std::lock_guard<std::mutex> lock(l.mutex);
    intervals.swap(l.intervals);
  }
  std::map<std::pair<std::string, std::string>, KernelTime> sums;
  for (const Interval& i : intervals) {
    MG_CUDA_CHECK(cudaEventSynchronize(i.stop));
    float ms = 0;
    MG_CUDA_CHECK(cudaEventElapsedTime(&ms, i.start, i.stop));
    const std::string family = stem(i.file);
    KernelTime& t = sums[{family, i.kernel}];
    t.family = family;
    t.kernel = i.kernel;
    t.launches += 1;
    t.ms += double(ms);
  }
  {
    std::lock_guard<std::mutex> lock(l.mutex);
    for (const Interval& i : intervals) {
      l.free_events[i.gpu].push_back(i.start);
      l.free_events[i.gpu].push_back(i.stop);
    }
  }
  std::vector<KernelTime> out;
  for (auto& [key, t] : sums) out.push_back(std::move(t));
  std::stable_sort(out.begin(), out.end(), [](const KernelTime& a, const KernelTime& b) { return a.ms > b.ms; });
  return out;
}

#else  // without CUDA nothing is ever timed

std::vector<KernelTime> take_kernel_times() { return {}; }

#endif

}  // namespace mg

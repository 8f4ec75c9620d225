// benchmarks/bench_util.h — timing shared by the benchmarks: medians of alternating samples.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <vector>

namespace mg::bench {

// A sample repeats the op until it lasts this long, so that timer and launch overheads vanish.
inline constexpr double kMinSampleMs = 5.0;
inline constexpr int kMaxCallsPerSample = 10000;

struct Settings {
  bool quick = false;
  int warmup = 2;
  int samples = 10;
};

inline double now_ms() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// How many calls of a `one_call_ms` op make a sample of kMinSampleMs.
inline int calls_for(double one_call_ms) {
  return std::clamp(int(std::ceil(kMinSampleMs / std::max(one_call_ms, 1e-4))), 1, kMaxCallsPerSample);
}

// Median time in ms of one call of each of `fns`. Their samples alternate (a, b, c, a, b, c,
// ...) so that load from elsewhere on a shared machine falls on all of them alike and their
// ratios hold. `sync` waits for queued device work (a no-op on the CPU).
inline std::vector<double> measure(const Settings& s, const std::vector<std::function<void()>>& fns,
                                   const std::function<void()>& sync = [] {}) {
  std::vector<int> calls;  // per sample, so that one sample lasts kMinSampleMs
  for (const auto& fn : fns) {
    for (int i = 0; i < s.warmup; ++i) fn();
    sync();
    const double t0 = now_ms();
    fn();
    sync();
    calls.push_back(calls_for(now_ms() - t0));
  }
  std::vector<std::vector<double>> per_call(fns.size());
  for (int i = 0; i < s.samples; ++i) {
    for (size_t f = 0; f < fns.size(); ++f) {
      const double t0 = now_ms();
      for (int c = 0; c < calls[f]; ++c) fns[f]();
      sync();
      per_call[f].push_back((now_ms() - t0) / calls[f]);
    }
  }
  std::vector<double> medians;
  for (const auto& v : per_call) medians.push_back(median(v));
  return medians;
}

}  // namespace mg::bench

// core/random.cpp — the process-wide Philox state (seed, offset), guarded by a mutex.
//
// Until manual_seed is called the seed is kDefaultSeed, a fixed constant (the one PyTorch uses),
// so a program that never seeds still draws the same numbers on every run.
#include "core/random.h"

#include <mutex>

namespace mg {

namespace {

constexpr uint64_t kDefaultSeed = 67280421310721ull;

std::mutex rng_mutex;
PhiloxState rng_state{kDefaultSeed, 0};

}  // namespace

void manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(rng_mutex);
  rng_state = PhiloxState{seed, 0};
}

PhiloxState get_rng_state() {
  std::lock_guard<std::mutex> lock(rng_mutex);
  return rng_state;
}

void set_rng_state(const PhiloxState& state) {
  std::lock_guard<std::mutex> lock(rng_mutex);
  rng_state = state;
}

PhiloxState philox_reserve(uint64_t blocks) {
  std::lock_guard<std::mutex> lock(rng_mutex);
  PhiloxState reserved = rng_state;
  rng_state.offset += blocks;
  return reserved;
}

}  // namespace mg

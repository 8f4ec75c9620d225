// core/random.cpp — the process-wide Philox state (seed, offset), guarded by a mutex.
//
// Until manual_seed is called the seed is kDefaultSeed, a fixed constant (the one PyTorch uses),
// so a program that never seeds still draws the same numbers on every run.
#include "core/random.h"

#include <mutex>

#include "core/error.h"

namespace mg {

namespace {

constexpr uint64_t kDefaultSeed = 67280421310721ull;

std::mutex rng_mutex;
PhiloxState rng_state{kDefaultSeed, 0};

thread_local std::vector<PhiloxDraw>* t_recording = nullptr;
thread_local RngReplay* t_replay = nullptr;

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
  PhiloxState reserved;
  if (RngReplay* replay = t_replay) {
    const size_t i = replay->next_++;
    MG_CHECK(i < replay->draws_->size(), "RngReplay: draw ", i + 1, " of ", blocks,
             " blocks, but the recorded forward drew only ", replay->draws_->size(), " times");
    const PhiloxDraw& draw = (*replay->draws_)[i];
    MG_CHECK(draw.blocks == blocks, "RngReplay: draw ", i + 1, " takes ", blocks,
             " blocks, but the recorded forward's took ", draw.blocks);
    reserved = draw.state;
  } else {
    std::lock_guard<std::mutex> lock(rng_mutex);
    reserved = rng_state;
    rng_state.offset += blocks;
  }
  // A recorder inside a replay (a checkpoint recomputed inside another's) records the replayed draw.
  if (t_recording) t_recording->push_back({reserved, blocks});
  return reserved;
}

RngRecorder::RngRecorder(std::vector<PhiloxDraw>& draws) : previous_(t_recording) { t_recording = &draws; }
RngRecorder::~RngRecorder() { t_recording = previous_; }

RngReplay::RngReplay(const std::vector<PhiloxDraw>& draws) : draws_(&draws), previous_(t_replay) { t_replay = this; }
RngReplay::~RngReplay() { t_replay = previous_; }

}  // namespace mg

// core/random.cpp — the process-wide Philox state (seed, offset), guarded by a mutex, and the
// per-thread generators and draw slices that stand in for it on a thread.
//
// Until manual_seed is called the seed is kDefaultSeed, a fixed constant (the one PyTorch uses),
// so a program that never seeds still draws the same numbers on every run.
#include "multigrad/core/random.h"

#include <mutex>

#include "multigrad/core/error.h"

namespace mg {

namespace {

constexpr uint64_t kDefaultSeed = 67280421310721ull;

std::mutex rng_mutex;
PhiloxState rng_state{kDefaultSeed, 0};

thread_local std::vector<PhiloxDraw>* t_recording = nullptr;
thread_local RngReplay* t_replay = nullptr;
thread_local ThreadGenerator* t_generator = nullptr;
thread_local DrawSliceScope* t_draw_slice = nullptr;

}  // namespace

void manual_seed(uint64_t seed) {
  if (ThreadGenerator* own = t_generator) {
    own->state_ = PhiloxState{seed, 0};
    return;
  }
  std::lock_guard<std::mutex> lock(rng_mutex);
  rng_state = PhiloxState{seed, 0};
}

PhiloxState get_rng_state() {
  if (ThreadGenerator* own = t_generator) return own->state_;
  std::lock_guard<std::mutex> lock(rng_mutex);
  return rng_state;
}

void set_rng_state(const PhiloxState& state) {
  if (ThreadGenerator* own = t_generator) {
    own->state_ = state;
    return;
  }
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
  } else if (ThreadGenerator* own = t_generator) {
    reserved = own->state_;
    own->state_.offset += blocks;
  } else {
    std::lock_guard<std::mutex> lock(rng_mutex);
    reserved = rng_state;
    rng_state.offset += blocks;
  }
  // A recorder inside a replay (a checkpoint recomputed inside another's) records the replayed draw.
  if (t_recording) t_recording->push_back({reserved, blocks});
  return reserved;
}

ThreadGenerator::ThreadGenerator(PhiloxState state) : state_(state), previous_(t_generator) { t_generator = this; }
ThreadGenerator::~ThreadGenerator() { t_generator = previous_; }

DrawSliceScope::DrawSliceScope(DrawSlice slice, int64_t size) : slice_(slice), size_(size), previous_(t_draw_slice) {
  MG_CHECK(slice.dim >= 0 && slice.start >= 0 && size >= 0 && slice.start + size <= slice.whole, "DrawSliceScope: ",
           "positions [", slice.start, ", ", slice.start + size, ") along dim ", slice.dim, " are not within [0, ",
           slice.whole, ")");
  t_draw_slice = this;
}
DrawSliceScope::~DrawSliceScope() { t_draw_slice = previous_; }

const DrawSliceScope* current_draw_slice() { return t_draw_slice; }

RngRecorder::RngRecorder(std::vector<PhiloxDraw>& draws) : previous_(t_recording) { t_recording = &draws; }
RngRecorder::~RngRecorder() { t_recording = previous_; }

RngReplay::RngReplay(const std::vector<PhiloxDraw>& draws) : draws_(&draws), previous_(t_replay) { t_replay = this; }
RngReplay::~RngReplay() { t_replay = previous_; }

}  // namespace mg

// core/random.h — the global Philox generator state: a seed and an offset.
//
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) is
// counter-based: block b of a draw is philox(key = seed, counter = offset + b) and depends on
// nothing else, so the CPU loop and the CUDA kernel produce the same bits in any order.
// Each draw of n numbers takes its blocks from the current offset and advances the offset past
// them, so successive draws never overlap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "multigrad/core/macros.h"

namespace mg {

struct PhiloxState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // in 128-bit blocks (4 x uint32)
};

void manual_seed(uint64_t seed);  // seed, and offset back to 0
PhiloxState get_rng_state();
void set_rng_state(const PhiloxState& state);
// Reserves `blocks` consecutive counter blocks for one draw; returns the state to draw them at.
PhiloxState philox_reserve(uint64_t blocks);

// ---- a generator of one thread's own ----
// The generator is process-wide (a mutex guards it) until a ThreadGenerator lives on a thread:
// then manual_seed, get_rng_state, set_rng_state and philox_reserve there act on a generator of
// that thread's own, which starts at `state`. Rank threads (parallel/comm/rank_threads.h) each open one
// at the launching thread's state, so a rank draws what a process started with the same seed
// would, whatever the other ranks' threads draw meanwhile, and leave the launcher's alone.
class ThreadGenerator {
 public:
  explicit ThreadGenerator(PhiloxState state);
  ~ThreadGenerator();
  ThreadGenerator(const ThreadGenerator&) = delete;
  ThreadGenerator& operator=(const ThreadGenerator&) = delete;

 private:
  PhiloxState state_;
  ThreadGenerator* previous_;
  friend void manual_seed(uint64_t seed);
  friend PhiloxState get_rng_state();
  friend void set_rng_state(const PhiloxState& state);
  friend PhiloxState philox_reserve(uint64_t blocks);
};

// ---- drawing a slice of a larger draw ----
// A tensor that is the slice [start, start + its size) along `dim` of a tensor of `whole` along
// that dim (the other dims the same) draws the numbers the whole tensor's draw has there, and
// reserves the whole draw's blocks: a rank holding some positions of a sequence (sequence
// parallelism) or some rows of a batch (DataParallel's replicas) draws the one-device numbers.
struct DrawSlice {
  int dim = 0;
  int64_t start = 0;
  int64_t whole = 0;
};
// While a DrawSliceScope lives on a thread, every draw there (mg::rand, mg::randn, dropout) is
// the slice `slice` of the draw of the whole: DataParallel opens one on each replica's thread
// with the replica's rows of the batch. Draws whose size along slice.dim is not the slice's are
// an error naming both.
class DrawSliceScope {
 public:
  DrawSliceScope(DrawSlice slice, int64_t size);  // size: the slice's length along slice.dim
  ~DrawSliceScope();
  DrawSliceScope(const DrawSliceScope&) = delete;
  DrawSliceScope& operator=(const DrawSliceScope&) = delete;
  const DrawSlice& slice() const { return slice_; }
  int64_t size() const { return size_; }

 private:
  DrawSlice slice_;
  int64_t size_;
  DrawSliceScope* previous_;
};
// The innermost DrawSliceScope on this thread, or null.
const DrawSliceScope* current_draw_slice();

// Where a tensor's elements sit in its draw: element i is the draw's element
// first + (i / row) * stride + i % row (row 0: first + i), so a slice of a draw is rows of
// consecutive elements a stride apart.
struct DrawWindow {
  int64_t first = 0;
  int64_t row = 0;
  int64_t stride = 0;
  MG_HD int64_t operator()(int64_t i) const { return row == 0 ? first + i : first + (i / row) * stride + i % row; }
};

// ---- recording and replaying draws (activation recomputation, autograd/checkpoint.h) ----
// While an RngRecorder lives on a thread, each philox_reserve there is appended to its list;
// while an RngReplay lives on a thread, philox_reserve there hands the listed reservations out
// again, in order, and leaves the generator alone, so a recomputed forward draws the bits its
// first run drew even if other threads drew in between. Replaying a draw of another size, or
// past the list's end, throws: the recomputation did not repeat the forward.
struct PhiloxDraw {
  PhiloxState state;
  uint64_t blocks = 0;
};

class RngRecorder {
 public:
  explicit RngRecorder(std::vector<PhiloxDraw>& draws);
  ~RngRecorder();
  RngRecorder(const RngRecorder&) = delete;
  RngRecorder& operator=(const RngRecorder&) = delete;

 private:
  std::vector<PhiloxDraw>* previous_;
};

class RngReplay {
 public:
  explicit RngReplay(const std::vector<PhiloxDraw>& draws);
  ~RngReplay();
  RngReplay(const RngReplay&) = delete;
  RngReplay& operator=(const RngReplay&) = delete;

 private:
  const std::vector<PhiloxDraw>* draws_;
  size_t next_ = 0;
  RngReplay* previous_;
  friend PhiloxState philox_reserve(uint64_t blocks);
};

// ---- the generator itself, MG_HD so CPU and CUDA share it ----

struct Philox4 {
  uint32_t x[4];
};

MG_HD uint32_t mulhilo32(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t product = uint64_t(a) * uint64_t(b);
  *hi = uint32_t(product >> 32);
  return uint32_t(product);
}

// Ten rounds of Philox4x32 on counter (lo, hi) with key = seed; constants from the paper.
MG_HD Philox4 philox4x32_10(uint64_t seed, uint64_t counter_lo, uint64_t counter_hi = 0) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // key schedule increments
  uint32_t c0 = uint32_t(counter_lo), c1 = uint32_t(counter_lo >> 32);
  uint32_t c2 = uint32_t(counter_hi), c3 = uint32_t(counter_hi >> 32);
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    uint32_t lo0 = mulhilo32(kMul0, c0, &hi0);
    uint32_t lo1 = mulhilo32(kMul1, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// 24 random bits -> a float in [0, 1) with every value exactly representable.
MG_HD float uint_to_unit_float(uint32_t u) { return float(u >> 8) * (1.0f / 16777216.0f); }
// 53 random bits from two words -> a double in [0, 1).
MG_HD double uints_to_unit_double(uint32_t a, uint32_t b) {
  uint64_t bits = (uint64_t(a) << 21) ^ uint64_t(b >> 11);
  return double(bits & ((uint64_t(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace mg

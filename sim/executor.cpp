// sim/executor.cpp — blocks of fibers, barriers and warp exchanges (see executor.h).
#include "multigrad/sim/executor.h"

#include <algorithm>
#include <boost/context/fiber.hpp>
#include <boost/context/pooled_fixedsize_stack.hpp>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace ctx = boost::context;

namespace mg::sim {

thread_local CurrentThread* tls_thread = nullptr;

namespace {

// A fiber's stack: the kernels' locals are a few hundred bytes (the native SGEMM's 64
// accumulators and fragments the most), the rest is the simulator's own frames and headroom;
// AddressSanitizer's redzones need more.
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kStackBytes = size_t(512) << 10;
#else
constexpr size_t kStackBytes = size_t(128) << 10;
#endif
constexpr int kWarpSize = 32;

enum class Order { Forward, Reverse, Shuffle };
struct Schedule {
  Order order = Order::Forward;
  uint64_t seed = 0;
};

Schedule schedule_from_env() {
  const char* env = std::getenv("MG_CUDA_SIM_SCHEDULE");
  const std::string s = env != nullptr ? env : "forward";
  if (s == "forward") return {};
  if (s == "reverse") return {Order::Reverse, 0};
  if (s == "shuffle") return {Order::Shuffle, 1};
  if (s.rfind("shuffle:", 0) == 0) return {Order::Shuffle, std::strtoull(s.c_str() + 8, nullptr, 10)};
  throw SimError("MG_CUDA_SIM_SCHEDULE='" + s + "': expected forward, reverse or shuffle[:seed]");
}

// The sanitizers are told of every switch between the scheduler's stack and a fiber's (Boost's
// fcontext fibers do not tell them). AddressSanitizer would take a fiber's frames for a stack
// overflow or a corrupted stack: `bottom`/`size` name the stack switched to, and the finish call
// learns the one left. ThreadSanitizer keeps a shadow stack and clock per fiber (`tsan_to` is the
// one switched to); flag 0 makes each switch synchronise, as the block's threads are ordered by
// the scheduler, so its reports are about the host threads (streams, loaders, communicators).
void tsan_switch(void* tsan_to) {
#if defined(__SANITIZE_THREAD__)
  __tsan_switch_to_fiber(tsan_to, 0);
#endif
  (void)tsan_to;
}
void start_switch(void** fake_stack, const void* bottom, size_t size, void* tsan_to) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#endif
  tsan_switch(tsan_to);
}
void finish_switch(void* fake_stack, const void** bottom_old, size_t* size_old) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake_stack, bottom_old, size_old);
#endif
}

// ThreadSanitizer's handle of one fiber, destroyed with it; null without ThreadSanitizer.
struct TsanFiber {
#if defined(__SANITIZE_THREAD__)
  std::unique_ptr<void, void (*)(void*)> handle{__tsan_create_fiber(0), __tsan_destroy_fiber};
  void* get() const { return handle.get(); }
  static void* current() { return __tsan_get_current_fiber(); }
#else
  void* get() const { return nullptr; }
  static void* current() { return nullptr; }
#endif
};

// A pooled stack allocator that also records the stack it hands out (for the annotations).
struct RecordingStack {
  ctx::pooled_fixedsize_stack* pool;
  ctx::stack_context* record;
  ctx::stack_context allocate() { return *record = pool->allocate(); }
  void deallocate(ctx::stack_context& sc) noexcept { pool->deallocate(sc); }
};

std::string str(uint3 v) {
  std::ostringstream os;
  os << "(" << v.x << ", " << v.y << ", " << v.z << ")";
  return os.str();
}

}  // namespace

struct ThreadState {
  CurrentThread current;
  TsanFiber tsan_fiber;                    // outlives `fiber`, whose destructor may unwind it
  void* tsan_scheduler = nullptr;          // ThreadSanitizer's fiber of the scheduler
  ctx::fiber fiber;                        // resumes the thread
  ctx::fiber sink;                         // resumes the scheduler while the thread runs
  ctx::stack_context stack;                // the fiber's stack
  const void* scheduler_bottom = nullptr;  // the scheduler's stack, for the ASan annotations
  size_t scheduler_size = 0;
  void* fake_stack = nullptr;
  std::function<bool()> ready;  // empty: runnable; else what the thread waits for
  const char* waiting_on = nullptr;
  uint64_t barriers = 0;  // __syncthreads passed
  bool done = false;
  std::string error;
};

// One warp's shuffle in progress: lanes write their value, then, once every lane of the mask
// has, read their partner's; the next shuffle starts when all have read.
struct WarpExchange {
  bool reading = false;
  unsigned mask = 0, arrived = 0, read = 0;
  unsigned char slots[kWarpSize][16];
};

struct Block {
  std::vector<ThreadState> threads;
  std::vector<WarpExchange> warps;
  int live = 0;        // threads not finished
  int at_barrier = 0;  // threads waiting at __syncthreads
  uint64_t barrier_generation = 0;
};

namespace {

// Suspends the calling CUDA thread until `ready()` holds (the scheduler checks it).
void wait_until(const char* what, std::function<bool()> ready) {
  ThreadState& t = *tls_thread->state;
  t.ready = std::move(ready);
  t.waiting_on = what;
  start_switch(&t.fake_stack, t.scheduler_bottom, t.scheduler_size, t.tsan_scheduler);
  t.sink = std::move(t.sink).resume();
  finish_switch(t.fake_stack, &t.scheduler_bottom, &t.scheduler_size);
}

std::string thread_name(const ThreadState& t) {
  return "thread " + str(t.current.thread_idx) + " of block " + str(t.current.block_idx);
}

// Why no thread of the block can go on.
std::string stuck(const Block& b) {
  int barrier = 0, shuffle = 0, finished = 0;
  const ThreadState* example = nullptr;
  for (const ThreadState& t : b.threads) {
    if (t.done) {
      ++finished;
    } else if (t.waiting_on != nullptr && std::string(t.waiting_on) == "__syncthreads") {
      ++barrier;
    } else {
      ++shuffle;
      if (example == nullptr) example = &t;
    }
  }
  std::ostringstream os;
  os << "block " << str(b.threads.front().current.block_idx) << " cannot go on: " << barrier
     << " threads wait at __syncthreads, " << shuffle << " at a warp shuffle, " << finished << " finished";
  if (example != nullptr)
    os << " (" << thread_name(*example) << " waits for lanes of its shuffle mask that never arrive)";
  return os.str();
}

void run_block(Block& b, const std::function<void()>& call, const Schedule& schedule, std::mt19937_64& rng,
               ctx::pooled_fixedsize_stack& stacks) {
  const int n = int(b.threads.size());
  for (ThreadState& t : b.threads) {
    t.current.state = &t;
    t.current.block = &b;
    t.tsan_scheduler = TsanFiber::current();
    // Constructing a fiber enters it for a moment (Boost jumps to its entry and straight back),
    // which ThreadSanitizer must see on the fiber's shadow stack, not grow the scheduler's by.
    tsan_switch(t.tsan_fiber.get());
    t.fiber = ctx::fiber(std::allocator_arg, RecordingStack{&stacks, &t.stack}, [&t, &call](ctx::fiber&& sink) {
      finish_switch(nullptr, &t.scheduler_bottom, &t.scheduler_size);
      t.sink = std::move(sink);
      try {
        call();
      } catch (const ctx::detail::forced_unwind&) {
        throw;
      } catch (const std::exception& e) {
        t.error = e.what();
      }
      t.done = true;
      start_switch(nullptr, t.scheduler_bottom, t.scheduler_size, t.tsan_scheduler);  // this stack ends here
      return std::move(t.sink);
    });
    tsan_switch(t.tsan_scheduler);
  }
  b.live = n;
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  if (schedule.order == Order::Reverse) std::reverse(order.begin(), order.end());
  while (b.live > 0) {
    if (schedule.order == Order::Shuffle) std::shuffle(order.begin(), order.end(), rng);
    bool progressed = false;
    for (int i : order) {
      ThreadState& t = b.threads[size_t(i)];
      if (t.done || (t.ready && !t.ready())) continue;
      t.ready = nullptr;
      t.waiting_on = nullptr;
      tls_thread = &t.current;
      void* fake_stack = nullptr;
      start_switch(&fake_stack, static_cast<char*>(t.stack.sp) - t.stack.size, t.stack.size, t.tsan_fiber.get());
      t.fiber = std::move(t.fiber).resume();
      finish_switch(fake_stack, nullptr, nullptr);
      tls_thread = nullptr;
      progressed = true;
      if (!t.error.empty()) throw SimError(thread_name(t) + ": " + t.error);
      if (t.done) --b.live;
    }
    if (b.live > 0 && b.at_barrier == b.live) {  // every live thread arrived: the barrier opens
      ++b.barrier_generation;
      b.at_barrier = 0;
    } else if (b.live > 0 && !progressed) {
      throw SimError(stuck(b));
    }
  }
  // A barrier every thread must reach: a thread that skipped one (returned early, or took a
  // branch without it) is a divergent barrier, whatever order the threads ran in.
  const ThreadState& first = b.threads.front();
  for (const ThreadState& t : b.threads)
    if (t.barriers != first.barriers)
      throw SimError("__syncthreads not reached by every thread: " + thread_name(t) + " passed " +
                     std::to_string(t.barriers) + ", " + thread_name(first) + " " + std::to_string(first.barriers));
}

}  // namespace

void syncthreads() {
  Block& b = *tls_thread->block;
  const uint64_t generation = b.barrier_generation;
  ++b.at_barrier;
  ++tls_thread->state->barriers;
  wait_until("__syncthreads", [&b, generation] { return b.barrier_generation != generation; });
}

void shuffle_xor_bytes(unsigned mask, const void* value, void* result, size_t size, int lane_mask, int width) {
  const CurrentThread& c = *tls_thread;
  const int lane = c.linear % kWarpSize;
  const std::string who = "__shfl_xor_sync in " + thread_name(*c.state) + " (lane " + std::to_string(lane) + ")";
  if (((mask >> lane) & 1u) == 0) {
    std::ostringstream os;
    os << who << ": its mask 0x" << std::hex << mask << " does not name it";
    throw SimError(os.str());
  }
  int source = lane ^ lane_mask;
  if (width < kWarpSize && source / width != lane / width) source = lane;  // outside its segment: its own
  WarpExchange& w = c.block->warps[size_t(c.linear / kWarpSize)];
  if (w.reading || ((w.arrived >> lane) & 1u) != 0)
    wait_until("__shfl_xor_sync", [&w, lane] { return !w.reading && ((w.arrived >> lane) & 1u) == 0; });
  if (w.arrived == 0) {
    w.mask = mask;
  } else if (w.mask != mask) {
    std::ostringstream os;
    os << who << ": mask 0x" << std::hex << mask << ", but lanes of its warp passed 0x" << w.mask;
    throw SimError(os.str());
  }
  std::memcpy(w.slots[lane], value, size);
  w.arrived |= 1u << lane;
  if (w.arrived == w.mask)
    w.reading = true;
  else
    wait_until("__shfl_xor_sync", [&w] { return w.reading; });
  if (((w.mask >> source) & 1u) == 0)
    throw SimError(who + ": reads lane " + std::to_string(source) + ", which is not in the mask");
  std::memcpy(result, w.slots[source], size);
  w.read |= 1u << lane;
  if (w.read == w.mask) w = WarpExchange{};
}

void run_grid(const char* kernel, dim3 grid, dim3 block, const std::function<void()>& call) {
  static const Schedule schedule = schedule_from_env();
  thread_local ctx::pooled_fixedsize_stack stacks(kStackBytes);
  thread_local uint64_t launches = 0;
  std::mt19937_64 rng(schedule.seed * 0x9E3779B97F4A7C15ull + launches++);
  const int threads = int(block.x * block.y * block.z);
  try {
    for (unsigned z = 0; z < grid.z; ++z)
      for (unsigned y = 0; y < grid.y; ++y)
        for (unsigned x = 0; x < grid.x; ++x) {
          Block b;
          b.threads.resize(size_t(threads));
          b.warps.resize(size_t((threads + kWarpSize - 1) / kWarpSize));
          for (int i = 0; i < threads; ++i) {
            CurrentThread& c = b.threads[size_t(i)].current;
            c.thread_idx = {unsigned(i) % block.x, unsigned(i) / block.x % block.y, unsigned(i) / (block.x * block.y)};
            c.block_idx = {x, y, z};
            c.block_dim = block;
            c.grid_dim = grid;
            c.linear = i;
          }
          run_block(b, call, schedule, rng, stacks);
        }
  } catch (const SimError& e) {
    throw SimError(std::string(kernel) + ": " + e.what());
  }
}

}  // namespace mg::sim

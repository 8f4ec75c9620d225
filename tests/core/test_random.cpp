// tests/core/test_random.cpp — Philox4x32-10 against the known-answer vectors published with
// Random123 (kat_vectors), and the global seed/offset state.
#include <algorithm>
#include <set>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

// Random123 lists counter words c0..c3 and key words k0, k1; philox4x32_10 takes the counter
// as (lo, hi) = (c0 | c1 << 32, c2 | c3 << 32) and the key as seed = k0 | k1 << 32.
mg::Philox4 philox_words(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  auto join = [](uint32_t lo, uint32_t hi) { return uint64_t(lo) | uint64_t(hi) << 32; };
  return mg::philox4x32_10(join(k0, k1), join(c0, c1), join(c2, c3));
}

std::vector<uint32_t> words(const mg::Philox4& r) { return {r.x[0], r.x[1], r.x[2], r.x[3]}; }

// Restores the generator state after a test.
struct RngStateGuard {
  mg::PhiloxState saved = mg::get_rng_state();
  ~RngStateGuard() { mg::set_rng_state(saved); }
};

}  // namespace

TEST_CASE("philox4x32_10 matches Random123's zero vector", "[core][random]") {
  CHECK(words(philox_words(0, 0, 0, 0, 0, 0)) ==
        std::vector<uint32_t>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(words(mg::philox4x32_10(0, 0)) == words(philox_words(0, 0, 0, 0, 0, 0)));  // counter_hi defaults to 0
}

TEST_CASE("philox4x32_10 matches Random123's all-ones vector", "[core][random]") {
  uint32_t ones = 0xffffffff;
  CHECK(words(philox_words(ones, ones, ones, ones, ones, ones)) ==
        std::vector<uint32_t>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
}

TEST_CASE("philox4x32_10 matches Random123's pi-digits vector", "[core][random]") {
  CHECK(words(philox_words(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0)) ==
        std::vector<uint32_t>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("philox4x32_10 gives different blocks for neighbouring counters and seeds", "[core][random]") {
  std::set<std::vector<uint32_t>> seen;
  for (uint64_t seed = 0; seed < 4; ++seed)
    for (uint64_t counter = 0; counter < 64; ++counter) seen.insert(words(mg::philox4x32_10(seed, counter)));
  CHECK(seen.size() == 4 * 64);
}

TEST_CASE("unit-interval conversions stay below 1 and hit its ends exactly", "[core][random]") {
  CHECK(mg::uint_to_unit_float(0) == 0.0f);
  CHECK(mg::uint_to_unit_float(0xffffffffu) == 1.0f - 1.0f / 16777216.0f);
  CHECK(mg::uint_to_unit_float(0x80000000u) == 0.5f);
  CHECK(mg::uints_to_unit_double(0, 0) == 0.0);
  CHECK(mg::uints_to_unit_double(0xffffffffu, 0xffffffffu) < 1.0);
  CHECK(mg::uints_to_unit_double(0xffffffffu, 0xffffffffu) == 1.0 - 1.0 / 9007199254740992.0);
}

TEST_CASE("manual_seed sets the seed and rewinds the offset", "[core][random]") {
  RngStateGuard restore;
  mg::manual_seed(7);
  mg::philox_reserve(10);
  mg::manual_seed(1234);
  mg::PhiloxState s = mg::get_rng_state();
  CHECK(s.seed == 1234);
  CHECK(s.offset == 0);
}

TEST_CASE("philox_reserve hands out consecutive, non-overlapping ranges", "[core][random]") {
  RngStateGuard restore;
  mg::manual_seed(99);
  mg::PhiloxState first = mg::philox_reserve(5);
  mg::PhiloxState second = mg::philox_reserve(3);
  mg::PhiloxState third = mg::philox_reserve(0);
  CHECK(first.seed == 99);
  CHECK(first.offset == 0);
  CHECK(second.offset == 5);
  CHECK(third.offset == 8);
  CHECK(mg::get_rng_state().offset == 8);
}

TEST_CASE("set_rng_state restores a saved state so draws repeat", "[core][random]") {
  RngStateGuard restore;
  mg::manual_seed(5);
  mg::philox_reserve(17);
  mg::PhiloxState saved = mg::get_rng_state();
  mg::PhiloxState a = mg::philox_reserve(4);
  mg::set_rng_state(saved);
  mg::PhiloxState b = mg::philox_reserve(4);
  CHECK(a.seed == b.seed);
  CHECK(a.offset == b.offset);
  CHECK(a.offset == 17);
}

TEST_CASE("philox_reserve is safe across threads", "[core][random]") {
  RngStateGuard restore;
  mg::manual_seed(3);
  constexpr int kThreads = 4, kDraws = 2000;
  std::vector<std::vector<uint64_t>> offsets(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&offsets, t] {
      for (int i = 0; i < kDraws; ++i) offsets[t].push_back(mg::philox_reserve(2).offset);
    });
  }
  for (auto& th : threads) th.join();
  std::set<uint64_t> all;
  for (const auto& v : offsets) all.insert(v.begin(), v.end());
  CHECK(all.size() == size_t(kThreads * kDraws));
  CHECK(*all.rbegin() == uint64_t(2 * (kThreads * kDraws - 1)));
  CHECK(mg::get_rng_state().offset == uint64_t(2 * kThreads * kDraws));
}

TEST_CASE("RngReplay hands out an RngRecorder's draws again and leaves the generator alone", "[core][random]") {
  RngStateGuard restore;
  mg::manual_seed(6);
  std::vector<mg::PhiloxDraw> draws;
  {
    mg::RngRecorder recording(draws);
    mg::philox_reserve(3);
    std::thread([] { mg::philox_reserve(100); }).join();  // another thread's draw is not this one's
    mg::philox_reserve(5);
  }
  REQUIRE(draws.size() == 2);
  CHECK(draws[0].state.offset == 0);
  CHECK(draws[0].blocks == 3);
  CHECK(draws[1].state.offset == 103);
  mg::philox_reserve(1);  // not recorded
  CHECK(draws.size() == 2);

  const mg::PhiloxState now = mg::get_rng_state();
  {
    mg::RngReplay replay(draws);
    CHECK(mg::philox_reserve(3).offset == 0);
    CHECK(mg::philox_reserve(5).offset == 103);
    mg::test::require_error([] { mg::philox_reserve(1); }, {"RngReplay", "draw 3", "only 2 times"});
  }
  CHECK(mg::get_rng_state().offset == now.offset);
  mg::RngReplay replay(draws);
  mg::test::require_error([] { mg::philox_reserve(4); }, {"RngReplay", "draw 1 takes 4 blocks", "took 3"});
}

TEST_CASE("a ThreadGenerator gives its thread a generator of its own, starting at the state given",
          "[core][random]") {
  RngStateGuard restore;
  mg::manual_seed(5);
  const mg::PhiloxState start{9, 40};
  {
    mg::ThreadGenerator own(start);
    CHECK(mg::philox_reserve(3).offset == 40);
    CHECK(mg::get_rng_state().offset == 43);
    {
      mg::ThreadGenerator inner({1, 0});  // nested: the inner one until it ends
      mg::manual_seed(2);
      CHECK(mg::philox_reserve(1).seed == 2);
    }
    CHECK(mg::get_rng_state().seed == 9);
    CHECK(mg::get_rng_state().offset == 43);
    mg::set_rng_state({9, 100});
    CHECK(mg::philox_reserve(1).offset == 100);
  }
  // The process-wide generator was never touched.
  CHECK(mg::get_rng_state().seed == 5);
  CHECK(mg::get_rng_state().offset == 0);
}

// Threads that each open a ThreadGenerator at one state draw the same offsets whatever the others
// draw meanwhile: a shared generator would hand each thread a different share of 4 x 2000 draws.
TEST_CASE("threads with ThreadGenerators at one state draw the same sequence, concurrently", "[core][random]") {
  RngStateGuard restore;
  mg::manual_seed(3);
  const mg::PhiloxState start = mg::get_rng_state();
  constexpr int kThreads = 4, kDraws = 2000;
  std::vector<std::vector<uint64_t>> offsets(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&offsets, start, t] {
      mg::ThreadGenerator own(start);
      for (int i = 0; i < kDraws; ++i) offsets[t].push_back(mg::philox_reserve(uint64_t(1 + i % 3)).offset);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 1; t < kThreads; ++t) CHECK(offsets[t] == offsets[0]);
  CHECK(offsets[0][1] == 1);
  CHECK(offsets[0][2] == 3);
  CHECK(mg::get_rng_state().offset == 0);
}

TEST_CASE("DrawWindow maps a slice's elements to the whole draw's", "[core][random]") {
  CHECK(mg::DrawWindow{}(7) == 7);
  const mg::DrawWindow rows{5, 3, 10};  // rows of 3 elements, 10 apart, from element 5
  CHECK(rows(0) == 5);
  CHECK(rows(2) == 7);
  CHECK(rows(3) == 15);
  CHECK(rows(7) == 26);
}

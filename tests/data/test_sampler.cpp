// tests/data/test_sampler.cpp — samplers: sequential, the seeded permutation, and
// DistributedSampler against PyTorch's split worked out by hand for small cases.
#include <algorithm>

#include "test_util.h"
#include "multigrad/data/data.h"

using mg::data::DistributedSampler;
using mg::data::RandomSampler;
using mg::data::SequentialSampler;
using mg::test::require_error;
using V = std::vector<int64_t>;

namespace {

// All ranks' indices of one epoch.
std::vector<V> split(int64_t n, int64_t replicas, bool shuffle, bool drop_last, int64_t epoch = 0,
                     uint64_t seed = 0) {
  std::vector<V> out;
  for (int64_t r = 0; r < replicas; ++r) out.push_back(DistributedSampler(n, replicas, r, shuffle, seed, drop_last).indices(epoch));
  return out;
}

bool is_permutation_of_range(V v) {
  std::sort(v.begin(), v.end());
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != int64_t(i)) return false;
  return true;
}

}  // namespace

TEST_CASE("SequentialSampler is 0 to n-1 every epoch", "[data]") {
  CHECK(SequentialSampler(4).indices(0) == V{0, 1, 2, 3});
  CHECK(SequentialSampler(4).indices(7) == V{0, 1, 2, 3});
  CHECK(SequentialSampler(0).indices(0).empty());
  require_error([] { SequentialSampler(3).indices(-1); }, {"epoch", "-1"});
}

TEST_CASE("RandomSampler is a reproducible permutation that changes per epoch and seed", "[data]") {
  RandomSampler s(1000, 42);
  V e0 = s.indices(0);
  REQUIRE(e0.size() == 1000);
  CHECK(is_permutation_of_range(e0));
  CHECK(e0 == RandomSampler(1000, 42).indices(0));
  CHECK(e0 != s.indices(1));
  CHECK(is_permutation_of_range(s.indices(1)));
  CHECK(e0 != RandomSampler(1000, 43).indices(0));
  CHECK(e0 != SequentialSampler(1000).indices(0));
  CHECK(RandomSampler(1, 5).indices(3) == V{0});
}

TEST_CASE("RandomSampler puts every index at position 0 about equally often", "[data]") {
  // 10 indices over 2000 epochs: each should lead about 200 times (binomial sd ~13).
  std::vector<int> first(10, 0);
  RandomSampler s(10, 7);
  for (int64_t e = 0; e < 2000; ++e) first[size_t(s.indices(e)[0])]++;
  for (int c : first) {
    INFO("count " << c);
    CHECK(c > 140);
    CHECK(c < 260);
  }
}

TEST_CASE("DistributedSampler n 10 replicas 3 pads with the first indices", "[data]") {
  // total_size 12: order 0..9 then 0, 1; rank r takes positions r, r + 3, ...
  CHECK(split(10, 3, false, false) == std::vector<V>{{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}});
  CHECK(DistributedSampler(10, 3, 0, false).num_samples() == 4);
}

TEST_CASE("DistributedSampler n 10 replicas 3 drop_last cuts to 9", "[data]") {
  CHECK(split(10, 3, false, true) == std::vector<V>{{0, 3, 6}, {1, 4, 7}, {2, 5, 8}});
  CHECK(DistributedSampler(10, 3, 2, false, 0, true).num_samples() == 3);
}

TEST_CASE("DistributedSampler n 10 replicas 3 shuffled splits one shared permutation", "[data]") {
  V p = RandomSampler(10, 9).indices(2);  // the permutation every rank draws for seed 9, epoch 2
  CHECK(split(10, 3, true, false, 2, 9) ==
        std::vector<V>{{p[0], p[3], p[6], p[9]}, {p[1], p[4], p[7], p[0]}, {p[2], p[5], p[8], p[1]}});
  CHECK(split(10, 3, true, true, 2, 9) == std::vector<V>{{p[0], p[3], p[6]}, {p[1], p[4], p[7]}, {p[2], p[5], p[8]}});
  CHECK(split(10, 3, true, false, 3, 9) != split(10, 3, true, false, 2, 9));
}

TEST_CASE("DistributedSampler n 5 replicas 4", "[data]") {
  // total 8: 0 1 2 3 4 0 1 2.
  CHECK(split(5, 4, false, false) == std::vector<V>{{0, 4}, {1, 0}, {2, 1}, {3, 2}});
  // drop_last: floor(5 / 4) = 1 each, total 4.
  CHECK(split(5, 4, false, true) == std::vector<V>{{0}, {1}, {2}, {3}});
}

TEST_CASE("DistributedSampler repeats the order when padding exceeds n", "[data]") {
  // n 2, replicas 5: total 5, padding 3 > n, so 0 1 | 0 1 0.
  CHECK(split(2, 5, false, false) == std::vector<V>{{0}, {1}, {0}, {1}, {0}});
  CHECK(split(2, 5, false, true) == std::vector<V>{{}, {}, {}, {}, {}});
  CHECK(split(0, 3, false, false) == std::vector<V>{{}, {}, {}});
}

TEST_CASE("DistributedSampler with one replica is RandomSampler", "[data]") {
  CHECK(DistributedSampler(17, 1, 0, true, 5).indices(4) == RandomSampler(17, 5).indices(4));
}

TEST_CASE("DistributedSampler rejects bad arguments", "[data]") {
  require_error([] { DistributedSampler(10, 0, 0); }, {"num_replicas", "0"});
  require_error([] { DistributedSampler(10, 3, 3); }, {"rank 3", "num_replicas 3"});
  require_error([] { DistributedSampler(10, 3, -1); }, {"rank -1"});
  require_error([] { DistributedSampler(-2, 3, 0); }, {"size", "-2"});
}

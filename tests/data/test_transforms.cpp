// tests/data/test_transforms.cpp — Normalize's values and RandomHorizontalFlip's per-example,
// per-epoch decisions.
#include "test_util.h"
#include "multigrad/data/data.h"

using mg::data::Normalize;
using mg::data::RandomHorizontalFlip;
using mg::test::require_error;

namespace {

// n images (1, 2, 3): image i row r is 100 i + 10 r + (0, 1, 2).
mg::Tensor images(int64_t n) {
  std::vector<float> v;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t c = 0; c < 3; ++c) v.push_back(float(100 * i + 10 * r + c));
  return mg::tensor(v, {n, 1, 2, 3});
}

bool flipped(const std::vector<float>& out, int64_t k) {
  return out[size_t(k * 6)] == float(100 * (k % 1000) + 2);
}

}  // namespace

TEST_CASE("Normalize subtracts the mean and divides by std", "[data]") {
  Normalize n{0.5, 0.25};
  mg::test::require_close(n(mg::tensor({0.f, 0.5f, 1.f}, {3})), {-2.0, 0.0, 2.0});
  require_error([] { Normalize{0, 0}(mg::ones({2})); }, {"std", "0"});
}

TEST_CASE("RandomHorizontalFlip with p 1 reverses each row and p 0 copies", "[data]") {
  mg::Tensor x = images(2);
  auto all = RandomHorizontalFlip{1.0, 3}(x, {0, 1}, 0).to_vector<float>();
  CHECK(all == std::vector<float>{2, 1, 0, 12, 11, 10, 102, 101, 100, 112, 111, 110});
  CHECK(RandomHorizontalFlip{0.0, 3}(x, {0, 1}, 0).to_vector<float>() == x.to_vector<float>());
  CHECK(x.to_vector<float>()[0] == 0);  // the input is left as it was
  require_error([&] { RandomHorizontalFlip{0.5, 3}(x, {0}, 0); }, {"1 indices", "batch of 2"});
  require_error([&] { RandomHorizontalFlip{1.5, 3}(x, {0, 1}, 0); }, {"p", "1.5"});
}

TEST_CASE("RandomHorizontalFlip decides by seed, epoch and dataset index", "[data]") {
  RandomHorizontalFlip flip{0.5, 11};
  const int64_t n = 64;
  std::vector<int64_t> idx(n), reversed(n);
  for (int64_t i = 0; i < n; ++i) idx[size_t(i)] = i, reversed[size_t(i)] = n - 1 - i;
  mg::Tensor x = images(n);
  auto e0 = flip(x, idx, 0).to_vector<float>();
  // The same examples in another order (another batch position) get the same decisions.
  std::vector<float> rev_x;
  for (int64_t i = n - 1; i >= 0; --i)
    for (int64_t j = 0; j < 6; ++j) rev_x.push_back(float(100 * i + 10 * (j / 3) + j % 3));
  auto r0 = flip(mg::tensor(rev_x, {n, 1, 2, 3}), reversed, 0).to_vector<float>();
  int count = 0, changed = 0;
  auto e1 = flip(x, idx, 1).to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    bool f = flipped(e0, i);
    CHECK(f == (r0[size_t((n - 1 - i) * 6)] == float(100 * i + 2)));
    count += f;
    changed += f != flipped(e1, i);
  }
  CHECK(count > 16);
  CHECK(count < 48);
  CHECK(changed > 0);  // another epoch, other decisions
  CHECK(flip(x, idx, 0).to_vector<float>() == e0);
  CHECK(RandomHorizontalFlip{0.5, 12}(x, idx, 0).to_vector<float>() != e0);
}

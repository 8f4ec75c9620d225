// Views (autograd/shape_ops.cpp): values against index arithmetic, storage sharing (a write
// through one is read through the other), when reshape copies, and the errors.
#include "reference.h"

using namespace mg;
using namespace mg::test;

namespace {

Tensor iota(const Shape& shape, DType dtype = DType::Float32) {
  return arange(count(shape), {.dtype = dtype}).reshape(shape);
}

std::vector<double> iota_values(int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = double(i);
  return v;
}

}  // namespace

TEST_CASE("reshape of a contiguous tensor is a view and infers -1", "[ops]") {
  Tensor t = iota({2, 3, 4});
  Tensor r = t.reshape({4, -1});
  REQUIRE(r.shape() == Shape{4, 6});
  REQUIRE(r.storage() == t.storage());
  require_close(r, iota_values(24), 0, 0);
  REQUIRE(t.reshape({-1}).shape() == Shape{24});
  REQUIRE(t.reshape({2, 1, 12}).storage() == t.storage());
  REQUIRE(reshape(full({1}, 5.0), {}).dim() == 0);
}

TEST_CASE("reshape of a transposed tensor copies, in row-major order of the view", "[ops]") {
  Tensor t = iota({3, 4}).transpose(0, 1);  // (4, 3)
  Tensor r = t.reshape({12});
  REQUIRE(r.storage() != t.storage());
  REQUIRE(r.to_vector<float>() == std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
}

TEST_CASE("reshape of a non-contiguous but viewable layout is a view", "[ops]") {
  Tensor base = iota({4, 3, 2});
  Tensor rows = base.slice(0, 0, 4, 2);  // (2, 3, 2): rows 0 and 2, stride 12
  REQUIRE_FALSE(rows.is_contiguous());
  Tensor merged = rows.reshape({2, 6});  // the inner (3, 2) block stays contiguous
  REQUIRE(merged.storage() == base.storage());
  REQUIRE(merged.strides() == Strides{12, 1});
  require_close(merged, {0, 1, 2, 3, 4, 5, 12, 13, 14, 15, 16, 17}, 0, 0);
  Tensor split = iota({6, 4}).transpose(0, 1).reshape({4, 2, 3});  // splits the strided dim
  REQUIRE(split.strides() == Strides{1, 12, 4});
  REQUIRE(split.to_vector<float>()[4] == 16.0f);
  REQUIRE(iota({3, 4}).transpose(0, 1).unsqueeze(1).reshape({4, 3}).strides() == Strides{1, 4});
}

TEST_CASE("reshape to a different element count names both shapes and counts", "[ops]") {
  require_error([] { ones({2, 3}).reshape({4, 2}); }, {"reshape", "[2, 3]", "6", "[4, 2]", "8"});
  require_error([] { ones({2, 3}).reshape({4, -1}); }, {"reshape", "[2, 3]", "[4, -1]"});
  require_error([] { ones({2, 3}).reshape({-1, -1}); }, {"reshape", "only one dim can be -1"});
  require_error([] { ones({2, 3}).reshape({-2, -3}); }, {"reshape", "-2"});
}

TEST_CASE("reshape and view of empty tensors", "[ops]") {
  Tensor e = zeros({3, 0});
  REQUIRE(e.reshape({0, 5}).shape() == Shape{0, 5});
  REQUIRE(e.view({0}).shape() == Shape{0});
  REQUIRE(e.transpose(0, 1).view({0, 3}).shape() == Shape{0, 3});
  require_error([&] { e.reshape({-1, 0}); }, {"reshape", "[3, 0]"});
}

TEST_CASE("view works on viewable layouts and otherwise says to use reshape", "[ops]") {
  Tensor t = iota({2, 6});
  Tensor v = t.view({3, 2, 2});
  REQUIRE(v.storage() == t.storage());
  require_error([&] { t.transpose(0, 1).view({12}); }, {"view: shape [12] is not compatible", "use reshape"});
  REQUIRE(t.transpose(0, 1).view({3, 2, 2}).strides() == Strides{2, 1, 6});
}

TEST_CASE("transpose swaps dims and shares storage", "[ops]") {
  Tensor t = iota({2, 3, 4});
  Tensor u = t.transpose(0, -1);  // (4, 3, 2)
  REQUIRE(u.shape() == Shape{4, 3, 2});
  require_close(u, permute(Array{{2, 3, 4}, iota_values(24)}, {2, 1, 0}).data, 0, 0);
  REQUIRE(u.storage() == t.storage());
  REQUIRE(t.transpose(1, 1).is_same(t));
  require_error([&] { t.transpose(0, 3); }, {"transpose", "dim 3", "3 dims"});
}

TEST_CASE("permute reorders dims like a naive index map", "[ops]") {
  Array a = random_array({2, 3, 4, 5}, 70);
  Tensor t = to_tensor(a, DType::Float64);
  for (const std::vector<int64_t>& perm :
       std::vector<std::vector<int64_t>>{{3, 1, 0, 2}, {0, 2, 3, 1}, {1, 0, 3, 2}}) {
    require_close(t.permute(perm), permute(a, perm).data, 0, 0);
  }
  REQUIRE(t.permute({-1, 0, 1, 2}).shape() == Shape{5, 2, 3, 4});
  require_error([&] { t.permute({0, 1, 2}); }, {"permute", "4 dims", "[0, 1, 2]"});
  require_error([&] { t.permute({0, 1, 1, 2}); }, {"permute", "dim 1", "more than once"});
  require_error([&] { t.permute({0, 1, 2, 4}); }, {"permute", "dim 4"});
}

TEST_CASE("slice with positive, negative and clamped bounds", "[ops]") {
  Tensor t = arange(10);
  REQUIRE(t.slice(0, 2, 5).to_vector<float>() == std::vector<float>{2, 3, 4});
  REQUIRE(t.slice(0, -3, 10).to_vector<float>() == std::vector<float>{7, 8, 9});
  REQUIRE(t.slice(0, 4, -4).to_vector<float>() == std::vector<float>{4, 5});
  REQUIRE(t.slice(0, -100, 2).to_vector<float>() == std::vector<float>{0, 1});
  REQUIRE(t.slice(0, 8, 1000).to_vector<float>() == std::vector<float>{8, 9});
  REQUIRE(t.slice(0, 6, 3).shape() == Shape{0});
  REQUIRE(t.slice(0, 10, 12).shape() == Shape{0});
}

TEST_CASE("slice with a step, on any dim, shares storage", "[ops]") {
  Tensor t = iota({4, 7});
  Tensor s = t.slice(1, 1, 7, 3);  // columns 1 and 4
  REQUIRE(s.shape() == Shape{4, 2});
  require_close(s, {1, 4, 8, 11, 15, 18, 22, 25}, 0, 0);
  REQUIRE(s.storage() == t.storage());
  Tensor r = t.slice(-2, 1, 4, 2);  // rows 1 and 3
  require_close(r.slice(1, 0, 1), {7, 21}, 0, 0);
  Tensor odd = arange(5).slice(0, 0, 5, 2);
  REQUIRE(odd.to_vector<float>() == std::vector<float>{0, 2, 4});
  REQUIRE(odd.slice(0, 3, 5).shape() == Shape{0});
  require_error([&] { t.slice(0, 0, 2, 0); }, {"slice", "step", "0"});
  require_error([&] { t.slice(2, 0, 1); }, {"slice", "dim 2", "2 dims"});
}

TEST_CASE("writes through a view are seen by the base and by other views", "[ops]") {
  Tensor base = zeros({3, 4});
  Tensor column = base.slice(1, 2, 3);  // (3, 1)
  copy_(column, tensor({1.0, 2.0, 3.0}, {3, 1}));
  require_close(base, {0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0}, 0, 0);
  Tensor t = base.transpose(0, 1);
  REQUIRE(t.slice(0, 2, 3).to_vector<float>() == std::vector<float>{1, 2, 3});
  copy_(base.reshape({12}).slice(0, 0, 12, 4), full({3}, 9.0));
  REQUIRE(t.slice(0, 0, 1).to_vector<float>() == std::vector<float>{9, 9, 9});
}

TEST_CASE("expand adds stride-0 dims and keeps -1 sizes", "[ops]") {
  Tensor col = tensor({1.0, 2.0, 3.0}, {3, 1});
  Tensor e = col.expand({2, 3, -1}).expand({2, 3, 4});
  REQUIRE(e.shape() == Shape{2, 3, 4});
  REQUIRE(e.strides()[0] == 0);
  REQUIRE(e.strides()[2] == 0);
  REQUIRE(e.storage() == col.storage());
  std::vector<double> want;
  for (int b = 0; b < 2; ++b)
    for (double v : {1.0, 2.0, 3.0})
      for (int j = 0; j < 4; ++j) want.push_back(v);
  require_close(e, want, 0, 0);
  REQUIRE(col.expand({3, 0}).shape() == Shape{3, 0});
  require_error([&] { col.expand({4, 2}); }, {"expand", "3", "[4, 2]"});
  require_error([&] { col.expand({1}); }, {"expand", "[1]", "[3, 1]"});
  require_error([&] { col.expand({-1, 3, 1}); }, {"expand", "-1"});
}

TEST_CASE("squeeze and unsqueeze", "[ops]") {
  Tensor t = iota({3, 1, 4});
  REQUIRE(t.squeeze(1).shape() == Shape{3, 4});
  REQUIRE(t.squeeze(-2).storage() == t.storage());
  REQUIRE(t.squeeze(0).shape() == Shape{3, 1, 4});
  REQUIRE(t.unsqueeze(0).shape() == Shape{1, 3, 1, 4});
  REQUIRE(t.unsqueeze(-1).shape() == Shape{3, 1, 4, 1});
  REQUIRE(t.unsqueeze(3).is_contiguous());
  REQUIRE(t.unsqueeze(2).squeeze(2).to_vector<float>() == t.to_vector<float>());
  REQUIRE(full({}, 2.0).unsqueeze(0).shape() == Shape{1});
  REQUIRE(full({}, 2.0).squeeze(0).dim() == 0);
  require_error([&] { t.unsqueeze(5); }, {"unsqueeze", "dim 5", "4 dims"});
  require_error([&] { t.squeeze(3); }, {"squeeze", "dim 3"});
}

TEST_CASE("flatten merges a range of dims", "[ops]") {
  Tensor t = iota({2, 3, 4, 5});
  REQUIRE(t.flatten().shape() == Shape{120});
  REQUIRE(t.flatten(1).shape() == Shape{2, 60});
  REQUIRE(t.flatten(1, 2).shape() == Shape{2, 12, 5});
  REQUIRE(t.flatten(-2, -1).storage() == t.storage());
  REQUIRE(t.flatten(2, 2).is_same(t));
  REQUIRE(full({}, 1.0).flatten().shape() == Shape{1});
  Tensor ft = t.transpose(0, 3).flatten(0, 1);  // (5, 3, 4, 2) -> (15, 4, 2): a copy
  REQUIRE(ft.shape() == Shape{15, 4, 2});
  REQUIRE(ft.storage() != t.storage());
  require_close(ft.slice(0, 1, 2).slice(1, 0, 1).slice(2, 0, 1), {20}, 0, 0);  // t[0, 1, 0, 0]
  require_error([&] { t.flatten(2, 1); }, {"flatten", "start_dim 2", "end_dim 1"});
}

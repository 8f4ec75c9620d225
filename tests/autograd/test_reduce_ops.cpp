// Reductions and softmax (autograd/reduce_ops.cpp) against naive loops over every dim,
// several dims, keepdim, strided inputs, empty and 0-d tensors.
#include <algorithm>
#include <cmath>
#include <limits>

#include "reference.h"

using namespace mg;
using namespace mg::test;

namespace {

double plus(double acc, double x) { return acc + x; }
double take_max(double acc, double x) { return std::max(acc, x); }
double take_min(double acc, double x) { return std::min(acc, x); }
double divide(double acc, int64_t n) { return acc / double(n); }
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<bool> only(size_t ndim, std::vector<int64_t> dims) {
  std::vector<bool> mask(ndim, false);
  for (int64_t d : dims) mask[size_t(d)] = true;
  return mask;
}

// Softmax of `a` along dim d, by the definition exp(x - max) / sum exp(x - max).
Array softmax_ref(const Array& a, int64_t d, bool log) {
  Array m = reduce(a, only(a.shape.size(), {d}), true, -kInf, take_max);
  Array shifted = binary(a, m, a.shape, [](double x, double y) { return x - y; });
  Array s =
      reduce(map(shifted, [](double x) { return std::exp(x); }), only(a.shape.size(), {d}), true, 0, plus);
  return binary(shifted, s, a.shape,
                [log](double x, double z) { return log ? x - std::log(z) : std::exp(x) / z; });
}

}  // namespace

TEST_CASE("sum of every element matches a loop", "[ops]") {
  Array a = random_array({7, 13}, 40);
  double want = 0;
  for (double x : a.data) want += x;
  Tensor s = sum(to_tensor(a));
  REQUIRE(s.dim() == 0);
  require_close(s, {want}, 1e-5, 1e-5);
  require_close(to_tensor(a, DType::Float64).sum(), {want}, 1e-12, 0);
}

TEST_CASE("sum over each dim of a 3-d tensor, with and without keepdim", "[ops]") {
  Array a = random_array({3, 4, 5}, 41);
  Tensor t = to_tensor(a, DType::Float64);
  for (int64_t d = 0; d < 3; ++d) {
    for (bool keepdim : {false, true}) {
      INFO("dim " << d << " keepdim " << keepdim);
      Array want = reduce(a, only(3, {d}), keepdim, 0, plus);
      Tensor got = sum(t, {d}, keepdim);
      REQUIRE(got.shape() == want.shape);
      require_close(got, want.data, 1e-12, 1e-12);
    }
  }
}

TEST_CASE("sum over several dims, negative dims included", "[ops]") {
  Array a = random_array({2, 3, 4, 5}, 42);
  Tensor t = to_tensor(a, DType::Float64);
  Array want = reduce(a, only(4, {0, 2}), false, 0, plus);
  Tensor got = sum(t, {-2, 0});
  REQUIRE(got.shape() == Shape{3, 5});
  require_close(got, want.data, 1e-12, 1e-12);
  Array kept = reduce(a, only(4, {1, 3}), true, 0, plus);
  Tensor got_kept = t.sum({1, -1}, true);
  REQUIRE(got_kept.shape() == Shape{2, 1, 4, 1});
  require_close(got_kept, kept.data, 1e-12, 1e-12);
}

TEST_CASE("sum of Int64 and Bool tensors is Int64", "[ops]") {
  Tensor i = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, {.dtype = DType::Int64});
  Tensor s = sum(i, {1});
  REQUIRE(s.dtype() == DType::Int64);
  REQUIRE(s.to_vector<int64_t>() == std::vector<int64_t>{6, 15});
  Tensor count = sum(gt(i, 2.0));
  REQUIRE(count.dtype() == DType::Int64);
  REQUIRE(count.item<int64_t>() == 4);
}

TEST_CASE("sum of transposed and step-sliced inputs", "[ops]") {
  Array a = random_array({6, 5}, 43);
  Tensor t = to_tensor(a, DType::Float64);
  Array at = permute(a, {1, 0});
  require_close(sum(t.transpose(0, 1), {1}), reduce(at, only(2, {1}), false, 0, plus).data, 1e-12, 1e-12);
  std::vector<double> want(5, 0.0);
  for (int64_t i = 0; i < 6; i += 2)
    for (int64_t j = 0; j < 5; ++j) want[size_t(j)] += a.at({i, j});
  require_close(sum(t.slice(0, 0, 6, 2), {0}), want, 1e-12, 1e-12);
}

TEST_CASE("sum and mean of empty extents", "[ops]") {
  REQUIRE(sum(zeros({0})).item<float>() == 0.0f);
  Tensor rows = sum(zeros({3, 0}), {1});
  REQUIRE(rows.shape() == Shape{3});
  require_close(rows, {0.0, 0.0, 0.0});
  Tensor none = sum(ones({0, 4}), {1});
  REQUIRE(none.shape() == Shape{0});
  REQUIRE(std::isnan(mean(zeros({0})).item<float>()));
}

TEST_CASE("mean over dims matches a loop and rejects integers", "[ops]") {
  Array a = random_array({4, 3, 5}, 44);
  Tensor t = to_tensor(a, DType::Float64);
  require_close(mean(t, {1}), reduce(a, only(3, {1}), false, 0, plus, divide).data, 1e-12, 1e-12);
  require_close(t.mean({0, 2}, true), reduce(a, only(3, {0, 2}), true, 0, plus, divide).data, 1e-12, 1e-12);
  double all = 0;
  for (double x : a.data) all += x;
  require_close(t.mean(), {all / double(a.numel())}, 1e-12, 1e-12);
  require_error([] { mean(ones({2}, {.dtype = DType::Int64})); },
                {"mean: expected a floating dtype, got Int64"});
}

TEST_CASE("max and min over dims match a loop", "[ops]") {
  Array a = random_array({5, 6, 3}, 45);
  Tensor t = to_tensor(a);
  for (int64_t d = 0; d < 3; ++d) {
    INFO("dim " << d);
    require_close(max(t, {d}), reduce(a, only(3, {d}), false, -kInf, take_max).data);
    require_close(min(t, {d}, true), reduce(a, only(3, {d}), true, kInf, take_min).data);
  }
  require_close(max(t), {*std::max_element(a.data.begin(), a.data.end())});
  require_close(min(t, {0, 2}), reduce(a, only(3, {0, 2}), false, kInf, take_min).data);
}

TEST_CASE("max and min keep Int64 and Bool dtypes", "[ops]") {
  Tensor i = tensor({3, -1, 8, 2}, {2, 2}, {.dtype = DType::Int64});
  Tensor m = max(i, {1});
  REQUIRE(m.dtype() == DType::Int64);
  REQUIRE(m.to_vector<int64_t>() == std::vector<int64_t>{3, 8});
  REQUIRE(min(i).item<int64_t>() == -1);
  Tensor any = max(gt(i, 5.0), {1});
  REQUIRE(any.dtype() == DType::Bool);
  REQUIRE(any.to_vector<int64_t>() == std::vector<int64_t>{0, 1});
}

TEST_CASE("max over an empty extent is an error naming the shape", "[ops]") {
  require_error([] { max(zeros({3, 0}), {1}); }, {"max", "[3, 0]"});
  require_error([] { min(zeros({0})); }, {"min", "[0]"});
  REQUIRE(max(zeros({0, 3}), {1}).shape() == Shape{0});
}

TEST_CASE("reductions reject repeated and out-of-range dims", "[ops]") {
  require_error([] { sum(ones({2, 3}), {1, -1}); }, {"sum", "dim 1", "more than once"});
  require_error([] { sum(ones({2, 3}), {2}); }, {"sum", "dim 2", "2 dims"});
  require_error([] { argmax(ones({2, 3}), -3); }, {"argmax", "-3", "2 dims"});
  require_error([] { softmax(ones({4}), 1); }, {"softmax", "dim 1", "1 dim"});
}

TEST_CASE("reductions of a 0-d tensor", "[ops]") {
  Tensor s = full({}, 3.5);
  REQUIRE(sum(s).item<float>() == 3.5f);
  REQUIRE(sum(s, {0}).dim() == 0);
  REQUIRE(mean(s, {-1}, true).item<float>() == 3.5f);
  REQUIRE(max(s).item<float>() == 3.5f);
  REQUIRE(argmax(s, 0).item<int64_t>() == 0);
  REQUIRE(softmax(s, 0).item<float>() == 1.0f);
}

TEST_CASE("argmax along each dim matches a loop", "[ops]") {
  Array a = random_array({4, 5, 3}, 46);
  Tensor t = to_tensor(a, DType::Float64);
  for (int64_t d = 0; d < 3; ++d) {
    INFO("dim " << d);
    Tensor got = argmax(t, d);
    REQUIRE(got.dtype() == DType::Int64);
    Shape out_shape = a.shape;
    out_shape.erase(out_shape.begin() + d);
    REQUIRE(got.shape() == out_shape);
    std::vector<int64_t> want;
    for (int64_t i = 0; i < count(out_shape); ++i) {
      auto index = unravel(i, out_shape);
      index.insert(index.begin() + d, 0);
      int64_t best = 0;
      for (int64_t k = 0; k < a.shape[size_t(d)]; ++k) {
        auto at = index;
        at[size_t(d)] = k;
        auto best_at = index;
        best_at[size_t(d)] = best;
        if (a.at(at) > a.at(best_at)) best = k;
      }
      want.push_back(best);
    }
    REQUIRE(got.to_vector<int64_t>() == want);
  }
}

TEST_CASE("argmax picks the first of tied maxima and keeps dims on request", "[ops]") {
  Tensor t = tensor({1, 5, 5, 2, 7, 7, 7, 0}, {2, 4}, {.dtype = DType::Int64});
  REQUIRE(argmax(t, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  Tensor k = argmax(t, -1, true);
  REQUIRE(k.shape() == Shape{2, 1});
  REQUIRE(argmax(tensor({2.0, 2.0, 2.0}, {3}), 0).item<int64_t>() == 0);
  REQUIRE(argmax(gt(t, 4.0), 1).to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  require_error([] { argmax(zeros({2, 0}), 1); }, {"argmax", "[2, 0]"});
}

TEST_CASE("softmax along each dim matches the definition", "[ops]") {
  Array a = map(random_array({3, 4, 5}, 47), [](double x) { return 4 * x; });
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Tensor t = to_tensor(a, dtype);
    for (int64_t d = -3; d < 3; ++d) {
      INFO("dtype " << dtype << " dim " << d);
      Tensor got = softmax(t, d);
      REQUIRE(got.shape() == a.shape);
      REQUIRE(got.dtype() == dtype);
      require_close(got, softmax_ref(a, (d + 3) % 3, false).data, 1e-5, 1e-7);
    }
  }
}

TEST_CASE("log_softmax along each dim matches the definition", "[ops]") {
  Array a = map(random_array({2, 7, 3}, 48), [](double x) { return 10 * x; });
  Tensor t = to_tensor(a, DType::Float64);
  for (int64_t d = 0; d < 3; ++d) {
    INFO("dim " << d);
    require_close(log_softmax(t, d), softmax_ref(a, d, true).data, 1e-12, 1e-12);
  }
}

TEST_CASE("softmax is stable for large inputs and reads strided views", "[ops]") {
  Tensor big = tensor({1000.0, 1001.0, 1002.0}, {3});
  Array want = softmax_ref({{3}, {0.0, 1.0, 2.0}}, 0, false);
  require_close(softmax(big, 0), want.data);
  Array a = random_array({5, 8}, 49);
  Tensor strided = to_tensor(a).transpose(0, 1).slice(0, 1, 8, 3);  // (3, 5)
  Array view_ref = permute(a, {1, 0});
  Array rows{{3, 5}, {}};
  for (int64_t i = 1; i < 8; i += 3)
    for (int64_t j = 0; j < 5; ++j) rows.data.push_back(view_ref.at({i, j}));
  require_close(softmax(strided, 1), softmax_ref(rows, 1, false).data);
  require_close(log_softmax(strided, 0), softmax_ref(rows, 0, true).data, 1e-5, 1e-6);
}

TEST_CASE("softmax of empty and integer tensors", "[ops]") {
  REQUIRE(softmax(zeros({3, 0}), 1).shape() == Shape{3, 0});
  Tensor i = softmax(tensor({0, 0}, {2}, {.dtype = DType::Int64}), 0);
  REQUIRE(i.dtype() == DType::Float32);
  require_close(i, {0.5, 0.5});
}

TEST_CASE("logsumexp matches log(sum(exp)) and stays finite where exp overflows", "[ops]") {
  const Tensor x = tensor(pseudo_random(12, 31), {3, 4}, {.dtype = DType::Float64});
  const std::vector<double> v = values(x);
  std::vector<double> rows(3, 0.0);
  for (size_t r = 0; r < 3; ++r) {
    double s = 0;
    for (size_t c = 0; c < 4; ++c) s += std::exp(v[r * 4 + c]);
    rows[r] = std::log(s);
  }
  require_close(logsumexp(x, {1}), rows, 1e-14, 0);
  CHECK(logsumexp(x, {1}, true).shape() == Shape{3, 1});
  CHECK(logsumexp(x, {}).shape() == Shape{});
  // exp(1000) overflows: the maximum is taken out first.
  require_close(logsumexp(tensor({1000.0, 1000.0}, {2}), {0}), {1000.0 + std::log(2.0)}, 1e-6, 0);
  // A slice of -inf gives -inf (log 0), one holding +inf gives +inf, as PyTorch's.
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> edge = values(logsumexp(tensor({-inf, -inf, 1.0, inf}, {2, 2}), {1}));
  CHECK(edge[0] == -inf);
  CHECK(edge[1] == inf);
  require_error([] { logsumexp(tensor(std::vector<int64_t>{1, 2}, {2}, {.dtype = DType::Int64}), {0}); },
                {"logsumexp", "floating", "Int64"});
}

TEST_CASE("var and std match a two-pass reference, with and without the correction", "[ops]") {
  const Tensor x = tensor(pseudo_random(30, 32), {5, 6}, {.dtype = DType::Float64});
  const std::vector<double> v = values(x);
  for (int64_t correction : {0, 1}) {
    INFO("correction " << correction);
    std::vector<double> cols(6, 0.0);
    for (size_t c = 0; c < 6; ++c) {
      double mean = 0;
      for (size_t r = 0; r < 5; ++r) mean += v[r * 6 + c] / 5;
      for (size_t r = 0; r < 5; ++r) cols[c] += (v[r * 6 + c] - mean) * (v[r * 6 + c] - mean);
      cols[c] /= double(5 - correction);
    }
    require_close(var(x, {0}, correction), cols, 1e-13, 1e-15);
    std::vector<double> roots;
    for (double c : cols) roots.push_back(std::sqrt(c));
    require_close(mg::std(x, {-2}, correction, true), roots, 1e-13, 1e-15);
    CHECK(mg::std(x, {-2}, correction, true).shape() == Shape{1, 6});
  }
  // Every element, and one element with the correction: 0 / 0, NaN as in PyTorch.
  CHECK(var(x).shape() == Shape{});
  CHECK(std::isnan(var(tensor({2.0}, {1})).item<double>()));
  require_error([&] { var(x, {0}, -1); }, {"var", "correction", "-1"});
}

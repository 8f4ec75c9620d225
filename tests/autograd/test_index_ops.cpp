// Tests for autograd/index_ops.cpp: index_select, index_add, gather, scatter_add, cumsum, sort,
// argsort and topk against naive loops over (O, S, I) views; errors; gradients through them.
// gradchecks live in test_gradcheck_ops.cpp, PyTorch's values in tests/golden.
#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "core/cpu_devices_guard.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

Tensor int64s(const std::vector<int64_t>& values, const Shape& shape) {
  return tensor(values, shape, {.dtype = DType::Int64});
}

Tensor f64(const std::vector<double>& v, const Shape& shape) { return tensor(v, shape, {.dtype = DType::Float64}); }

// Sizes before, at and after dim d.
struct Around {
  int64_t outer = 1, size = 1, inner = 1;
};
Around around(const Shape& shape, int64_t d) {
  Around a;
  for (int64_t k = 0; k < int64_t(shape.size()); ++k) {
    if (k < d) a.outer *= shape[size_t(k)];
    if (k > d) a.inner *= shape[size_t(k)];
  }
  a.size = shape[size_t(d)];
  return a;
}

// Indices in [0, bound), with repeats.
std::vector<int64_t> indices_below(int64_t n, int64_t bound, uint64_t seed) {
  std::vector<double> r = pseudo_random(size_t(n), seed);
  std::vector<int64_t> out;
  for (double v : r) out.push_back(std::min<int64_t>(bound - 1, int64_t((v + 1.0) * 0.5 * double(bound))));
  return out;
}

}  // namespace

TEST_CASE("index_select and index_add match naive loops along every dim, duplicates in order", "[autograd][index]") {
  const Shape shape{3, 4, 5};
  const std::vector<double> x = pseudo_random(60, 1);
  for (int64_t d = 0; d < 3; ++d) {
    INFO("dim " << d);
    const Around a = around(shape, d);
    const std::vector<int64_t> idx = {a.size - 1, 0, 1, a.size - 1, 0, 0};
    const int64_t n = int64_t(idx.size());
    std::vector<double> want(size_t(a.outer * n * a.inner));
    for (int64_t o = 0; o < a.outer; ++o)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < a.inner; ++k)
          want[size_t((o * n + i) * a.inner + k)] = x[size_t((o * a.size + idx[size_t(i)]) * a.inner + k)];
    const Tensor selected = index_select(f64(x, shape), d, int64s(idx, {n}));
    Shape out_shape = shape;
    out_shape[size_t(d)] = n;
    CHECK(selected.shape() == out_shape);
    CHECK(values(selected) == want);

    // index_add of those rows back onto x: each destination gets its sources in increasing i.
    std::vector<double> added = x;
    for (int64_t o = 0; o < a.outer; ++o)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < a.inner; ++k)
          added[size_t((o * a.size + idx[size_t(i)]) * a.inner + k)] += want[size_t((o * n + i) * a.inner + k)];
    CHECK(values(index_add(f64(x, shape), d, int64s(idx, {n}), selected)) == added);
  }
  // Int64 tensors, and a non-contiguous input (the transpose of a (4, 3) tensor).
  CHECK(values(index_select(int64s({1, 2, 3, 4}, {4}), 0, int64s({3, 3, 0}, {3}))) == std::vector<double>{4, 4, 1});
  const Tensor xt = f64(pseudo_random(12, 2), {4, 3}).transpose(0, 1);
  CHECK(values(index_select(xt, 1, int64s({2, 0}, {2}))) ==
        values(index_select(contiguous(xt), 1, int64s({2, 0}, {2}))));
}

TEST_CASE("gather and scatter_add match naive loops along every dim", "[autograd][index]") {
  const Shape shape{3, 4, 5};
  const std::vector<double> x = pseudo_random(60, 3);
  for (int64_t d = 0; d < 3; ++d) {
    INFO("dim " << d);
    Shape index_shape = shape;
    index_shape[size_t(d)] = 7;  // longer than the dim: repeats certain
    const Around a = around(shape, d), ai = around(index_shape, d);
    const std::vector<int64_t> idx = indices_below(ai.outer * ai.size * ai.inner, a.size, 10 + uint64_t(d));
    std::vector<double> want(idx.size());
    for (int64_t o = 0; o < a.outer; ++o)
      for (int64_t i = 0; i < ai.size; ++i)
        for (int64_t k = 0; k < a.inner; ++k) {
          const size_t at = size_t((o * ai.size + i) * a.inner + k);
          want[at] = x[size_t((o * a.size + idx[at]) * a.inner + k)];
        }
    const Tensor index = int64s(idx, index_shape);
    const Tensor gathered = gather(f64(x, shape), d, index);
    CHECK(gathered.shape() == index_shape);
    CHECK(values(gathered) == want);

    const std::vector<double> src = pseudo_random(idx.size(), 20 + uint64_t(d));
    std::vector<double> added = x;
    for (int64_t o = 0; o < a.outer; ++o)
      for (int64_t i = 0; i < ai.size; ++i)
        for (int64_t k = 0; k < a.inner; ++k) {
          const size_t at = size_t((o * ai.size + i) * a.inner + k);
          added[size_t((o * a.size + idx[at]) * a.inner + k)] += src[at];
        }
    CHECK(values(scatter_add(f64(x, shape), d, index, f64(src, index_shape))) == added);
  }
}

TEST_CASE("gather and scatter_add address the input's leading part with a smaller index", "[autograd][index]") {
  // PyTorch's rule: outside dim the index may be smaller than the input (and, for scatter_add, the
  // source larger than the index); only the positions the index has are read or added.
  const Shape shape{3, 4, 5};
  const std::vector<double> x = pseudo_random(60, 4);
  const auto at = [](const Shape& s, int64_t i, int64_t j, int64_t k) { return size_t((i * s[1] + j) * s[2] + k); };
  for (int64_t d = 0; d < 3; ++d) {
    INFO("dim " << d);
    Shape index_shape{2, 3, 4};
    index_shape[size_t(d)] = 6;
    const Shape source_shape{index_shape[0] + 1, index_shape[1], index_shape[2] + 2};
    const int64_t n = numel_of(index_shape);
    const std::vector<int64_t> idx = indices_below(n, shape[size_t(d)], 30 + uint64_t(d));
    const std::vector<double> src = pseudo_random(size_t(numel_of(source_shape)), 40 + uint64_t(d));
    std::vector<double> gathered(static_cast<size_t>(n)), added = x;
    for (int64_t i = 0; i < index_shape[0]; ++i)
      for (int64_t j = 0; j < index_shape[1]; ++j)
        for (int64_t k = 0; k < index_shape[2]; ++k) {
          std::array<int64_t, 3> to{i, j, k};
          to[size_t(d)] = idx[at(index_shape, i, j, k)];
          gathered[at(index_shape, i, j, k)] = x[at(shape, to[0], to[1], to[2])];
          added[at(shape, to[0], to[1], to[2])] += src[at(source_shape, i, j, k)];
        }
    const Tensor index = int64s(idx, index_shape);
    CHECK(values(gather(f64(x, shape), d, index)) == gathered);
    CHECK(values(scatter_add(f64(x, shape), d, index, f64(src, source_shape))) == added);
    // Gradients: to the addressed positions only, checked against differences.
    CHECK(gradcheck([&](const TensorList& in) { return scatter_add(gather(in[0], d, index), d, index, in[1]); },
                    {leaf(shape, 50), leaf(source_shape, 51)}));
  }
}

TEST_CASE("index ops name bad indices, shapes, dtypes and devices", "[autograd][index]") {
  const Tensor x = zeros({3, 4});
  require_error([&] { index_select(x, 1, int64s({0, 4}, {2})); }, {"index_select", "index 4", "position 1", "[0, 4)"});
  require_error([&] { index_select(x, 0, int64s({-1}, {1})); }, {"index -1", "[0, 3)"});
  require_error([&] { index_select(x, 0, zeros({2})); }, {"index_select", "Int64", "Float32"});
  require_error([&] { index_select(x, 2, int64s({0}, {1})); }, {"index_select", "2"});
  require_error([&] { index_select(zeros({}), 0, int64s({0}, {1})); }, {"index_select", "0-d"});
  require_error([&] { index_add(x, 0, int64s({0}, {1}), zeros({2, 4})); }, {"index_add", "[2, 4]", "[1, 4]"});
  require_error([&] { index_add(x, 0, int64s({5}, {1}), zeros({1, 4})); }, {"index_add", "index 5", "[0, 3)"});
  require_error([&] { index_add(x, 0, int64s({0}, {1}), zeros({1, 4}, {.dtype = DType::Float64})); },
                {"index_add", "Float64", "Float32"});
  require_error([&] { gather(x, 1, int64s({0, 1}, {2})); }, {"gather", "rank"});
  require_error([&] { gather(x, 1, int64s({0, 1, 0, 1, 0, 1, 0, 1}, {4, 2})); },
                {"gather", "[4, 2]", "[3, 4]", "in dim 0", "only dim 1"});
  require_error([&] { gather(x, 0, int64s({0, 1, 2, 3}, {1, 4})); }, {"gather", "index 3", "position 3", "[0, 3)"});
  require_error([&] { scatter_add(x, 1, int64s({0, 1, 2, 0, 1, 2}, {3, 2}), zeros({3, 1})); },
                {"scatter_add", "[3, 2]", "larger than the source", "[3, 1]", "dim 1"});
  require_error([&] { scatter_add(x, 1, int64s({0, 1, 2}, {3, 1}), zeros({3})); }, {"scatter_add", "rank"});
  require_error([&] { scatter_add(x, 1, int64s({0, 1, 9}, {3, 1}), zeros({3, 1})); }, {"scatter_add", "index 9"});
  {
    CpuDevicesGuard devices(2);
    require_error([&] { index_select(zeros({2}, {.device = Device("cpu:1")}), 0, int64s({0}, {1})); },
                  {"index_select", "cpu:1", "cpu:0"});
  }
  require_error([&] { sort(zeros({2}, {.dtype = DType::Bool})); }, {"sort", "Bool"});
  require_error([&] { topk(zeros({2, 3}), 4); }, {"topk", "k = 4", "[0, 3]"});
  // An error leaves the input as it was (scatter_add and index_add work on a copy).
  const Tensor kept = f64({1, 2, 3}, {3});
  require_error([&] { scatter_add(kept, 0, int64s({0, 7}, {2}), f64({5, 5}, {2})); }, {"index 7"});
  CHECK(values(kept) == std::vector<double>{1, 2, 3});
}

TEST_CASE("cumsum matches a running sum along every dim, and Bool and Int64 sum in Int64", "[autograd][index]") {
  const Shape shape{2, 3, 4};
  const std::vector<double> x = pseudo_random(24, 5);
  for (int64_t d = 0; d < 3; ++d) {
    INFO("dim " << d);
    const Around a = around(shape, d);
    std::vector<double> want = x;
    for (int64_t o = 0; o < a.outer; ++o)
      for (int64_t i = 1; i < a.size; ++i)
        for (int64_t k = 0; k < a.inner; ++k)
          want[size_t((o * a.size + i) * a.inner + k)] += want[size_t((o * a.size + i - 1) * a.inner + k)];
    CHECK(values(cumsum(f64(x, shape), d)) == want);
    CHECK(values(cumsum(f64(x, shape), d - 3)) == want);
  }
  const Tensor flags = gt(tensor({1.0, 0.0, 1.0, 1.0}, {4}), 0.5);
  const Tensor counted = cumsum(flags, 0);
  CHECK(counted.dtype() == DType::Int64);
  CHECK(values(counted) == std::vector<double>{1, 1, 2, 3});
  CHECK(values(cumsum(int64s({5}, {}), 0)) == std::vector<double>{5});
  CHECK(cumsum(zeros({0, 3}), 0).shape() == Shape{0, 3});
  // The gradient of a running sum is the running sum from the end.
  Tensor leaf = f64({1, 2, 3, 4}, {4}).requires_grad_();
  mul(cumsum(leaf, 0), f64({1, 10, 100, 1000}, {4})).sum().backward();
  CHECK(values(leaf.grad()) == std::vector<double>{1111, 1110, 1100, 1000});
}

TEST_CASE("sort is stable, puts NaN above every number, and matches std::stable_sort", "[autograd][index]") {
  const double nan = std::nan("");
  const Tensor x = f64({3, 1, nan, 1, -0.0, 0.0, 3, nan}, {8});
  const ValuesIndices up = sort(x);
  CHECK(values(up.indices) == std::vector<double>{4, 5, 1, 3, 0, 6, 2, 7});
  const ValuesIndices down = sort(x, 0, true);
  CHECK(values(down.indices) == std::vector<double>{2, 7, 0, 6, 1, 3, 4, 5});
  CHECK(std::isnan(values(down.values)[0]));
  CHECK(values(argsort(x, 0, true)) == values(down.indices));

  // Rows of few distinct values (many ties) along each dim of a (4, 6, 5) tensor.
  const Shape shape{4, 6, 5};
  std::vector<double> v = pseudo_random(120, 6);
  for (double& e : v) e = std::round(e * 3);
  for (int64_t d = 0; d < 3; ++d) {
    for (bool descending : {false, true}) {
      INFO("dim " << d << (descending ? " descending" : " ascending"));
      const Around a = around(shape, d);
      std::vector<double> want_values(v.size()), want_indices(v.size());
      for (int64_t o = 0; o < a.outer; ++o)
        for (int64_t k = 0; k < a.inner; ++k) {
          auto at = [&](int64_t i) { return size_t((o * a.size + i) * a.inner + k); };
          std::vector<int64_t> order(size_t(a.size));
          std::iota(order.begin(), order.end(), 0);
          std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
            return descending ? v[at(p)] > v[at(q)] : v[at(p)] < v[at(q)];
          });
          for (int64_t i = 0; i < a.size; ++i) {
            want_values[at(i)] = v[at(order[size_t(i)])];
            want_indices[at(i)] = double(order[size_t(i)]);
          }
        }
      const ValuesIndices got = sort(f64(v, shape), d, descending);
      CHECK(values(got.values) == want_values);
      CHECK(values(got.indices) == want_indices);
    }
  }
}

TEST_CASE("topk gives the k largest or smallest, ties to the lower position, and gradients go to them", "[autograd][index]") {
  const Tensor x = f64({2, 5, 5, 1, 2, 0}, {2, 3});
  const ValuesIndices top = topk(x, 2);
  CHECK(values(top.values) == std::vector<double>{5, 5, 2, 1});
  CHECK(values(top.indices) == std::vector<double>{1, 2, 1, 0});
  const ValuesIndices bottom = topk(x, 1, 0, false);
  CHECK(values(bottom.values) == std::vector<double>{1, 2, 0});
  CHECK(values(bottom.indices) == std::vector<double>{1, 1, 1});
  CHECK(topk(x, 0).values.shape() == Shape{2, 0});

  Tensor leaf = f64({2, 5, 5, 1, 2, 0}, {2, 3}).requires_grad_();
  mul(topk(leaf, 2).values, f64({1, 2, 3, 4}, {2, 2})).sum().backward();
  CHECK(values(leaf.grad()) == std::vector<double>{0, 1, 2, 4, 3, 0});
  Tensor sorted_leaf = f64({3, 1, 2}, {3}).requires_grad_();
  mul(sort(sorted_leaf).values, f64({1, 2, 3}, {3})).sum().backward();
  CHECK(values(sorted_leaf.grad()) == std::vector<double>{3, 1, 2});
}

TEST_CASE("split by sizes gives views adding up to the input, and bad sizes are errors", "[autograd][index]") {
  const Tensor x = f64(pseudo_random(12, 7), {2, 6});
  const std::vector<Tensor> parts = split(x, std::vector<int64_t>{1, 0, 5}, 1);
  REQUIRE(parts.size() == 3);
  CHECK(parts[1].shape() == Shape{2, 0});
  CHECK(values(cat(parts, 1)) == values(x));
  require_error([&] { split(x, std::vector<int64_t>{1, 2}, 1); }, {"split", "add up to 3", "6"});
  require_error([&] { split(x, std::vector<int64_t>{7, -1}, 1); }, {"split", "-1"});
}

TEST_CASE("nonzero and where(cond) list the nonzero positions in row-major order", "[autograd][index]") {
  const Tensor x = f64({0, 1.5, 0, -2, 0, 0, 3, 0, 0, 0, 0, 4}, {2, 3, 2});
  const Tensor positions = nonzero(x);
  CHECK(positions.dtype() == DType::Int64);
  CHECK(positions.shape() == Shape{4, 3});
  CHECK(values(positions) == std::vector<double>{0, 0, 1, 0, 1, 1, 1, 0, 0, 1, 2, 1});
  const std::vector<Tensor> per_dim = where(gt(x, 0.0));
  REQUIRE(per_dim.size() == 3);
  CHECK(values(per_dim[0]) == std::vector<double>{0, 1, 1});
  CHECK(values(per_dim[2]) == std::vector<double>{1, 0, 1});
  CHECK(nonzero(zeros({4})).shape() == Shape{0, 1});
  CHECK(nonzero(zeros({0, 3})).shape() == Shape{0, 2});
  CHECK(nonzero(ones({})).shape() == Shape{1, 0});
}

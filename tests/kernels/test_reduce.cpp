// Row reductions and argmax (kernels/cpu/reduce.cpp) against naive loops; softmax rows
// (kernels/cpu/softmax.cpp) against the textbook formula in float64.
#include <cmath>
#include <limits>

#include "multigrad/kernels/kernels.h"
#include "kernels/kernel_test_util.h"

using namespace mg;
using namespace mg::test;
namespace k = mg::kernels;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <class T>
std::vector<T> reduce(k::ReduceOp op, const Tensor& in) {
  Tensor out = Tensor::empty({in.size(0)}, {.dtype = in.dtype()});
  k::reduce_rows(op, in, out);
  return read<T>(out);
}

std::vector<int64_t> argmax(const Tensor& in) {
  Tensor out = Tensor::empty({in.size(0)}, {.dtype = DType::Int64});
  k::argmax_rows(in, out);
  return read<int64_t>(out);
}

template <class T>
std::vector<double> softmax_ref(const std::vector<T>& x, int64_t rows, int64_t cols, bool log) {
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, double(x[size_t(r * cols + c)]));
    for (int64_t c = 0; c < cols; ++c) s += std::exp(double(x[size_t(r * cols + c)]) - m);
    for (int64_t c = 0; c < cols; ++c) {
      const double z = double(x[size_t(r * cols + c)]) - m;
      out.push_back(log ? z - std::log(s) : std::exp(z) / s);
    }
  }
  return out;
}

template <class T>
std::vector<double> softmax(const std::vector<T>& x, int64_t rows, int64_t cols, bool log) {
  Tensor out = Tensor::empty({rows, cols}, {.dtype = dtype_v<T>});
  k::softmax_rows(from_vector<T>({rows, cols}, x), out, log);
  return to_doubles(read<T>(out));
}

}  // namespace

TEST_CASE("row sums and means match a float64 loop", "[kernels]") {
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {7, 33}, {1000, 3}, {3, 20000}, {50, 1001}}) {
    std::vector<float> x = random_values<float>(size_t(rows * cols), uint64_t(rows + cols));
    Tensor in = from_vector<float>({rows, cols}, x);
    std::vector<double> sums, means;
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t c = 0; c < cols; ++c) s += double(x[size_t(r * cols + c)]);
      sums.push_back(s);
      means.push_back(s / double(cols));
    }
    INFO("rows=" << rows << " cols=" << cols);
    // float64 accumulation: only the final rounding to float32 remains.
    require_close(to_doubles(reduce<float>(k::ReduceOp::Sum, in)), sums, 1e-6, 1e-6);
    require_close(to_doubles(reduce<float>(k::ReduceOp::Mean, in)), means, 1e-6, 1e-7);
  }
}

TEST_CASE("float32 sums accumulate in float64", "[kernels]") {
  // 1 followed by 100k copies of 2^-24: a float32 running sum would stay at 1.
  const int64_t n = 100001;
  std::vector<float> x(size_t(n), 1.0f / 16777216);
  x[0] = 1;
  REQUIRE(reduce<float>(k::ReduceOp::Sum, from_vector<float>({1, n}, x))[0] ==
          float(1.0 + 100000.0 / 16777216));
}

TEST_CASE("float64 and int64 row sums", "[kernels]") {
  std::vector<double> d = random_values<double>(5 * 9001, 2);
  std::vector<double> want(5, 0.0);
  for (size_t i = 0; i < d.size(); ++i) want[i / 9001] += d[i];
  require_close(reduce<double>(k::ReduceOp::Sum, from_vector<double>({5, 9001}, d)), want, 1e-12, 1e-12);
  std::vector<int64_t> x = random_values<int64_t>(4 * 1000, 3, 1e9);
  std::vector<int64_t> isum(4, 0);
  for (size_t i = 0; i < x.size(); ++i) isum[i / 1000] += x[i];
  REQUIRE(reduce<int64_t>(k::ReduceOp::Sum, from_vector<int64_t>({4, 1000}, x)) == isum);
}

TEST_CASE("a long row sums to the same bits on the block-parallel and row paths", "[kernels]") {
  // One row splits its blocks among threads; 64 copies of it go row by row. The fixed block
  // order makes both agree exactly.
  const int64_t cols = 70001;
  std::vector<float> row = random_values<float>(size_t(cols), 4, 100.0);
  std::vector<float> many;
  for (int r = 0; r < 64; ++r) many.insert(many.end(), row.begin(), row.end());
  const float one = reduce<float>(k::ReduceOp::Sum, from_vector<float>({1, cols}, row))[0];
  for (float v : reduce<float>(k::ReduceOp::Sum, from_vector<float>({64, cols}, many))) REQUIRE(v == one);
}

TEST_CASE("row max and min, NaN propagating", "[kernels]") {
  std::vector<double> x = random_values<double>(6 * 20011, 5);
  x[3 * 20011 + 17] = kNaN;
  x[5 * 20011 + 20010] = kNaN;
  Tensor in = from_vector<double>({6, 20011}, x);
  const std::vector<double> mx = reduce<double>(k::ReduceOp::Max, in), mn = reduce<double>(k::ReduceOp::Min, in);
  for (int64_t r = 0; r < 6; ++r) {
    double want_max = -INFINITY, want_min = INFINITY;
    bool nan = false;
    for (int64_t c = 0; c < 20011; ++c) {
      const double v = x[size_t(r * 20011 + c)];
      nan = nan || std::isnan(v);
      want_max = std::max(want_max, v);
      want_min = std::min(want_min, v);
    }
    INFO("row " << r);
    if (nan) {
      REQUIRE(std::isnan(mx[size_t(r)]));
      REQUIRE(std::isnan(mn[size_t(r)]));
    } else {
      REQUIRE(mx[size_t(r)] == want_max);
      REQUIRE(mn[size_t(r)] == want_min);
    }
  }
  Tensor ints = from_vector<int64_t>({2, 3}, {4, -9, 4, 0, 0, -1});
  REQUIRE(reduce<int64_t>(k::ReduceOp::Max, ints) == std::vector<int64_t>{4, 0});
  REQUIRE(reduce<int64_t>(k::ReduceOp::Min, ints) == std::vector<int64_t>{-9, -1});
}

TEST_CASE("empty rows: sum 0, mean NaN, max and min are errors", "[kernels]") {
  Tensor in = Tensor::empty({3, 0});
  REQUIRE(reduce<float>(k::ReduceOp::Sum, in) == std::vector<float>{0, 0, 0});
  for (float v : reduce<float>(k::ReduceOp::Mean, in)) REQUIRE(std::isnan(v));
  Tensor out = Tensor::empty({3});
  require_error([&] { k::reduce_rows(k::ReduceOp::Max, in, out); }, {"max", "empty", "[3, 0]"});
  require_error([&] { k::reduce_rows(k::ReduceOp::Min, in, out); }, {"min", "empty"});
  Tensor idx = Tensor::empty({3}, {.dtype = DType::Int64});
  require_error([&] { k::argmax_rows(in, idx); }, {"argmax", "empty"});
  // No rows at all: nothing to do, even for max.
  Tensor none = Tensor::empty({0, 4});
  k::reduce_rows(k::ReduceOp::Max, none, Tensor::empty({0}));
}

TEST_CASE("reductions check layout and dtype", "[kernels]") {
  Tensor strided = padded_view(4, 5, DType::Float32);
  require_error([&] { k::reduce_rows(k::ReduceOp::Sum, strided, Tensor::empty({4})); }, {"sum", "contiguous"});
  Tensor in = Tensor::empty({4, 5});
  require_error([&] { k::reduce_rows(k::ReduceOp::Sum, in, Tensor::empty({5})); }, {"sum", "4"});
  Tensor ints = Tensor::empty({4, 5}, {.dtype = DType::Int64});
  require_error([&] { k::reduce_rows(k::ReduceOp::Mean, ints, Tensor::empty({4}, {.dtype = DType::Int64})); },
                {"mean", "Int64"});
}

TEST_CASE("argmax returns the first maximum, and the first NaN beats everything", "[kernels]") {
  Tensor in = from_vector<float>({4, 5}, {1, 3, 3, 0, 2,                                  //
                                          float(kNaN), 9, 9, 9, 9,                        //
                                          -1, -5, 7, float(kNaN), float(kNaN),            //
                                          -2, -2, -2, -2, -2});
  REQUIRE(argmax(in) == std::vector<int64_t>{1, 0, 3, 0});
  REQUIRE(argmax(from_vector<int64_t>({2, 3}, {5, 7, 7, -1, -3, -1})) == std::vector<int64_t>{1, 0});
}

TEST_CASE("argmax over long rows and many rows", "[kernels]") {
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 50001}, {2, 30000}, {500, 77}}) {
    std::vector<double> x = random_values<double>(size_t(rows * cols), uint64_t(cols));
    for (int64_t r = 0; r < rows; ++r) {  // a tie late in the row: the earlier one wins
      x[size_t(r * cols + cols / 3)] = 5;
      x[size_t(r * cols + cols - 1)] = 5;
    }
    const std::vector<int64_t> got = argmax(from_vector<double>({rows, cols}, x));
    for (int64_t r = 0; r < rows; ++r) REQUIRE(got[size_t(r)] == cols / 3);
  }
  std::vector<float> x = random_values<float>(40000, 9);
  x[33333] = float(kNaN);
  x[39999] = float(kNaN);
  REQUIRE(argmax(from_vector<float>({1, 40000}, x)) == std::vector<int64_t>{33333});
}

TEST_CASE("softmax rows match the formula and sum to 1", "[kernels]") {
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {7, 33}, {300, 257}, {2, 5000}}) {
    std::vector<float> x = random_values<float>(size_t(rows * cols), uint64_t(rows * cols), 8.0);
    const std::vector<double> got = softmax(x, rows, cols, false);
    require_close(got, softmax_ref(x, rows, cols, false), 1e-5, 1e-7);
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t c = 0; c < cols; ++c) s += got[size_t(r * cols + c)];
      REQUIRE(std::fabs(s - 1) < 1e-5);
    }
  }
}

TEST_CASE("log_softmax matches log of softmax", "[kernels]") {
  std::vector<double> x = random_values<double>(41 * 129, 21, 10.0);
  const std::vector<double> got = softmax(x, 41, 129, true);
  require_close(got, softmax_ref(x, 41, 129, true), 1e-12, 1e-12);
  const std::vector<double> probs = softmax(x, 41, 129, false);
  for (size_t i = 0; i < got.size(); ++i) REQUIRE(std::fabs(got[i] - std::log(probs[i])) < 1e-12);
}

TEST_CASE("softmax of large inputs does not overflow", "[kernels]") {
  const std::vector<float> x = {1000, -1000, 1000, 1000, 1000, 999};
  const std::vector<double> p = softmax(x, 3, 2, false);
  require_close(p, {1, 0, 0.5, 0.5, 1 / (1 + std::exp(-1.0)), 1 / (1 + std::exp(1.0))}, 1e-6, 1e-7);
  const std::vector<double> lp = softmax(x, 3, 2, true);
  require_close(lp, {0, -2000, -std::log(2.0), -std::log(2.0), -std::log1p(std::exp(-1.0)),
                     -1 - std::log1p(std::exp(-1.0))},
                1e-6, 1e-6);
}

TEST_CASE("float32 softmax rows of every length up to 40: -inf gives exactly 0, NaN spreads", "[kernels]") {
  // Float rows run exp_poly in 16-lane vector loops (kernels/cpu/exp_rows.h): rows shorter than,
  // equal to and longer than one pass, with -inf (a masked logit) and far-below-max entries.
  for (int64_t cols = 1; cols <= 40; ++cols) {
    INFO("cols " << cols);
    std::vector<float> x = random_values<float>(size_t(3 * cols), uint64_t(cols), 6.0);
    for (int64_t c = 1; c < cols; c += 3) x[size_t(c)] = -INFINITY;  // row 0: masked entries
    x[size_t(cols)] = -150.0f;                                        // row 1: e^-150 and below
    x[size_t(2 * cols + cols / 2)] = NAN;                             // row 2: NaN
    for (bool log : {false, true}) {
      const std::vector<double> got = softmax(x, 3, cols, log);
      const std::vector<double> want = softmax_ref(x, 3, cols, log);
      for (int64_t c = 0; c < 2 * cols; ++c) {
        if (std::isinf(want[size_t(c)])) {
          REQUIRE(got[size_t(c)] == want[size_t(c)]);  // log: -inf
        } else {
          REQUIRE(std::fabs(got[size_t(c)] - want[size_t(c)]) <= 1e-6 + 1e-5 * std::fabs(want[size_t(c)]));
        }
        if (!log && std::isinf(x[size_t(c)])) REQUIRE(got[size_t(c)] == 0.0);
      }
      for (int64_t c = 2 * cols; c < 3 * cols; ++c) REQUIRE(std::isnan(got[size_t(c)]));
    }
  }
}

TEST_CASE("softmax: a NaN makes its row NaN, in place works, integers are rejected", "[kernels]") {
  Tensor t = from_vector<double>({2, 3}, {1, kNaN, 2, 0, 0, 0});
  k::softmax_rows(t, t, false);
  const std::vector<double> got = read<double>(t);
  for (int c = 0; c < 3; ++c) REQUIRE(std::isnan(got[size_t(c)]));
  for (int c = 3; c < 6; ++c) REQUIRE(std::fabs(got[size_t(c)] - 1.0 / 3) < 1e-15);
  Tensor ints = Tensor::empty({2, 2}, {.dtype = DType::Int64});
  require_error([&] { k::softmax_rows(ints, ints, true); }, {"log_softmax", "Int64"});
}

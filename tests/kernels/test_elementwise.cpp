// Elementwise kernels (kernels/cpu/elementwise.cpp through kernels/kernels.h) against naive
// loops written here: every dtype, odd sizes (past the parallel grain too), strided and
// broadcast operands, strided outputs, empty tensors.
#include <cmath>
#include <cstring>
#include <limits>

#include "multigrad/kernels/cpu/cpu_kernels.h"
#include "multigrad/kernels/kernels.h"
#include "multigrad/kernels/tensor_iterator.h"
#include "kernels/kernel_test_util.h"

using namespace mg;
using namespace mg::test;
namespace k = mg::kernels;

namespace {

const std::vector<int64_t> kSizes = {1, 7, 33, 1000, 40001};  // 40001 crosses the parallel grain
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double gelu_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

// gelu'(x) in the tanh form, differentiated as written: 0.5 (1 + t) + 0.5 x (1 - t^2) u'(x).
double gelu_derivative_ref(double x) {
  const double b = std::sqrt(2 / M_PI), k = 0.044715, t = std::tanh(b * (x + k * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * b * (1 + 3 * k * x * x);
}

double unary_ref(k::UnaryOp op, double x) {
  switch (op) {
    case k::UnaryOp::Neg: return -x;
    case k::UnaryOp::Exp: return std::exp(x);
    case k::UnaryOp::Log: return std::log(x);
    case k::UnaryOp::Sqrt: return std::sqrt(x);
    case k::UnaryOp::Abs: return std::fabs(x);
    case k::UnaryOp::Relu: return x < 0 ? 0 : x;
    case k::UnaryOp::Gelu: return gelu_ref(x);
    case k::UnaryOp::Sigmoid: return 1 / (1 + std::exp(-x));
    case k::UnaryOp::Tanh: return std::tanh(x);
    case k::UnaryOp::Sin: return std::sin(x);
    case k::UnaryOp::Cos: return std::cos(x);
    case k::UnaryOp::Erf: return std::erf(x);
    case k::UnaryOp::Expm1: return std::expm1(x);
    case k::UnaryOp::Log1p: return std::log1p(x);
    case k::UnaryOp::RoundBFloat16: case k::UnaryOp::RoundFloat16: break;  // their own test below
  }
  return kNaN;
}

const std::vector<k::UnaryOp> kAllUnary = {
    k::UnaryOp::Neg,  k::UnaryOp::Exp,  k::UnaryOp::Log, k::UnaryOp::Sqrt, k::UnaryOp::Abs,   k::UnaryOp::Relu,
    k::UnaryOp::Gelu, k::UnaryOp::Sigmoid, k::UnaryOp::Tanh, k::UnaryOp::Sin, k::UnaryOp::Cos, k::UnaryOp::Erf,
    k::UnaryOp::Expm1, k::UnaryOp::Log1p};

bool needs_positive(k::UnaryOp op) {
  return op == k::UnaryOp::Log || op == k::UnaryOp::Sqrt || op == k::UnaryOp::Log1p;
}

template <class T>
void check_unary_contiguous(double rtol) {
  for (k::UnaryOp op : kAllUnary) {
    for (int64_t n : kSizes) {
      std::vector<T> x = random_values<T>(size_t(n), uint64_t(n), 4.0);
      if (needs_positive(op))
        for (T& v : x) v = std::fabs(v) + T(0.01);
      Tensor in = from_vector<T>({n}, x);
      Tensor out = Tensor::empty({n}, {.dtype = dtype_v<T>});
      k::unary(op, in, out);
      std::vector<double> want;
      for (T v : x) want.push_back(unary_ref(op, double(v)));
      INFO(k::op_name(op) << " n=" << n);
      require_close(to_doubles(read<T>(out)), want, rtol, 1e-6);
    }
  }
}

double binary_ref(k::BinaryOp op, double a, double b) {
  switch (op) {
    case k::BinaryOp::Add: return a + b;
    case k::BinaryOp::Sub: return a - b;
    case k::BinaryOp::Mul: return a * b;
    case k::BinaryOp::Div: return a / b;
    case k::BinaryOp::Pow: return std::pow(a, b);
    case k::BinaryOp::Maximum: return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b);
    case k::BinaryOp::Minimum: return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b);
    case k::BinaryOp::ReluBackward: return b > 0 ? a : 0;
    case k::BinaryOp::GeluBackward: return a * gelu_derivative_ref(b);
    case k::BinaryOp::Eq: return a == b;
    case k::BinaryOp::Ne: return a != b;
    case k::BinaryOp::Lt: return a < b;
    case k::BinaryOp::Le: return a <= b;
    case k::BinaryOp::Gt: return a > b;
    case k::BinaryOp::Ge: return a >= b;
  }
  return kNaN;
}

const std::vector<k::BinaryOp> kArithmetic = {k::BinaryOp::Add, k::BinaryOp::Sub,     k::BinaryOp::Mul,
                                              k::BinaryOp::Div, k::BinaryOp::Pow,     k::BinaryOp::Maximum,
                                              k::BinaryOp::Minimum};
const std::vector<k::BinaryOp> kComparisons = {k::BinaryOp::Eq, k::BinaryOp::Ne, k::BinaryOp::Lt,
                                               k::BinaryOp::Le, k::BinaryOp::Gt, k::BinaryOp::Ge};

// Positive bases keep pow real; a few repeated values make comparisons hit equality.
template <class T>
std::vector<T> binary_operand(size_t n, uint64_t seed) {
  std::vector<T> v = random_values<T>(n, seed, 3.0);
  for (size_t i = 0; i < n; ++i) v[i] = std::fabs(v[i]) + T(i % 5 == 0 ? 1 : 0.5);
  return v;
}

template <class T>
void check_binary_contiguous(double rtol) {
  for (k::BinaryOp op : kArithmetic) {
    for (int64_t n : kSizes) {
      std::vector<T> a = binary_operand<T>(size_t(n), 1), b = binary_operand<T>(size_t(n), 2);
      Tensor out = Tensor::empty({n}, {.dtype = dtype_v<T>});
      k::binary(op, from_vector<T>({n}, a), from_vector<T>({n}, b), out);
      std::vector<double> want;
      for (int64_t i = 0; i < n; ++i) want.push_back(binary_ref(op, double(a[size_t(i)]), double(b[size_t(i)])));
      INFO(k::op_name(op) << " n=" << n);
      require_close(to_doubles(read<T>(out)), want, rtol, 1e-6);
    }
  }
}

}  // namespace

TEST_CASE("unary float32 ops match libm on contiguous tensors", "[kernels]") {
  check_unary_contiguous<float>(1e-5);
}

TEST_CASE("unary float64 ops match libm on contiguous tensors", "[kernels]") {
  check_unary_contiguous<double>(1e-12);
}

TEST_CASE("unary int64 neg, abs and relu", "[kernels]") {
  for (k::UnaryOp op : {k::UnaryOp::Neg, k::UnaryOp::Abs, k::UnaryOp::Relu}) {
    std::vector<int64_t> x = random_values<int64_t>(40001, 3, 1000.0);
    Tensor out = Tensor::empty({40001}, {.dtype = DType::Int64});
    k::unary(op, from_vector<int64_t>({40001}, x), out);
    const std::vector<int64_t> got = read<int64_t>(out);
    for (size_t i = 0; i < x.size(); ++i) REQUIRE(got[i] == int64_t(unary_ref(op, double(x[i]))));
  }
}

TEST_CASE("float-only unary ops reject Int64 naming op and dtype", "[kernels]") {
  Tensor in = from_vector<int64_t>({2}, {1, 2});
  Tensor out = Tensor::empty({2}, {.dtype = DType::Int64});
  require_error([&] { k::unary(k::UnaryOp::Exp, in, out); }, {"exp", "Int64"});
  require_error([&] { k::unary(k::UnaryOp::Gelu, in, out); }, {"gelu", "Int64"});
  Tensor bf = Tensor::empty({2}, {.dtype = DType::BFloat16});
  require_error([&] { k::unary(k::UnaryOp::Neg, bf, bf); }, {"neg", "BFloat16"});
}

TEST_CASE("unary reads a transposed input and writes a padded strided output", "[kernels]") {
  const int64_t rows = 37, cols = 1111;  // 41k elements: the parallel strided path
  std::vector<float> x = random_values<float>(size_t(rows * cols), 4, 2.0);
  Tensor in = transposed(x, rows, cols);
  Tensor out = padded_view(rows, cols, DType::Float32);
  k::unary(k::UnaryOp::Tanh, in, out);
  std::vector<double> want;
  for (float v : x) want.push_back(std::tanh(double(v)));
  require_close(to_doubles(read<float>(out)), want);
  // The padding between rows is untouched: offsets ignored would have written there.
  REQUIRE(read<float>(in) == x);
}

TEST_CASE("relu, abs and neg keep NaN", "[kernels]") {
  Tensor in = from_vector<double>({4}, {kNaN, -1.0, 2.0, -0.0});
  for (k::UnaryOp op : {k::UnaryOp::Relu, k::UnaryOp::Abs, k::UnaryOp::Neg}) {
    Tensor out = Tensor::empty({4}, {.dtype = DType::Float64});
    k::unary(op, in, out);
    const std::vector<double> got = read<double>(out);
    REQUIRE(std::isnan(got[0]));
    REQUIRE(got[1] == unary_ref(op, -1.0));
    REQUIRE(got[2] == unary_ref(op, 2.0));
  }
}

TEST_CASE("unary runs in place when out is the input", "[kernels]") {
  std::vector<float> x = random_values<float>(50000, 5, 3.0);
  Tensor t = from_vector<float>({50000}, x);
  k::unary(k::UnaryOp::Relu, t, t);
  const std::vector<float> got = read<float>(t);
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(got[i] == std::max(x[i], 0.0f));
}

TEST_CASE("binary float32 arithmetic on contiguous tensors", "[kernels]") {
  check_binary_contiguous<float>(1e-5);
}

TEST_CASE("binary float64 arithmetic on contiguous tensors", "[kernels]") {
  check_binary_contiguous<double>(1e-12);
}

TEST_CASE("relu_backward passes the gradient where the output is positive", "[kernels]") {
  // Signed outputs past the parallel grain, and the edge cases: 0, -0, NaN pass nothing.
  const int64_t n = 40001;
  std::vector<double> g = random_values<double>(size_t(n), 8, 3.0), y = random_values<double>(size_t(n), 9, 3.0);
  y[0] = 0.0, y[1] = -0.0, y[2] = kNaN, y[3] = 1e-300;
  Tensor out = Tensor::empty({n}, {.dtype = DType::Float64});
  k::binary(k::BinaryOp::ReluBackward, from_vector<double>({n}, g), from_vector<double>({n}, y), out);
  const std::vector<double> got = read<double>(out);
  for (size_t i = 0; i < g.size(); ++i) REQUIRE(got[i] == (y[i] > 0 ? g[i] : 0.0));
  REQUIRE(got[3] == g[3]);
  Tensor ints = Tensor::empty({3}, {.dtype = DType::Int64});
  k::binary(k::BinaryOp::ReluBackward, from_vector<int64_t>({3}, {4, 5, 6}), from_vector<int64_t>({3}, {-1, 0, 2}),
            ints);
  REQUIRE(read<int64_t>(ints) == std::vector<int64_t>{0, 0, 6});
}

TEST_CASE("gelu_backward is g gelu'(x) in both float types, saturating far out, integers are refused", "[kernels]") {
  const int64_t n = 40001;
  std::vector<double> g = random_values<double>(size_t(n), 10, 3.0), x = random_values<double>(size_t(n), 11, 6.0);
  x[0] = 0.0, x[1] = -30.0, x[2] = 30.0, x[3] = -200.0, x[4] = 200.0;  // past exp_poly's clamp both ways
  // Each side rounds about ten times on operands no larger than |g| (s + |2 x s (1 - s) u'| + 1)
  // (the reference's 1 + tanh(u) cancels for very negative x, the kernel's exp_poly is within
  // 2 ulp): 64 units in the last place of that scale bound both.
  auto check = [&](const std::vector<double>& got, const std::vector<double>& gs, const std::vector<double>& xs,
                   double unit) {
    for (size_t i = 0; i < gs.size(); ++i) {
      const double xi = xs[i], b = std::sqrt(2 / M_PI), s = 0.5 * (1 + std::tanh(b * (xi + 0.044715 * xi * xi * xi)));
      const double second = 2 * xi * s * (1 - s) * b * (1 + 3 * 0.044715 * xi * xi);
      INFO("x = " << xi);
      REQUIRE(std::fabs(got[i] - gs[i] * gelu_derivative_ref(xi)) <= 64 * unit * std::fabs(gs[i]) * (s + std::fabs(second) + 1));
    }
  };
  Tensor out64 = Tensor::empty({n}, {.dtype = DType::Float64});
  k::binary(k::BinaryOp::GeluBackward, from_vector<double>({n}, g), from_vector<double>({n}, x), out64);
  check(read<double>(out64), g, x, 0x1p-53);
  const std::vector<float> gf(g.begin(), g.end()), xf(x.begin(), x.end());
  Tensor out32 = Tensor::empty({n}, {.dtype = DType::Float32});
  k::binary(k::BinaryOp::GeluBackward, from_vector<float>({n}, gf), from_vector<float>({n}, xf), out32);
  const std::vector<float> got32 = read<float>(out32);
  check(std::vector<double>(got32.begin(), got32.end()), std::vector<double>(gf.begin(), gf.end()),
        std::vector<double>(xf.begin(), xf.end()), 0x1p-24);
  CHECK(std::fabs(got32[3]) < 1e-30f);  // gelu is flat far left (e^(-2u) clamped at e^88.7: not exactly 0)
  CHECK(got32[4] == gf[4]);             // and the identity far right
  Tensor ints = Tensor::empty({3}, {.dtype = DType::Int64});
  require_error([&] {
    k::binary(k::BinaryOp::GeluBackward, from_vector<int64_t>({3}, {1, 2, 3}), from_vector<int64_t>({3}, {1, 2, 3}), ints);
  }, {"gelu_backward", "Int64"});
}

TEST_CASE("binary int64 arithmetic: truncating division, zero divisor, integer pow", "[kernels]") {
  Tensor a = from_vector<int64_t>({8}, {7, -7, 7, 0, 3, -2, 5, 1});
  Tensor b = from_vector<int64_t>({8}, {2, 2, 0, 5, 4, 3, -1, -3});
  Tensor out = Tensor::empty({8}, {.dtype = DType::Int64});
  k::binary(k::BinaryOp::Div, a, b, out);
  REQUIRE(read<int64_t>(out) == std::vector<int64_t>{3, -3, 0, 0, 0, 0, -5, 0});
  k::binary(k::BinaryOp::Pow, a, b, out);
  REQUIRE(read<int64_t>(out) == std::vector<int64_t>{49, 49, 1, 0, 81, -8, 0, 1});
  k::binary(k::BinaryOp::Sub, a, b, out);
  REQUIRE(read<int64_t>(out) == std::vector<int64_t>{5, -9, 7, -5, -1, -5, 6, 4});
  k::binary(k::BinaryOp::Maximum, a, b, out);
  REQUIRE(read<int64_t>(out) == std::vector<int64_t>{7, 2, 7, 5, 4, 3, 5, 1});
  // Past the parallel grain.
  std::vector<int64_t> x = random_values<int64_t>(40001, 6, 1e6), y = random_values<int64_t>(40001, 7, 1e6);
  Tensor big = Tensor::empty({40001}, {.dtype = DType::Int64});
  k::binary(k::BinaryOp::Mul, from_vector<int64_t>({40001}, x), from_vector<int64_t>({40001}, y), big);
  const std::vector<int64_t> got = read<int64_t>(big);
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(got[i] == x[i] * y[i]);
}

TEST_CASE("binary with stride-0 broadcast inputs", "[kernels]") {
  // a: a row (1, 513) expanded over 97 rows; b: a column (97, 1) expanded over 513 columns.
  const int64_t rows = 97, cols = 513;
  std::vector<float> row = random_values<float>(size_t(cols), 8), col = random_values<float>(size_t(rows), 9);
  Tensor a = from_vector<float>({1, cols}, row).as_strided({rows, cols}, {0, 1}, 0);
  Tensor b = from_vector<float>({rows, 1}, col).as_strided({rows, cols}, {1, 0}, 0);
  Tensor out = Tensor::empty({rows, cols}, {.dtype = DType::Float32});
  k::binary(k::BinaryOp::Sub, a, b, out);
  const std::vector<float> got = read<float>(out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) REQUIRE(got[size_t(r * cols + c)] == row[size_t(c)] - col[size_t(r)]);
}

TEST_CASE("binary writes into a strided slice and leaves the rest alone", "[kernels]") {
  const int64_t rows = 211, cols = 199;  // 42k: parallel chunks start mid-row
  Tensor base = from_vector<double>({rows, cols + 3}, std::vector<double>(size_t(rows * (cols + 3)), -5.0));
  Tensor out = base.as_strided({rows, cols}, {cols + 3, 1}, 2);
  std::vector<double> x = random_values<double>(size_t(rows * cols), 10), y = random_values<double>(size_t(rows * cols), 11);
  k::binary(k::BinaryOp::Mul, transposed(x, rows, cols), from_vector<double>({rows, cols}, y), out);
  const std::vector<double> got = read<double>(out);
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(got[i] == x[i] * y[i]);
  const std::vector<double> all = read<double>(base);
  for (int64_t r = 0; r < rows; ++r) {
    REQUIRE(all[size_t(r * (cols + 3))] == -5.0);
    REQUIRE(all[size_t(r * (cols + 3) + 1)] == -5.0);
  }
}

TEST_CASE("comparisons write Bool, NaN compares unequal", "[kernels]") {
  for (k::BinaryOp op : kComparisons) {
    std::vector<double> a = {1, 2, 3, kNaN, 5, -1}, b = {1, 3, 2, 1, kNaN, -1};
    Tensor out = Tensor::empty({6}, {.dtype = DType::Bool});
    k::binary(op, from_vector<double>({6}, a), from_vector<double>({6}, b), out);
    const std::vector<bool> got = read<bool>(out);
    for (size_t i = 0; i < a.size(); ++i) {
      INFO(k::op_name(op) << " index " << i);
      REQUIRE(got[i] == bool(binary_ref(op, a[i], b[i])));
    }
  }
  // Int64 and a big float32 comparison through the parallel path.
  std::vector<float> x = random_values<float>(40001, 12), y = random_values<float>(40001, 13);
  Tensor out = Tensor::empty({40001}, {.dtype = DType::Bool});
  k::binary(k::BinaryOp::Lt, from_vector<float>({40001}, x), from_vector<float>({40001}, y), out);
  const std::vector<bool> lt = read<bool>(out);
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(lt[i] == (x[i] < y[i]));
  Tensor ieq = Tensor::empty({3}, {.dtype = DType::Bool});
  k::binary(k::BinaryOp::Eq, from_vector<int64_t>({3}, {1, 2, 3}), from_vector<int64_t>({3}, {1, 0, 3}), ieq);
  REQUIRE(read<bool>(ieq) == std::vector<bool>{true, false, true});
}

TEST_CASE("comparison into a non-Bool output is an error naming both dtypes", "[kernels]") {
  Tensor a = from_vector<float>({2}, {1, 2});
  Tensor out = Tensor::empty({2}, {.dtype = DType::Float32});
  require_error([&] { k::binary(k::BinaryOp::Lt, a, a, out); }, {"lt", "Float32", "Bool"});
  Tensor b = from_vector<double>({2}, {1, 2});
  require_error([&] { k::binary(k::BinaryOp::Add, a, b, out); }, {"add", "Float32", "Float64"});
}

TEST_CASE("maximum and minimum propagate NaN from either side", "[kernels]") {
  Tensor a = from_vector<float>({4}, {float(kNaN), 1, 2, -1});
  Tensor b = from_vector<float>({4}, {1, float(kNaN), 3, -2});
  Tensor out = Tensor::empty({4}, {.dtype = DType::Float32});
  k::binary(k::BinaryOp::Maximum, a, b, out);
  std::vector<float> got = read<float>(out);
  REQUIRE((std::isnan(got[0]) && std::isnan(got[1]) && got[2] == 3 && got[3] == -1));
  k::binary(k::BinaryOp::Minimum, a, b, out);
  got = read<float>(out);
  REQUIRE((std::isnan(got[0]) && std::isnan(got[1]) && got[2] == 2 && got[3] == -2));
}

TEST_CASE("binary_scalar in both operand orders", "[kernels]") {
  std::vector<double> x = random_values<double>(40001, 14, 3.0);
  for (double& v : x) v = std::fabs(v) + 0.5;
  Tensor in = from_vector<double>({40001}, x);
  for (k::BinaryOp op : kArithmetic) {
    for (bool scalar_first : {false, true}) {
      Tensor out = Tensor::empty({40001}, {.dtype = DType::Float64});
      k::binary_scalar(op, in, 1.75, scalar_first, out);
      std::vector<double> want;
      for (double v : x) want.push_back(scalar_first ? binary_ref(op, 1.75, v) : binary_ref(op, v, 1.75));
      INFO(k::op_name(op) << " scalar_first=" << scalar_first);
      require_close(to_doubles(read<double>(out)), want, 1e-12, 0);
    }
  }
}

TEST_CASE("binary_scalar converts the scalar to the tensor dtype and compares into Bool", "[kernels]") {
  Tensor in = from_vector<int64_t>({4}, {-3, 0, 2, 7});
  Tensor out = Tensor::empty({4}, {.dtype = DType::Int64});
  k::binary_scalar(k::BinaryOp::Mul, in, 2.9, false, out);  // 2.9 -> 2
  REQUIRE(read<int64_t>(out) == std::vector<int64_t>{-6, 0, 4, 14});
  k::binary_scalar(k::BinaryOp::Sub, in, 10, true, out);
  REQUIRE(read<int64_t>(out) == std::vector<int64_t>{13, 10, 8, 3});
  Tensor mask = Tensor::empty({4}, {.dtype = DType::Bool});
  k::binary_scalar(k::BinaryOp::Ge, in, 2, false, mask);
  REQUIRE(read<bool>(mask) == std::vector<bool>{false, false, true, true});
  k::binary_scalar(k::BinaryOp::Ge, in, 2, true, mask);  // 2 >= x
  REQUIRE(read<bool>(mask) == std::vector<bool>{true, true, true, false});
}

TEST_CASE("clamp bounds values and lets NaN through", "[kernels]") {
  Tensor in = from_vector<float>({5}, {-3, float(kNaN), 0.5f, 9, 1});
  Tensor out = Tensor::empty({5}, {.dtype = DType::Float32});
  k::clamp(in, -1, 1, out);
  const std::vector<float> got = read<float>(out);
  REQUIRE(got[0] == -1);
  REQUIRE(std::isnan(got[1]));
  REQUIRE(got[2] == 0.5f);
  REQUIRE(got[3] == 1);
  REQUIRE(got[4] == 1);
  Tensor iin = from_vector<int64_t>({4}, {-10, 3, 10, 5});
  Tensor iout = Tensor::empty({4}, {.dtype = DType::Int64});
  k::clamp(iin, 0, 5, iout);
  REQUIRE(read<int64_t>(iout) == std::vector<int64_t>{0, 3, 5, 5});
}

TEST_CASE("where selects for every dtype with a broadcast condition", "[kernels]") {
  const int64_t rows = 5, cols = 9;
  std::vector<bool> cond_row;
  for (int64_t c = 0; c < cols; ++c) cond_row.push_back(c % 3 == 0);
  Tensor cond = Tensor::empty({1, cols}, {.dtype = DType::Bool});
  for (int64_t c = 0; c < cols; ++c) cond.data<bool>()[c] = cond_row[size_t(c)];
  Tensor cond_b = cond.as_strided({rows, cols}, {0, 1}, 0);
  auto check = [&](auto zero) {
    using T = decltype(zero);
    std::vector<T> a, b;
    for (int64_t i = 0; i < rows * cols; ++i) {
      a.push_back(T(float(i % 7)));
      b.push_back(T(float(-(i % 4))));
    }
    Tensor out = Tensor::empty({rows, cols}, {.dtype = dtype_v<T>});
    k::where(cond_b, from_vector<T>({rows, cols}, a), from_vector<T>({rows, cols}, b), out);
    const std::vector<T> got = read<T>(out);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const T want = cond_row[size_t(i % cols)] ? a[size_t(i)] : b[size_t(i)];
      REQUIRE(float(got[size_t(i)]) == float(want));
    }
  };
  check(float{});
  check(double{});
  check(int64_t{});
  check(BFloat16{});
  check(Float16{});
  check(bool{});
  Tensor f = from_vector<float>({2}, {1, 2});
  require_error([&] { k::where(f, f, f, f); }, {"where", "Bool", "Float32"});
}

TEST_CASE("copy casts between every pair of dtypes", "[kernels]") {
  // Values every dtype represents exactly (BFloat16 has 8 significant bits).
  const std::vector<double> values = {0, 1, -2, 3, 0.5, -0.25, 96, 0};
  const std::vector<DType> dtypes = {DType::Float32, DType::Float64, DType::Int64,
                                     DType::BFloat16, DType::Float16, DType::Bool};
  // The value as `dtype` holds it: integers truncate, Bool is "non-zero".
  auto as = [](double v, DType dtype) {
    if (dtype == DType::Int64) return std::trunc(v);
    if (dtype == DType::Bool) return double(v != 0);
    return v;
  };
  auto store = [&](DType dtype) {
    Tensor t = Tensor::empty({int64_t(values.size())}, {.dtype = dtype});
    MG_DISPATCH_ALL(dtype, "test", [&] {
      for (size_t i = 0; i < values.size(); ++i) t.data<scalar_t>()[i] = scalar_t(values[i]);
    });
    return t;
  };
  for (DType from : dtypes) {
    for (DType to : dtypes) {
      Tensor src = store(from);
      Tensor dst = Tensor::empty(src.shape(), {.dtype = to});
      k::copy(src, dst);
      std::vector<double> got;
      MG_DISPATCH_ALL(to, "test", [&] {
        for (scalar_t v : read<scalar_t>(dst)) got.push_back(double(v));
      });
      for (size_t i = 0; i < values.size(); ++i) {
        INFO(dtype_name(from) << " -> " << dtype_name(to) << " index " << i);
        REQUIRE(got[i] == as(as(values[i], from), to));
      }
    }
  }
}

TEST_CASE("BFloat16 cast rounds to nearest even and keeps NaN", "[kernels]") {
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties go to 1 + 2^-6.
  const std::vector<float> x = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 1.0f + 1.0f / 512 + 1.0f / 256,
                                float(kNaN), -2.5f, 3.0e38f};
  Tensor bf = Tensor::empty({6}, {.dtype = DType::BFloat16});
  k::copy(from_vector<float>({6}, x), bf);
  Tensor back = Tensor::empty({6}, {.dtype = DType::Float32});
  k::copy(bf, back);
  const std::vector<float> got = read<float>(back);
  REQUIRE(got[0] == 1.0f);
  REQUIRE(got[1] == 1.0f + 1.0f / 64);
  REQUIRE(got[2] == 1.0f + 1.0f / 128);
  REQUIRE(std::isnan(got[3]));
  REQUIRE(got[4] == -2.5f);
  REQUIRE(std::fabs(got[5] - 3.0e38f) <= 3.0e38f / 128);
  // A value exactly representable in bfloat16 survives the round trip unchanged.
  Tensor exact = from_vector<float>({2}, {0.15625f, -1024.0f});
  Tensor bf2 = Tensor::empty({2}, {.dtype = DType::BFloat16});
  k::copy(exact, bf2);
  k::copy(bf2, exact);
  REQUIRE(read<float>(exact) == std::vector<float>{0.15625f, -1024.0f});
}

// Float32 -> Float16 runs in x86's F16C instruction where the CPU has it (kernels/cpu); every way
// this CPU has, and copy() contiguous or strided, must give Float16's own bits, NaN payloads, ties,
// subnormals and a vector loop's tail included; and back to Float32, Float16's values.
TEST_CASE("Float16 casts give Float16's bits on every path this CPU has", "[kernels][fp16]") {
  std::vector<float> values;
  uint64_t state = 99;
  for (int i = 0; i < 4099; ++i) {  // an odd count: a tail after the 8-lane loop
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t u = uint32_t(state >> 32);
    if (i % 2) u = (u & 0x807FFFFFu) | (uint32_t(97 + (state >> 20) % 47) << 23);  // binary16's range
    float f;
    std::memcpy(&f, &u, 4);
    values.push_back(f);
  }
  for (float f : {65520.0f, 65519.99f, std::ldexp(1.0f, -25), std::ldexp(3.0f, -25), 1.0f + std::ldexp(1.0f, -11)})
    values.push_back(f);
  const int64_t n = int64_t(values.size());
  std::vector<uint16_t> want;
  for (float f : values) want.push_back(Float16(f).bits);

  const auto& variants = mg::kernels::cpu::to_float16_variants();
  REQUIRE(std::string(variants.back().first) == "loop");
  for (const auto& [name, convert] : variants) {
    INFO(name);
    std::vector<Float16> got(values.size());
    convert(values.data(), got.data(), n);
    for (int64_t j = 0; j < n; ++j) {
      INFO("element " << j);
      REQUIRE(got[j].bits == want[j]);
    }
  }
  const Tensor x = from_vector<float>({n}, values);
  const auto bits_of = [](const Tensor& half) {
    std::vector<uint16_t> out;
    for (const Float16& h : read<Float16>(half)) out.push_back(h.bits);
    return out;
  };
  Tensor half = Tensor::empty({n}, {.dtype = DType::Float16});
  k::copy(x, half);
  CHECK(bits_of(half) == want);
  Tensor strided = Tensor::empty({2 * n}, {.dtype = DType::Float16}).as_strided({n}, {2}, 1);
  k::copy(x, strided);
  CHECK(bits_of(strided.contiguous()) == want);
  Tensor back = Tensor::empty({n}, {.dtype = DType::Float32});
  k::copy(half, back);
  const std::vector<float> widened = read<float>(back);
  for (int64_t j = 0; j < n; ++j) {
    INFO("element " << j);
    const float expected = Float16::to_float(want[size_t(j)]);
    REQUIRE(std::memcmp(&widened[size_t(j)], &expected, 4) == 0);
  }
}

// The nearest value of a float format with `bits` significand bits (implicit one included),
// smallest normal 2^min_exp and largest finite `largest`, found naively: the two neighbours
// of x on that format's grid in double, the nearer one, the even one on a tie, infinity past
// the largest finite value's half step.
float nearest_on_grid(float x, int bits, int min_exp, double largest) {
  if (std::isnan(x) || std::isinf(x)) return x;
  const double d = std::fabs(double(x));
  int e = d == 0 ? min_exp : std::max(std::ilogb(d), min_exp);
  const double step = std::ldexp(1.0, e - (bits - 1));
  const double below = std::floor(d / step) * step, above = below + step;
  double r = d - below < above - d ? below : d - below > above - d ? above : std::fmod(below / step, 2) == 0 ? below : above;
  if (r > largest) r = INFINITY;
  return float(std::copysign(r, double(x)));
}

TEST_CASE("round_to_bfloat16 and round_to_float16 give the nearest value, ties to even", "[kernels]") {
  std::vector<float> x = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 65504.0f, 65519.996f, 65520.0f, -65520.0f,
                          0x1p-24f, 0x1p-25f, 0x3p-25f, 0x1p-26f, 0x1.8p-14f, 0x1.ffcp-15f, 0x1.ffep-15f,
                          3.4e38f, -0.0f, INFINITY, -INFINITY, float(kNaN), 1e-40f, -7.5e-39f};
  // Random bit patterns: every exponent, sign and payload, subnormals and NaNs included.
  uint64_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const auto bits = uint32_t(state >> 32);
    float f;
    std::memcpy(&f, &bits, 4);
    x.push_back(f);
  }
  const int64_t n = int64_t(x.size());
  const Tensor in = from_vector<float>({n}, x);
  Tensor bf16 = Tensor::empty({n}, {.dtype = DType::Float32}), fp16 = Tensor::empty({n}, {.dtype = DType::Float32});
  k::unary(k::UnaryOp::RoundBFloat16, in, bf16);
  k::unary(k::UnaryOp::RoundFloat16, in, fp16);
  const std::vector<float> got_bf16 = read<float>(bf16), got_fp16 = read<float>(fp16);
  const auto same = [](float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0; };
  for (size_t i = 0; i < x.size(); ++i) {
    INFO("x = " << x[i] << " (" << std::hexfloat << x[i] << std::defaultfloat << ")");
    // bfloat16: 8 significand bits, float32's exponent range (its subnormals too).
    REQUIRE(same(got_bf16[i], nearest_on_grid(x[i], 8, -126, 0x1.fep127)));
    // binary16: 11 bits, normal from 2^-14; GCC's _Float16 conversion is a second reference.
    REQUIRE(same(got_fp16[i], nearest_on_grid(x[i], 11, -14, 65504.0)));
    REQUIRE(same(got_fp16[i], float(static_cast<_Float16>(x[i]))));
  }
}

TEST_CASE("rounding to bfloat16 or float16 takes Float32 only and reads strided inputs", "[kernels]") {
  require_error([] { k::unary(k::UnaryOp::RoundFloat16, from_vector<double>({2}, {1, 2}),
                              Tensor::empty({2}, {.dtype = DType::Float64})); },
                {"round_to_float16", "Float32", "Float64"});
  const Tensor base = random_tensor<float>({5, 7}, 3, 100.0);
  Tensor out = Tensor::empty({7, 5}, {.dtype = DType::Float32});
  k::unary(k::UnaryOp::RoundBFloat16, base.transpose(0, 1), out);
  const std::vector<float> b = read<float>(base), o = read<float>(out);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 7; ++j) REQUIRE(o[size_t(j * 5 + i)] == float(BFloat16(b[size_t(i * 7 + j)])));
}

TEST_CASE("copy between strided layouts, large", "[kernels]") {
  const int64_t rows = 301, cols = 157;
  std::vector<double> x = random_values<double>(size_t(rows * cols), 15);
  Tensor dst = padded_view(rows, cols, DType::Float64, 5);
  k::copy(transposed(x, rows, cols), dst);
  REQUIRE(read<double>(dst) == x);
  // Contiguous to contiguous (the memcpy path) and float64 -> float32 strided.
  Tensor dense = Tensor::empty({rows, cols}, {.dtype = DType::Float64});
  k::copy(dst, dense);
  REQUIRE(read<double>(dense) == x);
  Tensor narrow = Tensor::empty({rows, cols}, {.dtype = DType::Float32});
  k::copy(dst, narrow);
  const std::vector<float> got = read<float>(narrow);
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(got[i] == float(x[i]));
}

TEST_CASE("copy of a float to Bool is true for any non-zero value", "[kernels]") {
  Tensor src = from_vector<float>({5}, {0.0f, -0.0f, 1e-30f, -3, float(kNaN)});
  Tensor dst = Tensor::empty({5}, {.dtype = DType::Bool});
  k::copy(src, dst);
  REQUIRE(read<bool>(dst) == std::vector<bool>{false, false, true, true, true});
}

TEST_CASE("copy between different shapes is an error naming both", "[kernels]") {
  Tensor a = Tensor::empty({2, 3});
  Tensor b = Tensor::empty({3, 2});
  require_error([&] { k::copy(a, b); }, {"[2, 3]", "[3, 2]"});
}

TEST_CASE("fill writes every dtype, through strided views too", "[kernels]") {
  Tensor f = padded_view(33, 17, DType::Float32);
  k::fill(f, 2.5);
  for (float v : read<float>(f)) REQUIRE(v == 2.5f);
  Tensor d = Tensor::empty({40001}, {.dtype = DType::Float64});
  k::fill(d, -1.25);
  for (double v : read<double>(d)) REQUIRE(v == -1.25);
  Tensor i = Tensor::empty({7}, {.dtype = DType::Int64});
  k::fill(i, 42);
  for (int64_t v : read<int64_t>(i)) REQUIRE(v == 42);
  Tensor bf = Tensor::empty({3}, {.dtype = DType::BFloat16});
  k::fill(bf, 0.5);
  for (BFloat16 v : read<BFloat16>(bf)) REQUIRE(float(v) == 0.5f);
  Tensor b = Tensor::empty({3}, {.dtype = DType::Bool});
  k::fill(b, 3);
  REQUIRE(read<bool>(b) == std::vector<bool>{true, true, true});
  k::fill(b, 0);
  REQUIRE(read<bool>(b) == std::vector<bool>{false, false, false});
}

TEST_CASE("arange writes start + i * step", "[kernels]") {
  Tensor f = Tensor::empty({40001}, {.dtype = DType::Float32});
  k::arange(f, -3, 0.25);
  const std::vector<float> fv = read<float>(f);
  for (size_t i = 0; i < fv.size(); ++i) REQUIRE(fv[i] == float(-3 + double(i) * 0.25));
  Tensor d = Tensor::empty({5}, {.dtype = DType::Float64});
  k::arange(d, 1, -0.5);
  REQUIRE(read<double>(d) == std::vector<double>{1, 0.5, 0, -0.5, -1});
  Tensor i = Tensor::empty({4}, {.dtype = DType::Int64});
  k::arange(i, 10, 3);
  REQUIRE(read<int64_t>(i) == std::vector<int64_t>{10, 13, 16, 19});
  Tensor strided = padded_view(2, 2, DType::Float32);
  require_error([&] { k::arange(strided, 0, 1); }, {"arange", "[2, 2]"});
}

TEST_CASE("elementwise kernels do nothing on empty tensors", "[kernels]") {
  for (const Shape& shape : {Shape{0}, Shape{3, 0}, Shape{0, 5, 2}}) {
    Tensor a = Tensor::empty(shape);
    Tensor out = Tensor::empty(shape);
    k::unary(k::UnaryOp::Exp, a, out);
    k::binary(k::BinaryOp::Add, a, a, out);
    k::binary_scalar(k::BinaryOp::Mul, a, 2, false, out);
    k::copy(a, Tensor::empty(shape, {.dtype = DType::Int64}));
    k::fill(out, 1);
    REQUIRE(out.numel() == 0);
  }
  k::arange(Tensor::empty({0}), 0, 1);
}

TEST_CASE("elementwise on 0-d and size-1 tensors", "[kernels]") {
  Tensor a = from_vector<double>({}, {2.0});
  Tensor out = Tensor::empty({}, {.dtype = DType::Float64});
  k::binary_scalar(k::BinaryOp::Pow, a, 10, false, out);
  REQUIRE(read<double>(out)[0] == 1024.0);
  Tensor b = from_vector<double>({1, 1, 1}, {3.0});
  Tensor out3 = Tensor::empty({1, 1, 1}, {.dtype = DType::Float64});
  k::binary(k::BinaryOp::Mul, b, b, out3);
  REQUIRE(read<double>(out3)[0] == 9.0);
}

TEST_CASE("4-d permuted operands: the odometer carries across dims inside parallel chunks", "[kernels]") {
  // (6, 7, 31, 37) viewed through a permutation of a contiguous (37, 6, 31, 7): no dims coalesce.
  const Shape shape = {6, 7, 31, 37};
  const int64_t n = numel_of(shape);
  std::vector<float> raw = random_values<float>(size_t(n), 16);
  Tensor base = from_vector<float>({37, 6, 31, 7}, raw);
  // base strides: (1302, 217, 7, 1); view index (i, j, k, l) -> base (l, i, k, j).
  Tensor in = base.as_strided(shape, {217, 1, 7, 1302}, 0);
  Tensor out = Tensor::empty(shape, {.dtype = DType::Float32});
  k::unary(k::UnaryOp::Neg, in, out);
  const std::vector<float> got = read<float>(out);
  size_t idx = 0;
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 7; ++j)
      for (int64_t kk = 0; kk < 31; ++kk)
        for (int64_t l = 0; l < 37; ++l) REQUIRE(got[idx++] == -raw[size_t(l * 1302 + i * 217 + kk * 7 + j)]);
}

TEST_CASE("StridedLayout: coalescing and odometer offsets agree with offsets()", "[kernels]") {
  Tensor base = Tensor::empty({5, 4, 3});
  Tensor contiguous = Tensor::empty({5, 4, 3});
  const auto dense = k::make_layout<2>({&contiguous, &base});
  REQUIRE(dense.ndim == 1);
  REQUIRE(dense.contiguous);
  Tensor permuted = base.as_strided({3, 5, 4}, {1, 12, 3}, 0);
  Tensor out = Tensor::empty({3, 5, 4});
  const auto layout = k::make_layout<2>({&out, &permuted});
  REQUIRE_FALSE(layout.contiguous);
  for (int64_t begin = 0; begin < 60; begin += 7) {
    for (int64_t end = begin; end <= 60; end += 11) {
      int64_t i = begin;
      layout.for_each_offsets(begin, end, [&](const int64_t(&offs)[2]) {
        int64_t want[2];
        layout.offsets(i, want);
        REQUIRE(offs[0] == want[0]);
        REQUIRE(offs[1] == want[1]);
        ++i;
      });
      REQUIRE(i == end);
    }
  }
}

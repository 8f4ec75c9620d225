// tests/cuda/test_cuda_elementwise.cpp — kernels/cuda/elementwise.cu against the CPU: unary and
// binary math, scalars, comparisons, clamp, where, casts, fills, arange, views and copies.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "multigrad/kernels/kernels.h"

using namespace mg;
using namespace mg::test;

namespace {

const std::vector<std::pair<std::string, Op>>& float_unary_ops() {
  static const std::vector<std::pair<std::string, Op>> ops{
      {"neg", [](const auto& in) { return neg(in[0]); }},
      {"exp", [](const auto& in) { return exp(in[0]); }},
      {"log", [](const auto& in) { return log(in[0]); }},  // NaN for the negative half, on both
      {"sqrt", [](const auto& in) { return sqrt(in[0]); }},
      {"abs", [](const auto& in) { return abs(in[0]); }},
      {"relu", [](const auto& in) { return relu(in[0]); }},
      {"gelu", [](const auto& in) { return gelu(in[0]); }},
      {"sigmoid", [](const auto& in) { return sigmoid(in[0]); }},
      {"tanh", [](const auto& in) { return tanh(in[0]); }},
      {"sin", [](const auto& in) { return sin(in[0]); }},
      {"cos", [](const auto& in) { return cos(in[0]); }},
      {"erf", [](const auto& in) { return erf(in[0]); }},
      {"expm1", [](const auto& in) { return expm1(in[0]); }},
      {"log1p", [](const auto& in) { return log1p(in[0]); }},  // NaN below -1, on both
  };
  return ops;
}

const std::vector<std::pair<std::string, Op>>& arithmetic_binary_ops() {
  static const std::vector<std::pair<std::string, Op>> ops{
      {"add", [](const auto& in) { return in[0] + in[1]; }},
      {"sub", [](const auto& in) { return in[0] - in[1]; }},
      {"mul", [](const auto& in) { return in[0] * in[1]; }},
      {"div", [](const auto& in) { return in[0] / in[1]; }},
      {"maximum", [](const auto& in) { return maximum(in[0], in[1]); }},
      {"minimum", [](const auto& in) { return minimum(in[0], in[1]); }},
  };
  return ops;
}

const std::vector<std::pair<std::string, Op>>& comparison_ops() {
  static const std::vector<std::pair<std::string, Op>> ops{
      {"eq", [](const auto& in) { return eq(in[0], in[1]); }}, {"ne", [](const auto& in) { return ne(in[0], in[1]); }},
      {"lt", [](const auto& in) { return lt(in[0], in[1]); }}, {"le", [](const auto& in) { return le(in[0], in[1]); }},
      {"gt", [](const auto& in) { return gt(in[0], in[1]); }}, {"ge", [](const auto& in) { return ge(in[0], in[1]); }},
  };
  return ops;
}

}  // namespace

TEST_CASE("cuda: float32 unary ops match the CPU at odd sizes", "[cuda]") {
  // CUDA's expf/tanhf are within 2 ulp, libm's within 1: far inside 1e-5 relative.
  for (int64_t n : odd_sizes()) {
    Tensor x = cpu_input({n}, DType::Float32, 3, 4.0);
    for (const auto& [name, op] : float_unary_ops()) {
      INFO(name << " at n = " << n);
      check_matches_cpu(op, {x});
    }
  }
}

TEST_CASE("cuda: float64 unary ops match the CPU", "[cuda]") {
  Tensor x = cpu_input({3, 341}, DType::Float64, 4, 4.0);
  for (const auto& [name, op] : float_unary_ops()) {
    INFO(name);
    check_matches_cpu(op, {x}, 1e-12, 1e-14);
  }
}

TEST_CASE("cuda: unary ops on non-contiguous views", "[cuda]") {
  Tensor base = cpu_input({33, 65}, DType::Float32, 5, 3.0);
  std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> views{
      {"transposed", [](const Tensor& t) { return t.transpose(0, 1); }},
      {"sliced with step 2", [](const Tensor& t) { return t.slice(1, 1, 64, 2); }},
      {"expanded row", [](const Tensor& t) { return t.slice(0, 3, 4).expand({40, 65}); }},
  };
  for (const auto& [view_name, view] : views) {
    for (const auto& [name, op] : float_unary_ops()) {
      INFO(name << " of a " << view_name << " view");
      check_matches_cpu([&](const auto& in) { return op({view(in[0])}); }, {base});
    }
  }
}

TEST_CASE("cuda: rounding and casting to bfloat16 and float16 match the CPU bit for bit", "[cuda]") {
  // Wide values: fp16's overflow to infinity and its subnormals are both reached.
  const Tensor wide = mul(cpu_input({7, 1001}, DType::Float32, 6, 4.0), exp(cpu_input({7, 1001}, DType::Float32, 7, 12.0)));
  for (Precision p : {Precision::BFloat16, Precision::Float16}) {
    INFO(precision_name(p));
    check_exact([p](const auto& in) { return round_to(in[0], p); }, {wide});
    check_exact([p](const auto& in) { return round_to(in[0].transpose(0, 1), p); }, {wide});
  }
  // The casts to the 16-bit dtypes round the same way (the CPU's in F16C instructions where it has them).
  for (DType half : {DType::BFloat16, DType::Float16}) {
    INFO(half);
    check_exact([half](const auto& in) { return in[0].to(half); }, {wide});
    check_exact([half](const auto& in) { return in[0].transpose(0, 1).to(half); }, {wide});
  }
}

TEST_CASE("cuda: Int64 neg, abs and relu are exact", "[cuda]") {
  Tensor x = cpu_input({1029}, DType::Int64, 6, 100.0);
  check_exact([](const auto& in) { return neg(in[0]); }, {x});
  check_exact([](const auto& in) { return abs(in[0]); }, {x});
  check_exact([](const auto& in) { return relu(in[0]); }, {x});
}

TEST_CASE("cuda: binary float32 ops with broadcasting", "[cuda]") {
  Tensor a = cpu_input({7, 1, 129}, DType::Float32, 7, 2.0);
  Tensor b = cpu_input({5, 129}, DType::Float32, 8, 2.0);
  Tensor row = cpu_input({129}, DType::Float32, 9, 2.0);
  for (const auto& [name, op] : arithmetic_binary_ops()) {
    INFO(name);
    check_matches_cpu(op, {a, b});
    check_matches_cpu(op, {row, a});
  }
  check_matches_cpu([](const auto& in) { return pow(abs(in[0]), in[1]); }, {a, b});
}

TEST_CASE("cuda: binary ops at odd sizes take both the vector and the tail path", "[cuda]") {
  for (int64_t n : odd_sizes()) {
    Tensor a = cpu_input({n}, DType::Float32, 10), b = cpu_input({n}, DType::Float32, 11);
    for (const auto& [name, op] : arithmetic_binary_ops()) {
      INFO(name << " at n = " << n);
      check_matches_cpu(op, {a, b});
    }
  }
}

TEST_CASE("cuda: binary ops on misaligned and strided operands", "[cuda]") {
  // A slice starting at element 1 is contiguous but not 16-byte aligned: the scalar path.
  Tensor a = cpu_input({1025}, DType::Float32, 12), b = cpu_input({1025}, DType::Float32, 13);
  check_matches_cpu([](const auto& in) { return in[0].slice(0, 1, 1025) * in[1].slice(0, 0, 1024); }, {a, b});
  Tensor m = cpu_input({31, 47}, DType::Float32, 14), n = cpu_input({47, 31}, DType::Float32, 15);
  check_matches_cpu([](const auto& in) { return in[0] - in[1].transpose(0, 1); }, {m, n});
  check_matches_cpu([](const auto& in) { return in[0].transpose(0, 1) / in[1]; }, {m, n});
}

TEST_CASE("cuda: binary float64 and Int64 ops", "[cuda]") {
  Tensor a = cpu_input({9, 257}, DType::Float64, 16, 3.0), b = cpu_input({257}, DType::Float64, 17, 3.0);
  for (const auto& [name, op] : arithmetic_binary_ops()) {
    INFO("float64 " << name);
    check_matches_cpu(op, {a, b}, 1e-14, 1e-15);
  }
  Tensor i = cpu_input({9, 257}, DType::Int64, 18, 5.0), j = cpu_input({257}, DType::Int64, 19, 5.0);
  for (const auto& [name, op] : arithmetic_binary_ops()) {
    if (name == "div") continue;  // true division gives Float32, checked below
    INFO("int64 " << name);
    check_exact(op, {i, j});
  }
  check_matches_cpu([](const auto& in) { return in[0] / in[1]; }, {i, j});
  check_exact([](const auto& in) { return pow(in[0], 3.0); }, {i});
}

TEST_CASE("cuda: comparisons give exact Bool results, NaN included", "[cuda]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor a = tensor({1.0, 2.0, nan, -0.0, 5.0, nan, 3.0}, {7});
  Tensor b = tensor({1.0, 3.0, 1.0, 0.0, 4.0, nan, 3.0}, {7});
  Tensor r = cpu_input({1000}, DType::Float32, 20), s = cpu_input({1000}, DType::Float32, 21);
  Tensor ri = cpu_input({3, 333}, DType::Int64, 22), si = cpu_input({333}, DType::Int64, 23);
  for (const auto& [name, op] : comparison_ops()) {
    INFO(name);
    Tensor got = check_matches_cpu(op, {a, b}, 0, 0);
    REQUIRE(got.dtype() == DType::Bool);
    check_exact(op, {r, s});
    check_exact(op, {ri, si});
  }
}

TEST_CASE("cuda: tensor-scalar ops on both sides", "[cuda]") {
  Tensor x = cpu_input({2049}, DType::Float32, 24, 3.0);
  check_matches_cpu([](const auto& in) { return in[0] + 2.5; }, {x});
  check_matches_cpu([](const auto& in) { return in[0] - 2.5; }, {x});
  check_matches_cpu([](const auto& in) { return 2.5 - in[0]; }, {x});
  check_matches_cpu([](const auto& in) { return in[0] * -1.5; }, {x});
  check_matches_cpu([](const auto& in) { return in[0] / 3.0; }, {x});
  check_matches_cpu([](const auto& in) { return 3.0 / in[0]; }, {x});
  check_matches_cpu([](const auto& in) { return pow(abs(in[0]), 1.7); }, {x});
  check_matches_cpu([](const auto& in) { return pow(in[0], 2.0); }, {x});
  Tensor i = cpu_input({513}, DType::Int64, 25, 10.0);
  check_exact([](const auto& in) { return in[0] * 3.0; }, {i});
  check_exact([](const auto& in) { return 7.0 - in[0]; }, {i});
}

TEST_CASE("cuda: comparisons with a scalar", "[cuda]") {
  Tensor x = cpu_input({4, 255}, DType::Float32, 26);
  Tensor i = cpu_input({4, 255}, DType::Int64, 27);
  for (double s : {0.0, 0.25, -3.0}) {
    INFO("scalar " << s);
    for (const Tensor& t : {x, i}) {
      check_exact([s](const auto& in) { return eq(in[0], s); }, {t});
      check_exact([s](const auto& in) { return ne(in[0], s); }, {t});
      check_exact([s](const auto& in) { return lt(in[0], s); }, {t});
      check_exact([s](const auto& in) { return le(in[0], s); }, {t});
      check_exact([s](const auto& in) { return gt(in[0], s); }, {t});
      check_exact([s](const auto& in) { return ge(in[0], s); }, {t});
    }
  }
}

TEST_CASE("cuda: scalar-first ops at the kernels API are the CPU's bits, NaN, infinities and signed zeros included",
          "[cuda]") {
  // kernels::binary_scalar(op, a, s, scalar_first = true) computes op(s, a); CUDA runs the ops
  // that have a mirror (s < x as x > s, s + x as x + s, ...) on its scalar-second kernel
  // (elementwise.cu's mirrored()), a path the functional API never takes (it puts the scalar
  // first only for s - x and s / x): held here to the CPU's bytes.
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor floats =
      tensor(std::vector<float>{0.f, -0.f, 1.5f, -2.f, 0.25f, float(inf), float(-inf), float(nan), 3.f, -0.25f, 1e-30f},
             {11});
  const Tensor ints = tensor(std::vector<int64_t>{0, 1, -1, 7, -8, 3, 1 << 20}, {7});
  const kernels::BinaryOp ops[] = {kernels::BinaryOp::Add, kernels::BinaryOp::Mul, kernels::BinaryOp::Eq,
                                   kernels::BinaryOp::Ne,  kernels::BinaryOp::Lt,  kernels::BinaryOp::Le,
                                   kernels::BinaryOp::Gt,  kernels::BinaryOp::Ge};
  for (const Tensor& a : {floats, ints})
    for (const double s : {0.0, -0.0, 0.25, -2.0, 3.0, inf, -inf, nan})
      for (const kernels::BinaryOp op : ops) {
        if (a.dtype() == DType::Int64 && !std::isfinite(s)) continue;  // no such Int64 scalar
        INFO(kernels::op_name(op) << "(" << s << ", " << a.dtype() << ")");
        const DType result = kernels::is_comparison(op) ? DType::Bool : a.dtype();
        const Tensor want = Tensor::empty(a.shape(), {.dtype = result});
        const Tensor got = Tensor::empty(a.shape(), {.dtype = result, .device = gpu()});
        kernels::binary_scalar(op, a, s, true, want);
        kernels::binary_scalar(op, a.to(gpu()), s, true, got);
        const Tensor back = got.to(Device("cpu"));
        REQUIRE(std::memcmp(back.data_ptr(), want.data_ptr(), size_t(want.numel()) * dtype_size(result)) == 0);
      }
}

TEST_CASE("cuda: maximum and minimum propagate NaN", "[cuda]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor a = tensor({nan, 1.0, 2.0, nan}, {4});
  Tensor b = tensor({0.0, nan, 3.0, nan}, {4});
  Tensor hi = maximum(a.to(gpu()), b.to(gpu()));
  Tensor lo = minimum(a.to(gpu()), b.to(gpu()));
  std::vector<double> h = values(hi), l = values(lo);
  REQUIRE((std::isnan(h[0]) && std::isnan(h[1]) && h[2] == 3.0 && std::isnan(h[3])));
  REQUIRE((std::isnan(l[0]) && std::isnan(l[1]) && l[2] == 2.0 && std::isnan(l[3])));
}

TEST_CASE("cuda: clamp, NaN passing through", "[cuda]") {
  Tensor x = cpu_input({3001}, DType::Float32, 28, 2.0);
  check_exact([](const auto& in) { return clamp(in[0], -0.5, 0.75); }, {x});
  check_exact([](const auto& in) { return clamp(in[0].slice(0, 1, 3001, 3), -1.0, -0.25); }, {x});
  Tensor i = cpu_input({77}, DType::Int64, 29);
  check_exact([](const auto& in) { return clamp(in[0], -3, 4); }, {i});
  Tensor with_nan = tensor({std::numeric_limits<double>::quiet_NaN(), 5.0, -5.0}, {3});
  REQUIRE(std::isnan(values(clamp(with_nan.to(gpu()), -1, 1))[0]));
}

TEST_CASE("cuda: where with broadcasting and every dtype", "[cuda]") {
  Tensor cond = cpu_input({5, 1, 67}, DType::Bool, 30);
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int64}) {
    INFO(dtype);
    Tensor a = cpu_input({4, 67}, dtype, 31), b = cpu_input({67}, dtype, 32);
    check_exact([](const auto& in) { return where(in[0], in[1], in[2]); }, {cond, a, b});
  }
  Tensor big = cpu_input({(1 << 20) + 3}, DType::Float32, 33);
  check_exact([](const auto& in) { return where(gt(in[0], 0.0), in[0], -in[0]); }, {big});
}

TEST_CASE("cuda: casts between every pair of dtypes are exact", "[cuda]") {
  const std::vector<DType> dtypes{DType::Float32, DType::Float64, DType::Int64,
                                  DType::BFloat16, DType::Float16, DType::Bool};
  Tensor base = cpu_input({3, 1001}, DType::Float64, 34, 50.0);
  for (DType from : dtypes) {
    for (DType to : dtypes) {
      INFO(from << " -> " << to);
      Tensor src = base.to(from);
      check_exact([to](const auto& in) { return in[0].to(to); }, {src});
      // Strided source: the cast kernel's general path.
      check_exact([to](const auto& in) { return in[0].transpose(0, 1).to(to); }, {src});
    }
  }
}

TEST_CASE("cuda: contiguous, clone, copy_ into a view, cat and stack", "[cuda]") {
  Tensor x = cpu_input({6, 10, 4}, DType::Float32, 35);
  check_exact([](const auto& in) { return in[0].permute({2, 0, 1}).contiguous(); }, {x});
  check_exact([](const auto& in) { return in[0].slice(1, 2, 9, 3).clone(); }, {x});
  check_exact(
      [](const auto& in) {
        Tensor dst = zeros({6, 10, 4}, {.device = in[0].device()});
        copy_(dst.slice(1, 0, 5), in[1]);  // (6, 5, 4) <- broadcast (5, 4)
        return dst;
      },
      {x, cpu_input({5, 4}, DType::Float32, 36)});
  Tensor y = cpu_input({6, 3, 4}, DType::Float32, 37);
  check_exact([](const auto& in) { return cat({in[0], in[1]}, 1); }, {x, y});
  check_exact([](const auto& in) { return stack({in[0], in[0] * 2.0}, 2); }, {x});
}

TEST_CASE("cuda: zeros, ones, full and arange", "[cuda]") {
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int64, DType::BFloat16, DType::Bool}) {
    INFO(dtype);
    expect_equal(full({3, 1027}, 1.5, {.dtype = dtype, .device = gpu()}), full({3, 1027}, 1.5, {.dtype = dtype}));
    expect_equal(zeros({5}, {.dtype = dtype, .device = gpu()}), zeros({5}, {.dtype = dtype}));
    expect_equal(ones({0, 3}, {.dtype = dtype, .device = gpu()}), ones({0, 3}, {.dtype = dtype}));
  }
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int64}) {
    INFO(dtype);
    expect_equal(arange(1025, {.dtype = dtype, .device = gpu()}), arange(1025, {.dtype = dtype}));
    double step = dtype == DType::Int64 ? 7.0 : 0.7;
    expect_equal(arange(-3.0, 100.0, step, {.dtype = dtype, .device = gpu()}),
                 arange(-3.0, 100.0, step, {.dtype = dtype}));
  }
  expect_equal(arange(0, {.device = gpu()}), arange(0));
}

TEST_CASE("cuda: elementwise ops on empty tensors", "[cuda]") {
  Tensor e = cpu_input({0, 5}, DType::Float32, 38);
  check_exact([](const auto& in) { return exp(in[0]); }, {e});
  check_exact([](const auto& in) { return in[0] + in[0]; }, {e});
  check_exact([](const auto& in) { return in[0] * 2.0; }, {e});
  check_exact([](const auto& in) { return lt(in[0], 0.0); }, {e});
  check_exact([](const auto& in) { return where(gt(in[0], 0.0), in[0], in[0]); }, {e});
  check_exact([](const auto& in) { return in[0].to(DType::Int64); }, {e});
  check_exact([](const auto& in) { return in[0].transpose(0, 1).contiguous(); }, {e});
}

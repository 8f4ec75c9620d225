// Elementwise ops (autograd/elementwise_ops.cpp) against naive loops: broadcasting, strided
// operands, empty tensors, dtypes and promotion, errors.
#include <cmath>
#include <limits>

#include "core/cpu_devices_guard.h"
#include "reference.h"

using namespace mg;
using namespace mg::test;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double add_ref(double x, double y) { return x + y; }
double gelu_ref(double x) {
  return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

void check_binary(const Array& a, const Array& b, const Shape& out, DType dtype = DType::Float32) {
  Tensor ta = to_tensor(a, dtype), tb = to_tensor(b, dtype);
  Tensor sum = add(ta, tb);
  REQUIRE(sum.shape() == out);
  require_close(sum, binary(a, b, out, add_ref).data);
  require_close(sub(ta, tb), binary(a, b, out, [](double x, double y) { return x - y; }).data);
  require_close(mul(ta, tb), binary(a, b, out, [](double x, double y) { return x * y; }).data);
}

}  // namespace

TEST_CASE("add, sub, mul of same-shape Float32 tensors match a loop", "[ops]") {
  check_binary(random_array({37}, 1), random_array({37}, 2), {37});
  check_binary(random_array({3, 5, 7}, 3), random_array({3, 5, 7}, 4), {3, 5, 7});
}

TEST_CASE("div of Float64 tensors matches a loop", "[ops]") {
  Array a = random_array({4, 9}, 5), b = map(random_array({4, 9}, 6), [](double x) { return x + 2; });
  Tensor q = div(to_tensor(a, DType::Float64), to_tensor(b, DType::Float64));
  REQUIRE(q.dtype() == DType::Float64);
  require_close(q, binary(a, b, {4, 9}, [](double x, double y) { return x / y; }).data, 1e-14, 0);
}

TEST_CASE("broadcasting [3, 1] with [1, 4]", "[ops]") {
  check_binary(random_array({3, 1}, 7), random_array({1, 4}, 8), {3, 4});
}

TEST_CASE("broadcasting [5] with [2, 5] on either side", "[ops]") {
  check_binary(random_array({5}, 9), random_array({2, 5}, 10), {2, 5});
  check_binary(random_array({2, 5}, 11), random_array({5}, 12), {2, 5});
}

TEST_CASE("broadcasting a 0-d tensor against any shape", "[ops]") {
  Array s{{}, {2.5}};
  check_binary(s, random_array({3, 4}, 13), {3, 4});
  check_binary(random_array({6}, 14), s, {6});
  Tensor r = add(to_tensor(s), to_tensor(s));
  REQUIRE(r.dim() == 0);
  REQUIRE(r.item<float>() == 5.0f);
}

TEST_CASE("broadcasting a middle dim: [2, 1, 3] with [4, 1]", "[ops]") {
  check_binary(random_array({2, 1, 3}, 15), random_array({4, 1}, 16), {2, 4, 3});
}

TEST_CASE("binary ops read transposed and step-sliced operands", "[ops]") {
  Array a = random_array({5, 3}, 17), b = random_array({3, 10}, 18);
  Tensor at = to_tensor(a).transpose(0, 1);     // (3, 5), strides (1, 3)
  Tensor bs = to_tensor(b).slice(1, 1, 10, 2);  // (3, 5), every other column from 1
  REQUIRE_FALSE(at.is_contiguous());
  REQUIRE_FALSE(bs.is_contiguous());
  std::vector<double> want;
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 5; ++j) want.push_back(a.at({j, i}) * b.at({i, 1 + 2 * j}));
  require_close(mul(at, bs), want);
}

TEST_CASE("binary ops read an expanded operand", "[ops]") {
  Array row = random_array({1, 6}, 19), m = random_array({4, 6}, 20);
  Tensor e = to_tensor(row).expand({4, 6});
  REQUIRE(e.stride(0) == 0);
  require_close(sub(to_tensor(m), e), binary(m, row, {4, 6}, [](double x, double y) { return x - y; }).data);
}

TEST_CASE("binary ops on empty tensors give empty results", "[ops]") {
  Tensor e = add(zeros({0}), zeros({0}));
  REQUIRE(e.shape() == Shape{0});
  Tensor f = mul(zeros({3, 0}), ones({3, 1}));
  REQUIRE(f.shape() == Shape{3, 0});
  REQUIRE(f.to_vector<float>().empty());
  REQUIRE(add(zeros({3, 0}), 1.0).shape() == Shape{3, 0});
  REQUIRE(exp(zeros({0, 2})).shape() == Shape{0, 2});
}

TEST_CASE("Int64 arithmetic stays Int64 and true division gives Float32", "[ops]") {
  Tensor a = tensor({7, -7, 9, 4}, {4}, {.dtype = DType::Int64});
  Tensor b = tensor({2, 2, -3, 4}, {4}, {.dtype = DType::Int64});
  Tensor s = add(a, b), p = mul(a, b);
  REQUIRE(s.dtype() == DType::Int64);
  REQUIRE(s.to_vector<int64_t>() == std::vector<int64_t>{9, -5, 6, 8});
  REQUIRE(p.to_vector<int64_t>() == std::vector<int64_t>{14, -14, -27, 16});
  Tensor q = div(a, b);
  REQUIRE(q.dtype() == DType::Float32);
  require_close(q, {3.5, -3.5, -3.0, 1.0});
}

TEST_CASE("tensor-tensor type promotion", "[ops]") {
  Tensor i = ones({2}, {.dtype = DType::Int64});
  Tensor f = ones({2}, {.dtype = DType::Float32});
  Tensor d = ones({2}, {.dtype = DType::Float64});
  Tensor b = gt(f, 0.0);
  REQUIRE(add(i, f).dtype() == DType::Float32);
  REQUIRE(add(f, i).dtype() == DType::Float32);
  REQUIRE(mul(f, d).dtype() == DType::Float64);
  REQUIRE(sub(i, d).dtype() == DType::Float64);
  REQUIRE(add(b, i).dtype() == DType::Int64);
  Tensor bb = add(b, b);  // Bool arithmetic computes in Int64
  REQUIRE(bb.dtype() == DType::Int64);
  REQUIRE(bb.to_vector<int64_t>() == std::vector<int64_t>{2, 2});
  REQUIRE(add(b, f).dtype() == DType::Float32);
}

TEST_CASE("tensor-scalar ops keep the tensor's dtype unless an integer meets a fraction", "[ops]") {
  Tensor i = tensor({1, 2, 3}, {3}, {.dtype = DType::Int64});
  Tensor plus2 = add(i, 2.0);
  REQUIRE(plus2.dtype() == DType::Int64);
  REQUIRE(plus2.to_vector<int64_t>() == std::vector<int64_t>{3, 4, 5});
  Tensor half = add(i, 0.5);
  REQUIRE(half.dtype() == DType::Float32);
  require_close(half, {1.5, 2.5, 3.5});
  REQUIRE(mul(ones({2}, {.dtype = DType::Float64}), 2.5).dtype() == DType::Float64);
  REQUIRE(mul(ones({2}), 1e10).dtype() == DType::Float32);
  REQUIRE(add(gt(i, 1.0), 1.0).dtype() == DType::Int64);
  REQUIRE(div(i, 2.0).dtype() == DType::Float32);
  require_close(div(i, 2.0), {0.5, 1.0, 1.5});
  REQUIRE(add(i, std::numeric_limits<double>::infinity()).dtype() == DType::Float32);
}

TEST_CASE("operators with the scalar first", "[ops]") {
  Array a = map(random_array({7}, 21), [](double x) { return x + 3; });
  Tensor t = to_tensor(a, DType::Float64);
  require_close(1.0 - t, map(a, [](double x) { return 1 - x; }).data, 1e-14, 0);
  require_close(2.0 / t, map(a, [](double x) { return 2 / x; }).data, 1e-14, 0);
  require_close(3.0 * t, map(a, [](double x) { return 3 * x; }).data, 1e-14, 0);
  require_close(4.0 + t, map(a, [](double x) { return 4 + x; }).data, 1e-14, 0);
  Tensor i = tensor({1, 2, 4}, {3}, {.dtype = DType::Int64});
  Tensor r = 1.0 / i;
  REQUIRE(r.dtype() == DType::Float32);
  require_close(r, {1.0, 0.5, 0.25});
}

TEST_CASE("operators agree with the named functions", "[ops]") {
  Array a = random_array({3, 4}, 22), b = map(random_array({4}, 23), [](double x) { return x + 2; });
  Tensor ta = to_tensor(a), tb = to_tensor(b);
  require_close(ta + tb, values(add(ta, tb)), 0, 0);
  require_close(ta - tb, values(sub(ta, tb)), 0, 0);
  require_close(ta * tb, values(mul(ta, tb)), 0, 0);
  require_close(ta / tb, values(div(ta, tb)), 0, 0);
  require_close(-ta, map(a, [](double x) { return -x; }).data);
  require_close(ta + 1.5, values(add(ta, 1.5)), 0, 0);
  require_close(ta - 1.5, values(sub(ta, 1.5)), 0, 0);
  require_close(ta * 1.5, values(mul(ta, 1.5)), 0, 0);
  require_close(ta / 1.5, values(div(ta, 1.5)), 0, 0);
}

TEST_CASE("float math functions match libm in Float32 and Float64", "[ops]") {
  Array a = random_array({5, 11}, 24);
  Array pos = map(a, [](double x) { return x + 1.5; });
  for (DType dtype : {DType::Float32, DType::Float64}) {
    INFO("dtype " << dtype);
    const double rtol = dtype == DType::Float32 ? 1e-5 : 1e-12;
    Tensor t = to_tensor(a, dtype), p = to_tensor(pos, dtype);
    REQUIRE(exp(t).dtype() == dtype);
    require_close(exp(t), map(a, [](double x) { return std::exp(x); }).data, rtol, 1e-7);
    require_close(log(p), map(pos, [](double x) { return std::log(x); }).data, rtol, 1e-7);
    require_close(sqrt(p), map(pos, [](double x) { return std::sqrt(x); }).data, rtol, 1e-7);
    require_close(tanh(t), map(a, [](double x) { return std::tanh(x); }).data, rtol, 1e-7);
    require_close(sigmoid(t), map(a, [](double x) { return 1 / (1 + std::exp(-x)); }).data, rtol, 1e-7);
    require_close(gelu(t), map(a, gelu_ref).data, rtol, 1e-7);
    require_close(sin(t), map(a, [](double x) { return std::sin(x); }).data, rtol, 1e-7);
    require_close(cos(t), map(a, [](double x) { return std::cos(x); }).data, rtol, 1e-7);
    require_close(erf(t), map(a, [](double x) { return std::erf(x); }).data, rtol, 1e-7);
    require_close(expm1(t), map(a, [](double x) { return std::expm1(x); }).data, rtol, 1e-7);
    require_close(log1p(t), map(a, [](double x) { return std::log1p(x); }).data, rtol, 1e-7);  // NaN below -1 on both
  }
  // expm1 and log1p keep the digits that exp(x) - 1 and log(1 + x) cancel away near 0.
  const Tensor tiny = tensor({1e-10}, {1}, {.dtype = DType::Float64});
  require_close(expm1(tiny), {1.00000000005e-10}, 1e-15, 0);
  require_close(log1p(tiny), {9.9999999995e-11}, 1e-15, 0);
}

TEST_CASE("sigmoid stays finite at large magnitudes", "[ops]") {
  Tensor s = sigmoid(tensor({-1000.0, 1000.0, 0.0}, {3}));
  require_close(s, {0.0, 1.0, 0.5});
}

TEST_CASE("float math of Int64 and Bool tensors computes in Float32", "[ops]") {
  Tensor i = tensor({0, 1, 4}, {3}, {.dtype = DType::Int64});
  Tensor e = exp(i), r = sqrt(i);
  REQUIRE(e.dtype() == DType::Float32);
  require_close(e, {1.0, std::exp(1.0), std::exp(4.0)});
  require_close(r, {0.0, 1.0, 2.0});
  REQUIRE(tanh(gt(i, 0.0)).dtype() == DType::Float32);
  REQUIRE(log(i).dtype() == DType::Float32);
}

TEST_CASE("neg, abs and relu keep the dtype", "[ops]") {
  Tensor i = tensor({-3, 0, 5}, {3}, {.dtype = DType::Int64});
  REQUIRE(neg(i).to_vector<int64_t>() == std::vector<int64_t>{3, 0, -5});
  REQUIRE(abs(i).to_vector<int64_t>() == std::vector<int64_t>{3, 0, 5});
  REQUIRE(relu(i).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 5});
  REQUIRE(relu(i).dtype() == DType::Int64);
  Array a = random_array({13}, 25);
  Tensor f = to_tensor(a, DType::Float64);
  require_close(relu(f), map(a, [](double x) { return x < 0 ? 0 : x; }).data, 0, 0);
  require_close(abs(f), map(a, [](double x) { return std::abs(x); }).data, 0, 0);
  REQUIRE(std::isnan(relu(tensor({kNaN}, {1})).item<float>()));
}

TEST_CASE("pow with a scalar exponent and its dtypes", "[ops]") {
  Array a = map(random_array({9}, 26), [](double x) { return x + 1.5; });
  require_close(pow(to_tensor(a), 2.5), map(a, [](double x) { return std::pow(x, 2.5); }).data);
  Tensor i = tensor({-2, 3, 5}, {3}, {.dtype = DType::Int64});
  Tensor cube = pow(i, 3.0);
  REQUIRE(cube.dtype() == DType::Int64);
  REQUIRE(cube.to_vector<int64_t>() == std::vector<int64_t>{-8, 27, 125});
  Tensor root = pow(tensor({4, 9}, {2}, {.dtype = DType::Int64}), 0.5);
  REQUIRE(root.dtype() == DType::Float32);
  require_close(root, {2.0, 3.0});
  require_error([&] { pow(i, -1.0); }, {"pow", "negative", "-1"});
  require_close(i.pow(2.0), {4.0, 9.0, 25.0});
}

TEST_CASE("pow of two tensors broadcasts", "[ops]") {
  Array base = map(random_array({3, 1}, 27), [](double x) { return x + 2; });
  Array e = random_array({1, 4}, 28);
  require_close(pow(to_tensor(base), to_tensor(e)),
                binary(base, e, {3, 4}, [](double x, double y) { return std::pow(x, y); }).data);
}

TEST_CASE("maximum and minimum broadcast and propagate NaN", "[ops]") {
  Array a = random_array({4, 3}, 29), b = random_array({3}, 30);
  require_close(maximum(to_tensor(a), to_tensor(b)),
                binary(a, b, {4, 3}, [](double x, double y) { return std::max(x, y); }).data);
  require_close(minimum(to_tensor(a), to_tensor(b)),
                binary(a, b, {4, 3}, [](double x, double y) { return std::min(x, y); }).data);
  Tensor n = maximum(tensor({kNaN, 1.0}, {2}), tensor({0.0, kNaN}, {2}));
  auto v = n.to_vector<float>();
  REQUIRE(std::isnan(v[0]));
  REQUIRE(std::isnan(v[1]));
}

TEST_CASE("clamp of floats and integers", "[ops]") {
  Array a = random_array({17}, 31);
  require_close(clamp(to_tensor(a), -0.25, 0.5),
                map(a, [](double x) { return std::min(std::max(x, -0.25), 0.5); }).data);
  Tensor i = tensor({-5, 0, 7}, {3}, {.dtype = DType::Int64});
  Tensor ci = clamp(i, -1, 3);
  REQUIRE(ci.dtype() == DType::Int64);
  REQUIRE(ci.to_vector<int64_t>() == std::vector<int64_t>{-1, 0, 3});
  Tensor cf = clamp(i, -0.5, 2.5);
  REQUIRE(cf.dtype() == DType::Float32);
  require_close(cf, {-0.5, 0.0, 2.5});
}

TEST_CASE("comparisons of tensors return Bool and broadcast", "[ops]") {
  Tensor a = tensor({1.0, 2.0, 3.0}, {3, 1});
  Tensor b = tensor({2.0, 2.0}, {1, 2});
  Tensor r = lt(a, b);
  REQUIRE(r.dtype() == DType::Bool);
  REQUIRE(r.shape() == Shape{3, 2});
  REQUIRE(r.to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0, 0, 0, 0});
  REQUIRE(le(a, b).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 1, 1, 0, 0});
  REQUIRE(gt(a, b).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0, 0, 1, 1});
  REQUIRE(ge(a, b).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 1, 1, 1});
  REQUIRE(eq(a, b).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 1, 0, 0});
  REQUIRE(ne(a, b).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0, 0, 1, 1});
  Tensor i = tensor({1, 2, 3}, {3, 1}, {.dtype = DType::Int64});
  REQUIRE(eq(i, a).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 1});
  REQUIRE(eq(lt(a, b), lt(a, b)).dtype() == DType::Bool);
}

TEST_CASE("comparisons with a scalar, including an integer tensor against a fraction", "[ops]") {
  Tensor i = tensor({1, 2, 3}, {3}, {.dtype = DType::Int64});
  REQUIRE(lt(i, 2.5).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0});
  REQUIRE(gt(i, 2.5).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1});
  REQUIRE(eq(i, 2.0).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 0});
  REQUIRE(ne(i, 2.0).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  REQUIRE(le(i, 2.0).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0});
  REQUIRE(ge(i, 2.0).dtype() == DType::Bool);
}

TEST_CASE("where broadcasts condition and both branches", "[ops]") {
  Array a = random_array({3, 4}, 32), b = random_array({4}, 33);
  Tensor cond = gt(tensor({1.0, -1.0, 1.0}, {3, 1}), 0.0);
  Tensor r = where(cond, to_tensor(a), to_tensor(b));
  REQUIRE(r.shape() == Shape{3, 4});
  std::vector<double> want;
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) want.push_back(i == 1 ? b.at({j}) : a.at({i, j}));
  require_close(r, want);
  REQUIRE(where(cond, ones({1}, {.dtype = DType::Int64}), zeros({1})).dtype() == DType::Float32);
  require_error([&] { where(ones({3}), ones({3}), ones({3})); }, {"where", "Bool", "Float32"});
}

TEST_CASE("arithmetic on BFloat16 and Float16 errors and says to convert", "[ops]") {
  Tensor h = ones({2}).to(DType::BFloat16);
  require_error([&] { add(h, h); }, {"add", "BFloat16"});
  require_error([&] { add(h, 1.0); }, {"add", "BFloat16"});
  require_error([&] { exp(h); }, {"exp", "BFloat16"});
  require_error([&] { sum(h); }, {"sum", "BFloat16"});
  require_error([&] { matmul(h, h); }, {"matmul", "BFloat16"});
  require_error([&] { clamp(h, 0, 1); }, {"clamp", "BFloat16"});
  Tensor half = ones({2}).to(DType::Float16);
  require_error([&] { add(half, half); }, {"add", "Float16", "storage-only"});
  require_error([&] { exp(half); }, {"exp", "Float16"});
  require_error([&] { sum(half); }, {"sum", "Float16"});
  require_error([&] { matmul(half, half); }, {"matmul", "Float16"});
}

TEST_CASE("mixing cpu:0 and cpu:1 in a binary op names both devices", "[ops]") {
  CpuDevicesGuard devices(2);
  Tensor a = ones({2}, {.device = Device("cpu:0")});
  Tensor b = ones({2}, {.device = Device("cpu:1")});
  require_error([&] { add(a, b); }, {"add: expected all tensors on one device, got cpu:0 and cpu:1"});
  require_error([&] { a* b; }, {"mul", "cpu:0", "cpu:1"});
  require_error([&] { where(gt(a, 0.0), a, b); }, {"where", "cpu:0", "cpu:1"});
}

TEST_CASE("elementwise ops on cpu:1 leave the result on cpu:1", "[ops]") {
  CpuDevicesGuard devices(2);
  Tensor a = full({3}, 2.0, {.device = Device("cpu:1")});
  Tensor r = exp(a + a);
  REQUIRE(r.device() == Device("cpu:1"));
  require_close(r, {std::exp(4.0), std::exp(4.0), std::exp(4.0)});
}

TEST_CASE("shapes that do not broadcast name both shapes", "[ops]") {
  require_error([] { add(ones({2, 3}), ones({4})); }, {"add", "[2, 3]", "[4]"});
  require_error([] { where(gt(ones({2}), 0.0), ones({3}), ones({3})); }, {"where", "[2]", "[3]"});
}

TEST_CASE("undefined tensors are errors naming the op", "[ops]") {
  Tensor undefined;
  require_error([&] { add(undefined, ones({1})); }, {"add", "undefined"});
  require_error([&] { relu(undefined); }, {"relu", "undefined"});
  require_error([&] { sum(undefined); }, {"sum", "undefined"});
  require_error([&] { matmul(ones({1}), undefined); }, {"matmul", "undefined"});
  require_error([&] { reshape(undefined, {1}); }, {"reshape", "undefined"});
}

TEST_CASE("masked_fill puts the value where the mask is true, the mask broadcast", "[ops]") {
  const Tensor x = tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {2, 3});
  const Tensor row_mask = tensor(std::vector<int64_t>{1, 0, 1}, {3}, {.dtype = DType::Bool});
  require_close(masked_fill(x, row_mask, -1.0), {-1, 2, -1, -1, 5, -1}, 0, 0);
  const Tensor ints = tensor(std::vector<int64_t>{1, 2, 3}, {3}, {.dtype = DType::Int64});
  CHECK(masked_fill(ints, row_mask, 9.0).dtype() == DType::Int64);
  require_error([&] { masked_fill(x, tensor({1.0f}, {1}), 0.0); }, {"masked_fill", "Bool", "Float32"});
  require_error([&] { masked_fill(x, tensor(std::vector<int64_t>{1, 0}, {2}, {.dtype = DType::Bool}), 0.0); },
                {"masked_fill"});
}

// Copies (autograd/copy_ops.cpp): contiguous copies only when needed, clone, casts, moves
// between CPU devices, cat/stack/copy_ against naive loops, item/to_vector.
#include <cmath>

#include "core/cpu_devices_guard.h"
#include "reference.h"

using namespace mg;
using namespace mg::test;

TEST_CASE("contiguous returns the tensor itself when it is already contiguous", "[ops]") {
  Tensor t = arange(12).reshape({3, 4});
  REQUIRE(t.contiguous().is_same(t));
  REQUIRE(t.slice(0, 1, 3).contiguous().data_ptr() == t.slice(0, 1, 3).data_ptr());
  REQUIRE(t.slice(1, 0, 4, 2).unsqueeze(0).slice(0, 0, 1).contiguous().storage() != t.storage());
}

TEST_CASE("contiguous copies a strided view into row-major order", "[ops]") {
  Tensor t = arange(12).reshape({3, 4});
  Tensor c = t.transpose(0, 1).contiguous();
  REQUIRE(c.is_contiguous());
  REQUIRE(c.storage() != t.storage());
  REQUIRE(c.to_vector<float>() == std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  Tensor e = tensor({1.0, 2.0}, {2, 1}).expand({2, 3}).contiguous();
  REQUIRE(e.strides() == Strides{3, 1});
  REQUIRE(e.to_vector<float>() == std::vector<float>{1, 1, 1, 2, 2, 2});
}

TEST_CASE("clone always copies", "[ops]") {
  Tensor t = arange(6, {.dtype = DType::Int64});
  Tensor c = t.clone();
  REQUIRE(c.storage() != t.storage());
  REQUIRE(c.dtype() == DType::Int64);
  copy_(c, full({6}, 0.0));
  REQUIRE(t.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
  REQUIRE(t.slice(0, 0, 6, 2).clone().to_vector<int64_t>() == std::vector<int64_t>{0, 2, 4});
}

TEST_CASE("to(dtype) converts every element and returns the tensor for the same dtype", "[ops]") {
  Tensor f = tensor({-1.75, 0.0, 2.5, 3.0}, {4});
  REQUIRE(f.to(DType::Float32).is_same(f));
  Tensor i = f.to(DType::Int64);
  REQUIRE(i.dtype() == DType::Int64);
  REQUIRE(i.to_vector<int64_t>() == std::vector<int64_t>{-1, 0, 2, 3});
  Tensor b = f.to(DType::Bool);
  REQUIRE(b.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1, 1});
  Tensor d = f.transpose(0, 0).to(DType::Float64);
  REQUIRE(d.to_vector<double>() == std::vector<double>{-1.75, 0.0, 2.5, 3.0});
  REQUIRE(f.slice(0, 0, 4, 3).to(DType::Float64).to_vector<double>() == std::vector<double>{-1.75, 3.0});
}

TEST_CASE("BFloat16 round trip keeps exact values and rounds others to 8 bits", "[ops]") {
  Tensor f = tensor({1.0, -0.5, 3.140625, 256.0, 1.0 / 3.0}, {5});
  Tensor h = f.to(DType::BFloat16);
  REQUIRE(h.dtype() == DType::BFloat16);
  REQUIRE(h.element_size() == 2);
  auto back = h.to(DType::Float32).to_vector<float>();
  REQUIRE(back[0] == 1.0f);
  REQUIRE(back[1] == -0.5f);
  REQUIRE(back[2] == 3.140625f);
  REQUIRE(back[3] == 256.0f);
  REQUIRE(std::abs(back[4] - 1.0f / 3.0f) < 1.0f / 256.0f);
  REQUIRE(back[4] != 1.0f / 3.0f);
  REQUIRE(h.reshape({5}).to_vector<double>()[2] == 3.140625);
}

TEST_CASE("Float16 round trip keeps exact values and rounds others to 11 bits", "[ops]") {
  Tensor f = tensor({1.0, -0.5, 3.140625, 65504.0, 1.0 / 3.0, 70000.0, std::ldexp(3.0, -24)}, {7});
  Tensor h = f.to(DType::Float16);
  REQUIRE(h.dtype() == DType::Float16);
  REQUIRE(h.element_size() == 2);
  auto back = h.to(DType::Float32).to_vector<float>();
  REQUIRE(back[0] == 1.0f);
  REQUIRE(back[1] == -0.5f);
  REQUIRE(back[2] == 3.140625f);
  REQUIRE(back[3] == 65504.0f);
  REQUIRE(std::abs(back[4] - 1.0f / 3.0f) <= 1.0f / 8192.0f);  // half the step in [1/4, 1/2), 2^-12
  REQUIRE(back[4] != 1.0f / 3.0f);
  REQUIRE(std::isinf(back[5]));                                 // beyond 65520: infinity
  REQUIRE(back[6] == float(std::ldexp(3.0, -24)));              // a subnormal, exactly
  REQUIRE(h.reshape({7}).to_vector<double>()[2] == 3.140625);
}

TEST_CASE("to(Device) moves between cpu:0 and cpu:1", "[ops]") {
  CpuDevicesGuard devices(2);
  Tensor a = arange(6).reshape({2, 3});
  REQUIRE(a.to(Device("cpu:0")).is_same(a));
  Tensor b = a.to(Device("cpu:1"));
  REQUIRE(b.device() == Device("cpu:1"));
  REQUIRE(b.storage() != a.storage());
  REQUIRE(b.to_vector<float>() == a.to_vector<float>());
  Tensor back = b.transpose(0, 1).to(Device("cpu"));
  REQUIRE(back.device() == Device("cpu:0"));
  REQUIRE(back.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  REQUIRE(zeros({0}).to(Device("cpu:1")).device() == Device("cpu:1"));
  require_error([&] { add(a, b); }, {"add: expected all tensors on one device, got cpu:0 and cpu:1"});
}

TEST_CASE("to(Device) of a missing CUDA device is an error naming it", "[ops]") {
  require_error([] { ones({2}).to(Device("cuda:7")); }, {"cuda:7"});
}

TEST_CASE("cat along each dim matches a loop", "[ops]") {
  Array a = random_array({2, 3}, 80), b = random_array({2, 5}, 81), c = random_array({4, 3}, 82);
  Tensor ta = to_tensor(a, DType::Float64), tb = to_tensor(b, DType::Float64),
         tc = to_tensor(c, DType::Float64);
  Tensor cols = cat({ta, tb}, 1);
  REQUIRE(cols.shape() == Shape{2, 8});
  std::vector<double> want;
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) want.push_back(a.at({i, j}));
    for (int64_t j = 0; j < 5; ++j) want.push_back(b.at({i, j}));
  }
  require_close(cols, want, 0, 0);
  REQUIRE(cat({ta, tb}, -1).shape() == Shape{2, 8});
  Tensor rows = cat({ta, tc, ta});
  REQUIRE(rows.shape() == Shape{8, 3});
  std::vector<double> want_rows = a.data;
  want_rows.insert(want_rows.end(), c.data.begin(), c.data.end());
  want_rows.insert(want_rows.end(), a.data.begin(), a.data.end());
  require_close(rows, want_rows, 0, 0);
}

TEST_CASE("cat of strided inputs, mixed dtypes and empty pieces", "[ops]") {
  Tensor t = arange(6).reshape({2, 3});
  Tensor c = cat({t.transpose(0, 1), t.transpose(0, 1).slice(0, 0, 3, 2)});  // (3, 2) + (2, 2)
  REQUIRE(c.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5, 0, 3, 2, 5});
  Tensor mixed = cat({tensor({1, 2}, {2}, {.dtype = DType::Int64}), tensor({0.5}, {1})});
  REQUIRE(mixed.dtype() == DType::Float32);
  require_close(mixed, {1.0, 2.0, 0.5});
  Tensor skip = cat({zeros({0}), t, zeros({0, 3})});  // a [0] tensor is skipped whatever its rank
  REQUIRE(skip.shape() == Shape{2, 3});
  REQUIRE(cat({zeros({0}), zeros({0})}).shape() == Shape{0});
}

TEST_CASE("cat errors name the mismatching tensor and shapes", "[ops]") {
  require_error([] { cat({ones({2, 3}), ones({2, 4})}, 0); }, {"cat", "tensor 1", "[2, 4]", "[2, 3]"});
  require_error([] { cat({ones({2, 3}), ones({2, 3, 1})}); }, {"cat", "tensor 1", "[2, 3, 1]"});
  require_error([] { cat({}); }, {"cat", "non-empty"});
  require_error([] { cat({full({}, 1.0)}); }, {"cat", "0-d"});
  require_error([] { cat({ones({2}), ones({2})}, 1); }, {"cat", "dim 1"});
  CpuDevicesGuard devices(2);
  require_error([] { cat({ones({2}), ones({2}, {.device = Device("cpu:1")})}); }, {"cat", "cpu:0", "cpu:1"});
}

TEST_CASE("stack inserts a new dim at any position", "[ops]") {
  Tensor a = tensor({1.0, 2.0, 3.0}, {3}), b = tensor({4.0, 5.0, 6.0}, {3});
  Tensor s0 = stack({a, b});
  REQUIRE(s0.shape() == Shape{2, 3});
  REQUIRE(s0.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor s1 = stack({a, b}, -1);
  REQUIRE(s1.shape() == Shape{3, 2});
  REQUIRE(s1.to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
  REQUIRE(stack({full({}, 1.0), full({}, 2.0)}).shape() == Shape{2});
  require_error([&] { stack({a, ones({2})}); }, {"stack", "tensor 1", "[2]", "[3]"});
  require_error([&] { stack({a, b}, 2); }, {"stack", "dim 2"});
}

TEST_CASE("copy_ broadcasts and converts into a strided destination", "[ops]") {
  Tensor dst = zeros({3, 4}, {.dtype = DType::Float64});
  copy_(dst.slice(1, 0, 4, 2), tensor({1, 2}, {2}, {.dtype = DType::Int64}));
  REQUIRE(dst.to_vector<double>() == std::vector<double>{1, 0, 2, 0, 1, 0, 2, 0, 1, 0, 2, 0});
  require_error([&] { copy_(dst, ones({2, 4})); }, {"copy_", "[2, 4]", "[3, 4]"});
  require_error([&] { copy_(dst, ones({3, 4, 1})); }, {"copy_", "[3, 4, 1]"});
  require_error([&] { copy_(ones({1}).expand({3}), ones({3})); }, {"copy_", "one memory location"});
}

TEST_CASE("copy_ from an overlapping view of the same storage reads before it writes", "[ops]") {
  Tensor t = arange(6);
  copy_(t.slice(0, 1, 6), t.slice(0, 0, 5));  // shift right by one
  REQUIRE(t.to_vector<float>() == std::vector<float>{0, 0, 1, 2, 3, 4});
  copy_(t, t);
  REQUIRE(t.to_vector<float>() == std::vector<float>{0, 0, 1, 2, 3, 4});
}

TEST_CASE("copy_ between devices", "[ops]") {
  CpuDevicesGuard devices(2);
  Tensor dst = zeros({2, 2}, {.device = Device("cpu:1")});
  copy_(dst, tensor({1.0, 2.0}, {2}));
  REQUIRE(dst.device() == Device("cpu:1"));
  REQUIRE(dst.to_vector<float>() == std::vector<float>{1, 2, 1, 2});
}

TEST_CASE("item and to_vector convert to the asked type", "[ops]") {
  Tensor t = tensor({1.5, -2.5}, {2});
  REQUIRE(t.to_vector<double>() == std::vector<double>{1.5, -2.5});
  REQUIRE(t.to_vector<int64_t>() == std::vector<int64_t>{1, -2});
  REQUIRE(t.slice(0, 1, 2).item<float>() == -2.5f);
  REQUIRE(sum(t).item<double>() == -1.0);
  REQUIRE(full({1, 1}, 7.0, {.dtype = DType::Int64}).item<int64_t>() == 7);
  require_error([&] { t.item<float>(); }, {"item", "[2]"});
  REQUIRE(zeros({0}).to_vector<float>().empty());
}

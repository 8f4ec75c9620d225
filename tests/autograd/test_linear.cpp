// linear (autograd/matmul.cpp, F.linear) against naive loops written from its definition,
// gradcheck of every input on contiguous and strided inputs, its errors, and its gradients
// written into gradient destinations (autograd/tape.h).
#include <catch2/catch.hpp>

#include "multigrad/autograd/gradcheck.h"
#include "multigrad/autograd/nn_ops.h"
#include "core/cpu_devices_guard.h"
#include "reference.h"

using namespace mg;
using namespace mg::test;

namespace {

// y[r, o] = sum_i x[r, i] w[o, i] + b[o], x read as rows of its last dim.
Array linear_ref(const Array& x, const Array& w, const Array* b) {
  const int64_t in = w.shape[1], out = w.shape[0], rows = in == 0 ? count(Shape(x.shape.begin(), x.shape.end() - 1))
                                                                    : x.numel() / in;
  Array y{x.shape, {}};
  y.shape.back() = out;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b ? b->data[size_t(o)] : 0.0;
      for (int64_t i = 0; i < in; ++i) acc += x.data[size_t(r * in + i)] * w.data[size_t(o * in + i)];
      y.data.push_back(acc);
    }
  return y;
}

void check_linear(const Shape& x_shape, int64_t out, bool bias, DType dtype) {
  INFO("x " << to_string(x_shape) << ", out " << out << ", bias " << bias << ", " << dtype);
  const int64_t in = x_shape.back();
  const Array x = random_array(x_shape, 3), w = random_array({out, in}, 4), b = random_array({out}, 5);
  const Array want = linear_ref(x, w, bias ? &b : nullptr);
  const Tensor got = linear(to_tensor(x, dtype), to_tensor(w, dtype), bias ? to_tensor(b, dtype) : Tensor());
  REQUIRE(got.shape() == want.shape);
  REQUIRE(got.dtype() == dtype);
  require_close(got, want.data, dtype == DType::Float32 ? 1e-4 : 1e-12, 1e-5);
}

Tensor f64_leaf(const Shape& shape, uint64_t seed) {
  return tensor(pseudo_random(size_t(numel_of(shape)), seed), shape, {.dtype = DType::Float64, .requires_grad = true});
}

}  // namespace

TEST_CASE("linear matches its definition for 1-d, 2-d and 3-d inputs", "[ops]") {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    check_linear({5}, 3, true, dtype);
    check_linear({7, 5}, 3, true, dtype);
    check_linear({7, 5}, 3, false, dtype);
    check_linear({2, 3, 4}, 6, true, dtype);
    check_linear({0, 4}, 6, true, dtype);  // no rows
    check_linear({3, 0}, 2, true, dtype);  // no features: the bias alone
  }
}

TEST_CASE("linear equals matmul with the transposed weight plus the bias", "[ops]") {
  const Tensor x = randn({9, 6}).transpose(0, 1).slice(0, 0, 6, 2);  // (3, 9), not contiguous
  const Tensor w = randn({4, 9}), b = randn({4});
  REQUIRE_FALSE(x.is_contiguous());
  REQUIRE(values(linear(x, w, b)) == values(add(matmul(x, w.transpose(0, 1)), b)));
}

TEST_CASE("gradcheck linear with and without bias", "[autograd]") {
  REQUIRE(gradcheck([](const TensorList& t) { return linear(t[0], t[1], t[2]); },
                    {f64_leaf({4, 3}, 1), f64_leaf({5, 3}, 2), f64_leaf({5}, 3)}));
  REQUIRE(gradcheck([](const TensorList& t) { return linear(t[0], t[1]); }, {f64_leaf({2, 2, 3}, 4), f64_leaf({2, 3}, 5)}));
  REQUIRE(gradcheck([](const TensorList& t) { return linear(t[0], t[1], t[2]); },
                    {f64_leaf({3}, 6), f64_leaf({2, 3}, 7), f64_leaf({2}, 8)}));
  // A strided input and weight, and a weight that does not require grad.
  Tensor x = tensor(pseudo_random(24, 9), {3, 8}, {.dtype = DType::Float64}).slice(1, 0, 8, 2).requires_grad_();
  Tensor w = tensor(pseudo_random(8, 10), {4, 2}, {.dtype = DType::Float64}).transpose(0, 1);
  REQUIRE(gradcheck([&w](const TensorList& t) { return linear(t[0], w, t[1]); }, {x, f64_leaf({2}, 11)}));
  REQUIRE(gradcheck([](const TensorList& t) { return linear(t[0], t[1], t[2]); },
                    {x, tensor(pseudo_random(8, 12), {4, 2}, {.dtype = DType::Float64}).transpose(0, 1).requires_grad_(),
                     f64_leaf({2}, 13)}));
}

TEST_CASE("linear errors name the shapes, dtypes and devices", "[ops]") {
  const Tensor x = randn({2, 3}), w = randn({4, 3}), b = randn({4});
  require_error([&] { linear(randn({2, 5}), w, b); }, {"input of shape [2, 5]", "in_features 3", "[4, 3]"});
  require_error([&] { linear(x, randn({4, 3, 1}), b); }, {"2-d weight", "[4, 3, 1]"});
  require_error([&] { linear(x, w, randn({3})); }, {"bias of shape [4]", "got [3]"});
  require_error([&] { linear(x, w.to(DType::Float64), b); }, {"Float32 and Float64"});
  require_error([&] { linear(x.to(DType::Int64), w.to(DType::Int64)); }, {"floating", "Int64"});
  require_error([&] { linear(x, w, b.to(DType::Float64)); }, {"bias dtype Float64", "weight dtype Float32"});
  CpuDevicesGuard devices(2);
  require_error([&] { linear(x, w.to(Device("cpu:1")), b); }, {"linear", "cpu:0", "cpu:1"});
  require_error([&] { linear(x, w, b.to(Device("cpu:1"))); }, {"linear", "cpu:0", "cpu:1"});
}

TEST_CASE("linear writes its weight and bias gradients into their destinations", "[autograd]") {
  const Tensor x = f64_leaf({6, 3}, 20);
  Tensor w = f64_leaf({4, 3}, 21), b = f64_leaf({4}, 22);
  // The reference: the same gradients without destinations.
  sum(mul(linear(x, w, b), linear(x, w, b))).backward();
  const std::vector<double> want_w = values(w.grad()), want_b = values(b.grad()), want_x = values(x.grad());
  w.set_grad(Tensor());
  b.set_grad(Tensor());
  x.set_grad(Tensor());

  const Tensor flat = full({16}, -7.0, {.dtype = DType::Float64});  // one buffer for both, as a DDP bucket
  const Tensor w_slot = flat.slice(0, 0, 12).view({4, 3}), b_slot = flat.slice(0, 12, 16);
  set_grad_destination(w, w_slot);
  set_grad_destination(b, b_slot);
  sum(mul(linear(x, w, b), linear(x, w, b))).backward();  // two uses: written, then added to
  REQUIRE(w.grad().is_same(w_slot));
  REQUIRE(b.grad().is_same(b_slot));
  require_close(flat.slice(0, 0, 12), want_w, 1e-12);
  require_close(flat.slice(0, 12, 16), want_b, 1e-12);
  require_close(x.grad(), want_x, 1e-12);  // x has no destination: a gradient of its own
  REQUIRE(x.grad().storage() != flat.storage());
}

TEST_CASE("linear of a weight with itself: the destination gets both gradients", "[autograd]") {
  // linear(w, w) (in = out): the input's gradient reaches the same leaf after the node returns,
  // so the weight's gradient must not have been written into the destination already.
  Tensor w = f64_leaf({3, 3}, 23), b = f64_leaf({3}, 24);
  sum(mul(linear(w, w, b), linear(w, w, b))).backward();
  const std::vector<double> want_w = values(w.grad());
  w.set_grad(Tensor());
  const Tensor slot = zeros({3, 3}, {.dtype = DType::Float64});
  set_grad_destination(w, slot);
  sum(mul(linear(w, w, b), linear(w, w, b))).backward();
  REQUIRE(w.grad().is_same(slot));
  require_close(slot, want_w, 1e-12);
  // And a bias that is also the input: linear(b, w, b).
  Tensor b2 = f64_leaf({3}, 25), w2 = f64_leaf({3, 3}, 26);
  sum(mul(linear(b2, w2, b2), linear(b2, w2, b2))).backward();
  const std::vector<double> want_b = values(b2.grad());
  b2.set_grad(Tensor());
  const Tensor b_slot = zeros({3}, {.dtype = DType::Float64});
  set_grad_destination(b2, b_slot);
  sum(mul(linear(b2, w2, b2), linear(b2, w2, b2))).backward();
  require_close(b_slot, want_b, 1e-12);
}

// matmul (autograd/matmul.cpp) in every rank combination against a naive triple loop written
// from torch.matmul's definition, on contiguous, transposed, sliced and broadcast operands.
#include "core/cpu_devices_guard.h"
#include "reference.h"

using namespace mg;
using namespace mg::test;

namespace {

// torch.matmul by definition: 1-d operands become (1, K) / (K, 1), batch dims broadcast,
// the added dims are dropped.
Array matmul_ref(const Array& a, const Array& b) {
  Array a2 = a, b2 = b;
  if (a.shape.size() == 1) a2.shape = {1, a.shape[0]};
  if (b.shape.size() == 1) b2.shape = {b.shape[0], 1};
  const int64_t m = a2.shape[a2.shape.size() - 2], k = a2.shape.back(), n = b2.shape.back();
  Shape batch_a(a2.shape.begin(), a2.shape.end() - 2), batch_b(b2.shape.begin(), b2.shape.end() - 2);
  const size_t nb = std::max(batch_a.size(), batch_b.size());
  batch_a.insert(batch_a.begin(), nb - batch_a.size(), 1);
  batch_b.insert(batch_b.begin(), nb - batch_b.size(), 1);
  Shape batch(nb);
  for (size_t d = 0; d < nb; ++d) batch[d] = std::max(batch_a[d], batch_b[d]);
  Array r{{}, {}};
  for (int64_t bi = 0; bi < count(batch); ++bi) {
    auto index = unravel(bi, batch);
    int64_t fa = 0, fb = 0;
    for (size_t d = 0; d < nb; ++d) {
      fa = fa * batch_a[d] + (batch_a[d] == 1 ? 0 : index[d]);
      fb = fb * batch_b[d] + (batch_b[d] == 1 ? 0 : index[d]);
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc += a2.data[size_t(fa * m * k + i * k + p)] * b2.data[size_t(fb * k * n + p * n + j)];
        r.data.push_back(acc);
      }
  }
  r.shape = batch;
  if (a.shape.size() > 1) r.shape.push_back(m);
  if (b.shape.size() > 1) r.shape.push_back(n);
  return r;
}

void check_matmul(const Shape& sa, const Shape& sb, DType dtype = DType::Float64) {
  INFO("shapes " << to_string(sa) << " @ " << to_string(sb) << ", dtype " << dtype);
  Array a = random_array(sa, 50), b = random_array(sb, 51);
  Array want = matmul_ref(a, b);
  Tensor got = matmul(to_tensor(a, dtype), to_tensor(b, dtype));
  REQUIRE(got.shape() == want.shape);
  REQUIRE(got.dtype() == dtype);
  require_close(got, want.data, dtype == DType::Float32 ? 1e-4 : 1e-12, 1e-5);
}

}  // namespace

TEST_CASE("matmul of 2-d matrices with odd sizes", "[ops]") {
  check_matmul({7, 5}, {5, 3}, DType::Float32);
  check_matmul({1, 9}, {9, 1}, DType::Float32);
  check_matmul({33, 17}, {17, 29});
}

TEST_CASE("matmul of Int64 matrices is exact", "[ops]") {
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, {.dtype = DType::Int64});
  Tensor b = tensor({7, 8, 9, 10, 11, 12}, {3, 2}, {.dtype = DType::Int64});
  Tensor c = matmul(a, b);
  REQUIRE(c.dtype() == DType::Int64);
  REQUIRE(c.to_vector<int64_t>() == std::vector<int64_t>{58, 64, 139, 154});
}

TEST_CASE("matmul of two vectors is a 0-d dot product", "[ops]") {
  Tensor d = matmul(tensor({1.0, 2.0, 3.0}, {3}), tensor({4.0, 5.0, 6.0}, {3}));
  REQUIRE(d.dim() == 0);
  REQUIRE(d.item<float>() == 32.0f);
  check_matmul({11}, {11});
}

TEST_CASE("matmul of a vector with a matrix on either side", "[ops]") {
  check_matmul({4}, {4, 6});
  check_matmul({6, 4}, {4});
  check_matmul({5}, {3, 5, 2});
  check_matmul({2, 3, 5}, {5});
}

TEST_CASE("batched matmul of 3-d and 4-d operands", "[ops]") {
  check_matmul({3, 4, 5}, {3, 5, 2});
  check_matmul({2, 3, 4, 5}, {2, 3, 5, 6}, DType::Float32);
}

TEST_CASE("batched matmul broadcasts batch dims", "[ops]") {
  check_matmul({2, 1, 3, 4}, {5, 4, 2});
  check_matmul({1, 3, 4}, {6, 4, 2});
  check_matmul({3, 4}, {2, 4, 5});
  check_matmul({2, 3, 4}, {4, 5});
  check_matmul({2, 2, 3, 4}, {4, 5}, DType::Float32);
}

TEST_CASE("matmul reads transposed operands", "[ops]") {
  Array a = random_array({5, 7}, 52), b = random_array({3, 5}, 53);
  Tensor at = to_tensor(a, DType::Float64).transpose(0, 1);  // (7, 5)
  Tensor bt = to_tensor(b, DType::Float64).transpose(0, 1);  // (5, 3)
  require_close(matmul(at, bt), matmul_ref(permute(a, {1, 0}), permute(b, {1, 0})).data, 1e-12, 1e-12);
  Array c = random_array({2, 4, 3}, 54);
  Tensor ct = to_tensor(c, DType::Float64).transpose(1, 2);  // (2, 3, 4)
  Array d = random_array({4, 6}, 55);
  require_close(matmul(ct, to_tensor(d, DType::Float64)), matmul_ref(permute(c, {0, 2, 1}), d).data, 1e-12,
                1e-12);
}

TEST_CASE("matmul reads step-sliced and expanded operands", "[ops]") {
  Array a = random_array({4, 10}, 56), b = random_array({5, 3}, 57);
  Tensor as = to_tensor(a, DType::Float64).slice(1, 0, 10, 2);  // (4, 5), column stride 2
  Array a_ref{{4, 5}, {}};
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 10; j += 2) a_ref.data.push_back(a.at({i, j}));
  require_close(matmul(as, to_tensor(b, DType::Float64)), matmul_ref(a_ref, b).data, 1e-12, 1e-12);

  // Batch strides (x, 0) collapse into no single stride: the operand is copied.
  Array e = random_array({2, 1, 3, 4}, 58), f = random_array({2, 3, 4, 2}, 59);
  Tensor ee = to_tensor(e, DType::Float64).expand({2, 3, 3, 4});
  Array e_full = binary(e, Array{{2, 3, 3, 4}, std::vector<double>(72, 0.0)}, {2, 3, 3, 4},
                        [](double x, double) { return x; });
  require_close(matmul(ee, to_tensor(f, DType::Float64)), matmul_ref(e_full, f).data, 1e-12, 1e-12);
}

TEST_CASE("matmul with empty dims", "[ops]") {
  Tensor zk = matmul(ones({3, 0}), ones({0, 4}));
  REQUIRE(zk.shape() == Shape{3, 4});
  require_close(zk, std::vector<double>(12, 0.0));
  REQUIRE(matmul(ones({0, 2}), ones({2, 4})).shape() == Shape{0, 4});
  REQUIRE(matmul(ones({0, 3, 2}), ones({2, 4})).shape() == Shape{0, 3, 4});
  REQUIRE(matmul(zeros({0}), zeros({0})).item<float>() == 0.0f);
}

TEST_CASE("matmul backward with an empty inner dim gives empty gradients", "[ops]") {
  // K = 0: the product is zeros (3, 4); a's gradient (3, 0) and b's (0, 4) are empty.
  for (const Shape& a_shape : {Shape{3, 0}, Shape{2, 3, 0}}) {
    Tensor a = ones(a_shape, {.requires_grad = true}), b = ones({0, 4}, {.requires_grad = true});
    matmul(a, b).sum().backward();
    CHECK(a.grad().shape() == a_shape);
    CHECK(b.grad().shape() == Shape{0, 4});
  }
  // N = 0 likewise.
  Tensor a = ones({3, 2}, {.requires_grad = true}), b = ones({2, 0}, {.requires_grad = true});
  matmul(a, b).sum().backward();
  require_close(a.grad(), std::vector<double>(6, 0.0));
  CHECK(b.grad().shape() == Shape{2, 0});
}

TEST_CASE("matmul promotes mixed dtypes", "[ops]") {
  Tensor a = tensor({1, 2}, {1, 2}, {.dtype = DType::Int64});
  Tensor b = tensor({0.5, 0.25}, {2, 1});
  Tensor c = matmul(a, b);
  REQUIRE(c.dtype() == DType::Float32);
  require_close(c, {1.0});
}

TEST_CASE("matmul errors name both shapes", "[ops]") {
  require_error(
      [] {
        matmul(ones({2, 3}), ones({2, 3}));
      },
      {"matmul: shapes cannot be multiplied ([2, 3] and [2, 3])"});
  require_error([] { matmul(ones({3}), ones({4})); }, {"matmul", "[3]", "[4]"});
  require_error([] { matmul(ones({2, 2, 3}), ones({3, 3, 4})); }, {"matmul", "[2]", "[3]"});
  require_error([] { matmul(full({}, 1.0), ones({3})); }, {"matmul", "[]", "[3]"});
  require_error([] { matmul(gt(ones({2, 2}), 0.0), gt(ones({2, 2}), 0.0)); }, {"matmul", "Bool"});
}

TEST_CASE("matmul across devices names both devices", "[ops]") {
  CpuDevicesGuard devices(2);
  require_error(
      [] {
        matmul(ones({2, 2}), ones({2, 2}, {.device = Device("cpu:1")}));
      },
      {"matmul", "cpu:0", "cpu:1"});
  Tensor c = matmul(ones({2, 3}, {.device = Device("cpu:1")}), ones({3, 2}, {.device = Device("cpu:1")}));
  REQUIRE(c.device() == Device("cpu:1"));
  require_close(c, {3.0, 3.0, 3.0, 3.0});
}

TEST_CASE("Tensor::matmul is matmul", "[ops]") {
  Array a = random_array({3, 4}, 60), b = random_array({4, 2}, 61);
  require_close(to_tensor(a).matmul(to_tensor(b)), matmul_ref(a, b).data, 1e-5, 1e-6);
}

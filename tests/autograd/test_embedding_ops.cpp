// Embedding (autograd/embedding_ops.cpp, kernels/cpu/index.cpp): the gather against a
// naive loop, index errors naming the index and V, the scatter-add backward with duplicated
// indices, and float64 gradcheck.
#include <vector>

#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

// Int64 tensors (mg::tensor converts to options.dtype, Float32 by default).
Tensor int64s(const std::vector<int64_t>& values, const Shape& shape) {
  return tensor(values, shape, {.dtype = DType::Int64});
}

// out[i, :] = weight[idx[i], :] for weight (V, D) stored row-major.
std::vector<double> gather_ref(const std::vector<double>& weight, int64_t dim, const std::vector<int64_t>& idx) {
  std::vector<double> out;
  for (int64_t i : idx)
    for (int64_t d = 0; d < dim; ++d) out.push_back(weight[size_t(i * dim + d)]);
  return out;
}

}  // namespace

TEST_CASE("embedding: gathers the rows named by 2-d indices", "[autograd][embedding]") {
  const int64_t vocab = 5, dim = 3;
  std::vector<double> w = pseudo_random(size_t(vocab * dim), 70);
  std::vector<int64_t> idx{4, 0, 2, 2, 1, 4};
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Tensor out = embedding(tensor(w, {vocab, dim}, {.dtype = dtype}), int64s(idx, {2, 3}));
    CHECK(out.shape() == Shape{2, 3, dim});
    CHECK(out.dtype() == dtype);
    require_close(out, gather_ref(w, dim, idx), 1e-7, 0);
  }
}

TEST_CASE("embedding: 0-d and empty indices", "[autograd][embedding]") {
  std::vector<double> w = pseudo_random(8, 71);
  Tensor weight = tensor(w, {4, 2});
  Tensor one = embedding(weight, int64s({3}, {}));
  CHECK(one.shape() == Shape{2});
  require_close(one, gather_ref(w, 2, {3}), 1e-7, 0);
  Tensor none = embedding(weight, int64s({}, {0, 5}));
  CHECK(none.shape() == Shape{0, 5, 2});
}

TEST_CASE("embedding: non-contiguous weight and indices", "[autograd][embedding]") {
  std::vector<double> wt = pseudo_random(12, 72);  // stored (D = 3, V = 4)
  std::vector<double> w(12);
  for (int64_t v = 0; v < 4; ++v)
    for (int64_t d = 0; d < 3; ++d) w[size_t(v * 3 + d)] = wt[size_t(d * 4 + v)];
  Tensor weight = tensor(wt, {3, 4}).transpose(0, 1);
  Tensor indices = int64s({0, 1, 2, 3, 3, 2}, {3, 2}).transpose(0, 1);  // (2, 3): 0 2 3 / 1 3 2
  REQUIRE_FALSE(weight.is_contiguous());
  require_close(embedding(weight, indices), gather_ref(w, 3, {0, 2, 3, 1, 3, 2}), 1e-7, 0);
}

TEST_CASE("embedding: an index out of range names it and V", "[autograd][embedding]") {
  Tensor weight = zeros({4, 2});
  require_error([&] { embedding(weight, int64s({0, 4, 1}, {3})); }, {"embedding", "index 4", "[0, 4)"});
  require_error([&] { embedding(weight, int64s({-1}, {1})); }, {"index -1", "[0, 4)"});
  // With D == 0 nothing is copied, but the indices are still checked.
  require_error([] { embedding(zeros({4, 0}), int64s({5}, {1})); }, {"index 5", "[0, 4)"});
}

TEST_CASE("embedding: bad dtypes and shapes are errors naming them", "[autograd][embedding]") {
  require_error([] { embedding(zeros({4, 2}), zeros({3})); }, {"embedding", "Int64", "Float32"});
  require_error([] { embedding(zeros({4}), int64s({0}, {1})); }, {"(V, D)", "[4]"});
  require_error([] { embedding(zeros({4, 2}, {.dtype = DType::Int64}), int64s({0}, {1})); }, {"Int64"});
}

TEST_CASE("embedding: backward scatter-adds, duplicates accumulate", "[autograd][embedding]") {
  const int64_t vocab = 5, dim = 2;
  Tensor weight = tensor(pseudo_random(size_t(vocab * dim), 73), {vocab, dim},
                         {.dtype = DType::Float64, .requires_grad = true});
  std::vector<int64_t> idx{1, 3, 1, 1};
  std::vector<double> g = pseudo_random(size_t(idx.size()) * dim, 74);
  (embedding(weight, int64s(idx, {4})) * tensor(g, {4, dim}, {.dtype = DType::Float64})).sum().backward();
  std::vector<double> want(size_t(vocab * dim), 0.0);
  for (size_t i = 0; i < idx.size(); ++i)
    for (int64_t d = 0; d < dim; ++d) want[size_t(idx[i] * dim + d)] += g[i * dim + size_t(d)];
  require_close(weight.grad(), want, 1e-12, 1e-14);
}

TEST_CASE("embedding: gradcheck of the weight", "[autograd][embedding]") {
  Tensor weight = tensor(pseudo_random(12, 75), {4, 3}, {.dtype = DType::Float64, .requires_grad = true});
  Tensor indices = int64s({2, 0, 2, 3, 3, 2}, {2, 3});
  CHECK(gradcheck([&](const TensorList& in) { return embedding(in[0], indices); }, {weight}));
}

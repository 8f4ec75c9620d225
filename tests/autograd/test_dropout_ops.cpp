// Dropout (autograd/dropout_ops.cpp): identity cases, the drop rate and the 1 / (1 - p) scaling,
// the mask's dependence on the seed only, p's range, and the backward reusing the mask.
#include <cmath>
#include <vector>

#include "test_util.h"

using namespace mg;
using namespace mg::test;

TEST_CASE("dropout: eval and p == 0 return the input itself", "[autograd][dropout]") {
  Tensor x = tensor(pseudo_random(10, 60), {2, 5});
  CHECK(dropout(x, 0.5, false).is_same(x));
  CHECK(dropout(x, 0.0, true).is_same(x));
}

TEST_CASE("dropout: drops about p of the elements and scales the rest by 1 over 1 - p", "[autograd][dropout]") {
  manual_seed(123);
  const int64_t n = 200000;
  const double p = 0.3;
  Tensor x = full({n}, 2.0);
  std::vector<double> y = values(dropout(x, p, true));
  int64_t dropped = 0, misscaled = 0;
  for (double v : y) {
    if (v == 0)
      ++dropped;
    else if (std::abs(v - 2.0 / (1 - p)) > 1e-6)
      ++misscaled;
  }
  CHECK(misscaled == 0);
  // Binomial(n, p): standard deviation sqrt(n p (1 - p)) ~ 205; 5 sigma is ~1000 elements.
  CHECK(std::abs(double(dropped) - p * double(n)) < 1000);
}

TEST_CASE("dropout: the mask depends only on the seed", "[autograd][dropout]") {
  Tensor x = tensor(pseudo_random(64, 61), {8, 8}, {.dtype = DType::Float64});
  manual_seed(7);
  std::vector<double> a = values(dropout(x, 0.5, true));
  manual_seed(7);
  std::vector<double> b = values(dropout(x, 0.5, true));
  CHECK(a == b);
  std::vector<double> c = values(dropout(x, 0.5, true));  // the generator moved on
  CHECK(a != c);
}

TEST_CASE("dropout: the mask is mg::rand below p, drawn from the global Philox state", "[autograd][dropout]") {
  const double p = 0.4;
  manual_seed(99);
  std::vector<double> u = values(rand({3, 7}));
  manual_seed(99);
  std::vector<double> y = values(dropout(ones({3, 7}), p, true));
  for (size_t i = 0; i < u.size(); ++i) {
    INFO("element " << i << ": u = " << u[i]);
    CHECK(std::abs(y[i] - (u[i] < p ? 0.0 : 1.0 / (1 - p))) < 1e-6);
  }
}

TEST_CASE("dropout: p == 1 gives zeros", "[autograd][dropout]") {
  Tensor y = dropout(tensor(pseudo_random(6, 62), {6}), 1.0, true);
  require_close(y, std::vector<double>(6, 0.0), 0, 0);
}

TEST_CASE("dropout: p outside 0 to 1 is an error naming it", "[autograd][dropout]") {
  Tensor x = ones({3});
  require_error([&] { dropout(x, 1.5, true); }, {"dropout", "1.5"});
  require_error([&] { dropout(x, -0.1, false); }, {"dropout", "-0.1"});
  require_error([] { dropout(ones({3}, {.dtype = DType::Int64}), 0.5, true); }, {"dropout", "Int64"});
}

TEST_CASE("dropout: backward multiplies the gradient by the same mask", "[autograd][dropout]") {
  const double p = 0.25;
  Tensor x = tensor(pseudo_random(40, 63), {5, 8}, {.dtype = DType::Float64, .requires_grad = true});
  manual_seed(5);
  Tensor y = dropout(x, p, true);
  manual_seed(5);
  std::vector<double> mask = values(dropout(ones({5, 8}, {.dtype = DType::Float64}), p, true));
  y.sum().backward();
  require_close(x.grad(), mask, 0, 0);
}

TEST_CASE("dropout: gradcheck with the mask fixed by the seed", "[autograd][dropout]") {
  Tensor x = tensor(pseudo_random(12, 64), {3, 4}, {.dtype = DType::Float64, .requires_grad = true});
  CHECK(gradcheck(
      [](const TensorList& in) {
        manual_seed(17);
        return dropout(in[0], 0.5, true);
      },
      {x}));
}

// Sequence parallelism's use: each rank's positions along dim 1 draw their part of the whole
// mask, so the parts side by side are the whole input's dropout, and every part leaves the
// generator where the whole does.
TEST_CASE("dropout of slices along a dim puts together the whole input's dropout", "[autograd][dropout]") {
  const Tensor x = tensor(pseudo_random(2 * 6 * 5, 62), {2, 6, 5}, {.dtype = DType::Float64});
  manual_seed(8);
  const std::vector<double> whole = values(dropout(x, 0.4, true));
  const uint64_t after = get_rng_state().offset;
  std::vector<Tensor> parts;
  for (int64_t start = 0; start < 6; start += 2) {
    manual_seed(8);
    parts.push_back(dropout(x.slice(1, start, start + 2), 0.4, true, DrawSlice{1, start, 6}));
    CHECK(get_rng_state().offset == after);
  }
  CHECK(values(cat(parts, 1)) == whole);
}

// tests/autograd/test_custom_function.cpp — autograd/README.md's "A differentiable function of
// your own", as written there: softplus through mg::record, checked by gradcheck, and a layer on
// it checked the PyTorch way (its parameter given beside the input).
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "test_util.h"

namespace {

// README's code, unchanged.
mg::Tensor softplus(const mg::Tensor& x) {
  mg::Tensor y;
  {
    mg::NoGradGuard untracked;  // the forward's own ops are not the op: keep them off the tape
    y = mg::log(mg::exp(x) + 1.0);
  }
  if (mg::any_requires_grad({&x})) {
    // backward gets the gradient of each output and returns one per input (undefined: none).
    // It runs under NoGradGuard and may use any op; it reads x, so Saves::Inputs.
    mg::record("softplus", {y}, {x},
               [x](const mg::TensorList& grad) { return mg::TensorList{grad[0] * mg::sigmoid(x.detach())}; },
               mg::Saves::Inputs);
  }
  return y;
}

// y = softplus(x * w): a layer on the custom function, with a parameter.
class Softplus : public mg::nn::Cloneable<Softplus> {
 public:
  explicit Softplus(int64_t n) { register_parameter("w", mg::randn({n}, {.dtype = mg::DType::Float64})); }
  mg::Tensor forward(const mg::Tensor& x) override { return softplus(x * parameter("w")); }
  std::string name() const override { return "Softplus"; }
};

}  // namespace

TEST_CASE("a function of one's own through record passes gradcheck, alone and in a layer", "[autograd]") {
  mg::manual_seed(4);
  mg::Tensor x = mg::randn({5}, {.dtype = mg::DType::Float64, .requires_grad = true});
  REQUIRE(mg::gradcheck([](const mg::TensorList& in) { return softplus(in[0]); }, {x}));
  CHECK(mg::test::values(softplus(x)) == mg::test::values(mg::log(mg::exp(x) + 1.0)));
  auto layer = std::make_shared<Softplus>(5);
  REQUIRE(mg::gradcheck([&](const mg::TensorList& in) { return layer->forward(in[0]); }, {x, layer->parameter("w")}));
  const mg::Tensor y = layer->forward(x);
  CHECK(y.unsafe_impl()->autograd->grad_fn->name == "softplus");
}

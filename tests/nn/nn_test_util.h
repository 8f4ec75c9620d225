// tests/nn/nn_test_util.h — a small custom module shared by the nn tests: own parameter and
// buffer, two Linear children and a BatchNorm2d-free forward, so registry order and dotted
// names are easy to predict.
#pragma once

#include <memory>
#include <string>

#include "multigrad/multigrad.h"
#include "multigrad/nn/layers.h"

namespace mg::test {

// scale * fc2(relu(fc1(x))); own entries registered before the children.
class TinyNet : public nn::Cloneable<TinyNet> {
 public:
  TinyNet() {
    register_parameter("scale", ones({1}));
    register_buffer("counter", zeros({2}));
    register_module("fc1", std::make_shared<nn::Linear>(3, 4));
    register_module("fc2", std::make_shared<nn::Linear>(4, 2));
  }
  Tensor forward(const Tensor& x) override {
    return child("fc2")->forward(relu(child("fc1")->forward(x))) * parameter("scale");
  }
  std::string name() const override { return "TinyNet"; }
};

}  // namespace mg::test

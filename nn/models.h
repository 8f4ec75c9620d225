// nn/models.h — the model zoo: a multilayer perceptron and the Fashion-MNIST CNN.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "multigrad/nn/layers.h"

namespace mg::nn {

// Linear(sizes[0] -> sizes[1]), ReLU, ..., Linear(sizes[n-2] -> sizes[n-1]): a ReLU between
// every two Linear layers, none after the last. mlp({784, 256, 128, 10}) has 235,146 parameters.
std::shared_ptr<Sequential> mlp(const std::vector<int64_t>& sizes);

// For 28x28 grey images, (N, 1, 28, 28) -> logits (N, 10):
//    0 Conv2d(1, 32, 3, padding 1, no bias)    (N, 32, 28, 28)
//    1 BatchNorm2d(32)
//    2 ReLU
//    3 MaxPool2d(2)                   (N, 32, 14, 14)
//    4 Conv2d(32, 64, 3, padding 1, no bias)   (N, 64, 14, 14)
//    5 BatchNorm2d(64)
//    6 ReLU
//    7 MaxPool2d(2)                   (N, 64, 7, 7)
//    8 Flatten                        (N, 3136)
//    9 Linear(3136, 128)
//   10 ReLU
//   11 Linear(128, 10)
// The convolutions have no bias: batch norm subtracts the channel mean right after, so a bias
// there would get a gradient of exactly 0 (in float32, rounding noise that Adam would amplify
// into +-lr steps). 421,738 parameters; 6 buffers (running_mean, running_var,
// num_batches_tracked per batch norm).
std::shared_ptr<Sequential> fashion_cnn();

}  // namespace mg::nn

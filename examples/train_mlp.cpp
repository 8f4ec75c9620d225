// examples/train_mlp.cpp — training a model in code, on one device: an MLP learns to tell two
// clouds of points apart. The README's first library example, run by ctest (label examples).
//
//   build/examples/train_mlp          # prints the loss every 50 steps, then the accuracy
#include <cstdio>

#include "multigrad/multigrad.h"

int main() {
  mg::manual_seed(0);
  // 512 points in 2-D: class 0 around (-1, -1), class 1 around (1, 1).
  const int64_t n = 512;
  mg::Tensor labels = mg::to(mg::ge(mg::rand({n}), 0.5), mg::DType::Int64);              // (n)
  mg::Tensor centres = mg::sub(mg::mul(mg::to(labels, mg::DType::Float32), 2.0), 1.0);  // -1 or 1
  mg::Tensor x = mg::add(mg::randn({n, 2}), mg::unsqueeze(centres, 1));                  // (n, 2)

  auto model = mg::nn::mlp({2, 16, 2});
  mg::optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 1; step <= 200; ++step) {
    opt.zero_grad();
    mg::Tensor loss = mg::cross_entropy(model->forward(x), labels);
    loss.backward();  // every parameter's .grad()
    opt.step();
    if (step % 50 == 0) std::printf("step %d: loss %.4f\n", step, loss.item<float>());
  }
  mg::NoGradGuard no_grad;
  const double accuracy = mg::mean(mg::to(mg::eq(mg::argmax(model->forward(x), 1), labels), mg::DType::Float32))
                              .item<float>();
  std::printf("accuracy: %.4f\n", accuracy);
  return accuracy > 0.85 ? 0 : 1;  // the clouds overlap a little: about 0.91; chance is 0.5
}

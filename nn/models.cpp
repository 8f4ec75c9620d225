// nn/models.cpp — the model zoo of nn/models.h.
#include "multigrad/nn/models.h"

namespace mg::nn {

std::shared_ptr<Sequential> mlp(const std::vector<int64_t>& sizes) {
  MG_CHECK(sizes.size() >= 2, "mlp: needs at least an input and an output size, got ", sizes.size(), " sizes");
  auto model = std::make_shared<Sequential>();
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    if (i > 0) model->push_back(std::make_shared<ReLU>());
    model->push_back(std::make_shared<Linear>(sizes[i], sizes[i + 1]));
  }
  return model;
}

std::shared_ptr<Sequential> fashion_cnn() {
  constexpr int64_t kImageSide = 28, kClasses = 10;
  constexpr int64_t kPooledSide = kImageSide / 4;  // two 2x2 max pools
  return std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<Module>>{
      std::make_shared<Conv2d>(1, 32, 3, 1, 1, 1, 1, false), std::make_shared<BatchNorm2d>(32), std::make_shared<ReLU>(),
      std::make_shared<MaxPool2d>(2), std::make_shared<Conv2d>(32, 64, 3, 1, 1, 1, 1, false), std::make_shared<BatchNorm2d>(64),
      std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2), std::make_shared<Flatten>(),
      std::make_shared<Linear>(64 * kPooledSide * kPooledSide, 128), std::make_shared<ReLU>(),
      std::make_shared<Linear>(128, kClasses)});
}

}  // namespace mg::nn

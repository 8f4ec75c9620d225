// data/fashion_mnist.cpp — the Fashion-MNIST split as a TensorDataset: (N, 1, 28, 28) Float32
// images in [0, 1] (byte / 255, as torchvision's ToTensor) and (N) Int64 labels in [0, 10).
#include <filesystem>

#include "multigrad/data/data.h"

namespace mg::data {
namespace {

constexpr int64_t kImageSide = 28;   // Fashion-MNIST images are 28 x 28 grey bytes
constexpr int64_t kNumClasses = 10;  // T-shirt/top ... Ankle boot
constexpr float kByteMax = 255.0f;     // divided, not multiplied by 1/255: torchvision's exact values

// The file of `name` (its standard name, without ".gz"): gzip as the Debian package ships it, or
// raw under the standard name (as an unzipped download leaves it); read_idx reads both.
std::string existing_file(const std::string& root, const std::string& name) {
  const std::string gzip = (std::filesystem::path(root) / (name + ".gz")).string();
  const std::string raw = (std::filesystem::path(root) / name).string();
  if (std::filesystem::is_regular_file(gzip)) return gzip;
  MG_CHECK(std::filesystem::is_regular_file(raw), "FashionMNIST: missing file ", gzip, " (or ", raw, " unzipped)");
  return raw;
}

Example load_split(const std::string& root, bool train) {
  MG_CHECK(std::filesystem::is_directory(root), "FashionMNIST: data folder ", root, " does not exist");
  std::string prefix = train ? "train" : "t10k";
  std::string images_path = existing_file(root, prefix + "-images-idx3-ubyte");
  std::string labels_path = existing_file(root, prefix + "-labels-idx1-ubyte");

  IdxArray images = read_idx(images_path);
  MG_CHECK(images.dims.size() == 3 && images.dims[1] == kImageSide && images.dims[2] == kImageSide,
           "FashionMNIST: ", images_path, ": images: expected dims [N, 28, 28], got ", images.dims);
  IdxArray labels = read_idx(labels_path);
  MG_CHECK(labels.dims.size() == 1, "FashionMNIST: ", labels_path, ": labels: expected dims [N], got ",
           labels.dims);
  int64_t n = images.dims[0];
  MG_CHECK(n == labels.dims[0], "FashionMNIST: image and label counts differ: ", images_path, " holds ", n,
           " images, ", labels_path, " holds ", labels.dims[0], " labels");

  Tensor x = Tensor::empty({n, 1, kImageSide, kImageSide});
  float* px = x.data<float>();
  for (size_t i = 0; i < images.data.size(); ++i) px[i] = float(images.data[i]) / kByteMax;
  Tensor y = Tensor::empty({n}, {.dtype = DType::Int64});
  int64_t* py = y.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    int64_t label = labels.data[size_t(i)];
    MG_CHECK(label < kNumClasses, "FashionMNIST: ", labels_path, ": label ", i, " is ", label,
             ", expected 0 to ", kNumClasses - 1);
    py[i] = label;
  }
  return {x, y};
}

}  // namespace

FashionMNIST::FashionMNIST(const std::string& root, bool train) : FashionMNIST(load_split(root, train)) {}

FashionMNIST::FashionMNIST(Example split) : TensorDataset(std::move(split.input), std::move(split.target)) {}

}  // namespace mg::data

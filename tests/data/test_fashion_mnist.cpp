// tests/data/test_fashion_mnist.cpp — FashionMNIST: a small split written in the test, each way a
// folder can be wrong, and the real files of Debian's dataset-fashion-mnist checked against
// their bytes read independently here.
#include <cstdlib>
#include <filesystem>

#include "test_util.h"
#include "multigrad/data/data.h"
#include "data_test_util.h"
#include "io/io_test_util.h"

using mg::data::FashionMNIST;
using mg::test::idx_bytes;
using mg::test::require_error;
using mg::test::TempDir;
using mg::test::write_gzip;

namespace {

constexpr uint32_t kSide = 28;

// A split of n images whose pixel j of image i is (i + j) mod 256, and the given labels.
void write_split(const TempDir& dir, const std::string& prefix, uint32_t n, const std::string& labels,
                 std::vector<uint32_t> image_dims = {}) {
  if (image_dims.empty()) image_dims = {n, kSide, kSide};
  size_t pixels = 1;
  for (uint32_t d : image_dims) pixels *= d;
  std::string images(pixels, '\0');
  for (size_t k = 0; k < pixels; ++k) images[k] = char((k / (kSide * kSide) + k % (kSide * kSide)) & 0xff);
  write_gzip(dir.file(prefix + "-images-idx3-ubyte.gz"), idx_bytes(image_dims, images));
  write_gzip(dir.file(prefix + "-labels-idx1-ubyte.gz"), idx_bytes({uint32_t(labels.size())}, labels));
}

}  // namespace

TEST_CASE("FashionMNIST loads a small split as scaled images and Int64 labels", "[data]") {
  TempDir dir;
  write_split(dir, "t10k", 3, std::string("\x09\x00\x04", 3));
  FashionMNIST ds(dir.path(), false);
  REQUIRE(ds.size() == 3);
  CHECK(ds.inputs().shape() == mg::Shape{3, 1, 28, 28});
  CHECK(ds.inputs().dtype() == mg::DType::Float32);
  CHECK(ds.targets().dtype() == mg::DType::Int64);
  CHECK(ds.targets().to_vector<int64_t>() == std::vector<int64_t>{9, 0, 4});
  auto x = ds.inputs().to_vector<float>();
  CHECK(x[0] == 0.0f);
  CHECK(x[5] == 5.0f / 255.0f);
  CHECK(x[784 * 2 + 300] == float((2 + 300) % 256) / 255.0f);
}

TEST_CASE("FashionMNIST names a missing folder and a missing file", "[data]") {
  TempDir dir;
  require_error([&] { FashionMNIST(dir.file("absent"), true); }, {dir.file("absent"), "does not exist"});
  write_split(dir, "train", 2, std::string("\x01\x02", 2));
  std::filesystem::remove(dir.file("train-labels-idx1-ubyte.gz"));
  require_error([&] { FashionMNIST(dir.path(), true); },
                {"missing file", dir.file("train-labels-idx1-ubyte.gz"), dir.file("train-labels-idx1-ubyte")});
}

TEST_CASE("FashionMNIST reads raw (unzipped) IDX files under their standard names", "[data]") {
  TempDir dir;
  write_split(dir, "train", 3, std::string("\x09\x00\x04", 3));
  const FashionMNIST gzip(dir.path(), true);
  for (const std::string name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte"})
    REQUIRE(std::system(("gunzip '" + dir.file(name + ".gz") + "'").c_str()) == 0);
  REQUIRE(std::filesystem::is_regular_file(dir.file("train-images-idx3-ubyte")));
  const FashionMNIST raw(dir.path(), true);
  CHECK(raw.targets().to_vector<int64_t>() == std::vector<int64_t>{9, 0, 4});
  CHECK(raw.inputs().to_vector<float>() == gzip.inputs().to_vector<float>());
}

TEST_CASE("FashionMNIST names both files and counts when they differ", "[data]") {
  TempDir dir;
  write_split(dir, "train", 3, std::string("\x01\x02", 2));
  require_error([&] { FashionMNIST(dir.path(), true); },
                {dir.file("train-images-idx3-ubyte.gz"), "3 images", dir.file("train-labels-idx1-ubyte.gz"),
                 "2 labels"});
}

TEST_CASE("FashionMNIST rejects a label out of range", "[data]") {
  TempDir dir;
  write_split(dir, "train", 3, std::string("\x01\x0a\x02", 3));
  require_error([&] { FashionMNIST(dir.path(), true); },
                {dir.file("train-labels-idx1-ubyte.gz"), "label 1 is 10", "0 to 9"});
}

TEST_CASE("FashionMNIST rejects images that are not 28 by 28", "[data]") {
  TempDir dir;
  write_split(dir, "train", 2, std::string("\x01\x02", 2), {2, 28, 27});
  require_error([&] { FashionMNIST(dir.path(), true); },
                {dir.file("train-images-idx3-ubyte.gz"), "[N, 28, 28]", "[2, 28, 27]"});
  write_split(dir, "t10k", 2, std::string("\x01\x02", 2), {2, 784});
  require_error([&] { FashionMNIST(dir.path(), false); }, {"[2, 784]"});
}

TEST_CASE("FashionMNIST loads the installed training split", "[data]") {
  std::string root = mg::data::kFashionMnistRoot;
  FashionMNIST ds(root, true);
  REQUIRE(ds.size() == 60000);
  CHECK(ds.inputs().shape() == mg::Shape{60000, 1, 28, 28});
  // Independently: the label file's bytes after its 8-byte header, the image file's after 16.
  std::string labels = mg::test::read_gzip(root + "/train-labels-idx1-ubyte.gz");
  std::string images = mg::test::read_gzip(root + "/train-images-idx3-ubyte.gz");
  REQUIRE(labels.size() == 8 + 60000);
  auto y = ds.targets().to_vector<int64_t>();
  for (size_t i = 0; i < 100; ++i) CHECK(y[i] == int64_t(uint8_t(labels[8 + i])));
  CHECK(y[0] == 9);  // the first training image is an ankle boot
  auto x = ds.get(59999).input.to_vector<float>();
  for (size_t j = 0; j < x.size(); ++j) REQUIRE(x[j] == float(uint8_t(images[16 + 59999 * 784 + j])) / 255.0f);
}

TEST_CASE("FashionMNIST loads the installed test split", "[data]") {
  FashionMNIST ds(mg::data::kFashionMnistRoot, false);
  REQUIRE(ds.size() == 10000);
  CHECK(ds.inputs().shape() == mg::Shape{10000, 1, 28, 28});
  std::string labels = mg::test::read_gzip(std::string(mg::data::kFashionMnistRoot) + "/t10k-labels-idx1-ubyte.gz");
  auto y = ds.targets().to_vector<int64_t>();
  for (size_t i = 0; i < 100; ++i) CHECK(y[i] == int64_t(uint8_t(labels[8 + i])));
  auto counts = std::vector<int64_t>(10, 0);
  for (int64_t v : y) counts[size_t(v)]++;
  CHECK(counts == std::vector<int64_t>(10, 1000));  // the test split is balanced
}

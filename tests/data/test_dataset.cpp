// tests/data/test_dataset.cpp — TensorDataset rows and gathers, and Dataset's default batch.
#include "test_util.h"
#include "multigrad/data/data.h"

using mg::data::Dataset;
using mg::data::Example;
using mg::data::TensorDataset;
using mg::test::require_error;

namespace {

// Five rows of (2, 3) Float32 inputs, row i filled with 10 i + j, and targets 100 + i.
TensorDataset five_rows() {
  std::vector<float> x(5 * 6);
  for (size_t k = 0; k < x.size(); ++k) x[k] = float(10 * (k / 6) + k % 6);
  return TensorDataset(mg::tensor(x, {5, 2, 3}), mg::tensor({100, 101, 102, 103, 104}, {5}, {.dtype = mg::DType::Int64}));
}

// The same examples through get() alone, so the batch is Dataset's default stack.
class ByGet : public Dataset {
 public:
  explicit ByGet(const TensorDataset& rows) : rows_(rows) {}
  int64_t size() const override { return rows_.size(); }
  Example get(int64_t i) const override { return rows_.get(i); }

 private:
  const TensorDataset& rows_;
};

}  // namespace

TEST_CASE("TensorDataset get returns one row", "[data]") {
  TensorDataset ds = five_rows();
  REQUIRE(ds.size() == 5);
  Example e = ds.get(3);
  CHECK(e.input.shape() == mg::Shape{2, 3});
  CHECK(e.input.to_vector<float>() == std::vector<float>{30, 31, 32, 33, 34, 35});
  CHECK(e.target.item<int64_t>() == 103);
  require_error([&] { ds.get(5); }, {"index 5", "size 5"});
  require_error([&] { ds.get(-1); }, {"index -1"});
}

TEST_CASE("TensorDataset get_batch gathers rows in index order", "[data]") {
  TensorDataset ds = five_rows();
  Example b = ds.get_batch({4, 0, 4});
  CHECK(b.input.shape() == mg::Shape{3, 2, 3});
  CHECK(b.input.is_contiguous());
  CHECK(b.input.to_vector<float>() ==
        std::vector<float>{40, 41, 42, 43, 44, 45, 0, 1, 2, 3, 4, 5, 40, 41, 42, 43, 44, 45});
  CHECK(b.target.to_vector<int64_t>() == std::vector<int64_t>{104, 100, 104});
  require_error([&] { ds.get_batch({1, 7}); }, {"index 7", "size 5"});
}

TEST_CASE("TensorDataset gather equals the default stack of get", "[data]") {
  TensorDataset ds = five_rows();
  ByGet by_get(ds);
  Example a = ds.get_batch({2, 1, 3});
  Example b = by_get.get_batch({2, 1, 3});
  CHECK(a.input.shape() == b.input.shape());
  CHECK(a.input.to_vector<float>() == b.input.to_vector<float>());
  CHECK(a.target.to_vector<int64_t>() == b.target.to_vector<int64_t>());
}

TEST_CASE("TensorDataset rejects rows of different lengths", "[data]") {
  require_error([] { TensorDataset(mg::zeros({4, 2}), mg::zeros({3})); }, {"inputs have 4", "targets have 3"});
  require_error([] { TensorDataset(mg::zeros({}), mg::zeros({3})); }, {"inputs", "shape []"});
}

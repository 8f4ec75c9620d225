// data/transforms.cpp — per-batch input transforms: Normalize and RandomHorizontalFlip.
//
// The flip decision for one example is a Philox draw keyed by the transform's seed at counter
// (dataset index, epoch): it does not depend on the batch the example lands in, the worker that
// assembles it or the device that trains on it.
#include <algorithm>
#include <cstring>

#include "multigrad/autograd/ops.h"
#include "multigrad/core/random.h"
#include "multigrad/data/data.h"

namespace mg::data {
namespace {

// Reverses each of `rows` rows of `width` elements of `Bytes` bytes in place. The element size is
// a template argument so that the memcpy calls compile to single loads and stores.
template <size_t Bytes>
void reverse_rows(uint8_t* data, int64_t rows, int64_t width) {
  uint8_t tmp[Bytes];
  for (int64_t row = 0; row < rows; ++row) {
    uint8_t* line = data + size_t(row * width) * Bytes;
    for (int64_t a = 0, b = width - 1; a < b; ++a, --b) {
      std::memcpy(tmp, line + size_t(a) * Bytes, Bytes);
      std::memcpy(line + size_t(a) * Bytes, line + size_t(b) * Bytes, Bytes);
      std::memcpy(line + size_t(b) * Bytes, tmp, Bytes);
    }
  }
}

}  // namespace

Tensor Normalize::operator()(const Tensor& batch) const {
  MG_CHECK(std != 0, "Normalize: std must be non-zero, got ", std);
  return div(sub(batch, mean), std);
}

Tensor RandomHorizontalFlip::operator()(const Tensor& batch, const std::vector<int64_t>& indices,
                                        int64_t epoch) const {
  MG_CHECK(p >= 0 && p <= 1, "RandomHorizontalFlip: p must be in [0, 1], got ", p);
  MG_CHECK(batch.dim() >= 2, "RandomHorizontalFlip: expected a batch of images (B, ..., H, W), got shape ",
           batch.shape());
  MG_CHECK(batch.device().is_cpu(), "RandomHorizontalFlip: batch must be on the host, got ", batch.device());
  MG_CHECK(int64_t(indices.size()) == batch.size(0), "RandomHorizontalFlip: ", indices.size(),
           " indices for a batch of ", batch.size(0));
  Tensor out = batch.contiguous().clone();
  int64_t width = batch.size(-1);
  int64_t rows_per_example = batch.size(0) == 0 ? 0 : batch.numel() / batch.size(0) / std::max<int64_t>(width, 1);
  auto* base = static_cast<uint8_t*>(out.data_ptr());
  for (size_t k = 0; k < indices.size(); ++k) {
    Philox4 r = philox4x32_10(seed, uint64_t(indices[k]), uint64_t(epoch));
    if (!(double(uint_to_unit_float(r.x[0])) < p)) continue;
    uint8_t* image = base + size_t(k) * size_t(rows_per_example * width) * batch.element_size();
    switch (batch.element_size()) {
      case 1: reverse_rows<1>(image, rows_per_example, width); break;
      case 2: reverse_rows<2>(image, rows_per_example, width); break;
      case 4: reverse_rows<4>(image, rows_per_example, width); break;
      case 8: reverse_rows<8>(image, rows_per_example, width); break;
      default: MG_ERROR("RandomHorizontalFlip: unsupported element size ", batch.element_size());
    }
  }
  return out;
}

}  // namespace mg::data

// data/dataset.cpp — Dataset's default batch (stack of get(i)) and TensorDataset, whose batch is
// one gather of rows into a new contiguous tensor.
//
// TensorDataset keeps its rows in host memory: CUDA tensors are copied to the host once, at
// construction, so that every batch is a plain memcpy of rows and the loader decides where the
// batch goes (pinned memory, a device).
#include <algorithm>
#include <cstring>

#include "multigrad/autograd/ops.h"
#include "multigrad/data/data.h"

namespace mg::data {
namespace {

// Host, contiguous: a CPU tensor keeps its device (cpu:N), a CUDA one comes to cpu:0.
Tensor host_rows(const Tensor& t, const char* name) {
  MG_CHECK(t.defined(), "TensorDataset: ", name, " is undefined");
  MG_CHECK(t.dim() >= 1, "TensorDataset: ", name, " must have a dim 0 of examples, got shape ", t.shape());
  Tensor host = t.device().is_cuda() ? t.to(Device(DeviceType::CPU, 0)) : t;
  return host.contiguous();
}

// Row `index` of a contiguous tensor, as a view.
Tensor row(const Tensor& t, int64_t index) {
  Shape shape(t.shape().begin() + 1, t.shape().end());
  Strides strides(t.strides().begin() + 1, t.strides().end());
  return t.as_strided(shape, strides, t.offset() + index * t.stride(0));
}

// rows[k] = t[indices[k]], one memcpy per row into a new tensor on t's device.
Tensor gather_rows(const Tensor& t, const std::vector<int64_t>& indices) {
  Shape shape = t.shape();
  shape[0] = int64_t(indices.size());
  Tensor out = Tensor::empty(shape, {t.dtype(), t.device()});
  size_t row_bytes = size_t(t.numel() / std::max<int64_t>(t.size(0), 1)) * t.element_size();
  const auto* src = static_cast<const uint8_t*>(t.data_ptr());
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  for (size_t k = 0; k < indices.size(); ++k)
    std::memcpy(dst + k * row_bytes, src + size_t(indices[k]) * row_bytes, row_bytes);
  return out;
}

void check_index(int64_t index, int64_t size) {
  MG_CHECK(index >= 0 && index < size, "TensorDataset: index ", index, " out of range for size ", size);
}

}  // namespace

Example Dataset::get_batch(const std::vector<int64_t>& indices) const {
  MG_CHECK(!indices.empty(), "Dataset::get_batch: no indices");
  std::vector<Tensor> inputs, targets;
  for (int64_t i : indices) {
    Example e = get(i);
    inputs.push_back(e.input);
    targets.push_back(e.target);
  }
  return {stack(inputs), stack(targets)};
}

TensorDataset::TensorDataset(Tensor inputs, Tensor targets)
    : inputs_(host_rows(inputs, "inputs")), targets_(host_rows(targets, "targets")) {
  MG_CHECK(inputs_.size(0) == targets_.size(0), "TensorDataset: inputs have ", inputs_.size(0),
           " rows (dim 0) but targets have ", targets_.size(0));
}

int64_t TensorDataset::size() const { return inputs_.size(0); }

Example TensorDataset::get(int64_t index) const {
  check_index(index, size());
  return {row(inputs_, index), row(targets_, index)};
}

Example TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  MG_CHECK(!indices.empty(), "TensorDataset::get_batch: no indices");
  for (int64_t i : indices) check_index(i, size());
  return {gather_rows(inputs_, indices), gather_rows(targets_, indices)};
}

}  // namespace mg::data

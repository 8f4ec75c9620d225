// core/tensor.cpp — the storage-level members of Tensor: creation, sizes and strides,
// contiguity, raw data and strided views. The compute methods are in autograd/tensor_methods.cpp.
#include "multigrad/core/tensor.h"

#include <limits>

namespace mg {

Tensor Tensor::empty(const Shape& shape, const TensorOptions& options) {
  size_t element = dtype_size(options.dtype);
  size_t nbytes = element;
  for (int64_t s : shape) {
    MG_CHECK(s >= 0, "empty: negative size in shape ", shape);
    MG_CHECK(s == 0 || nbytes <= std::numeric_limits<size_t>::max() / size_t(s), "empty: shape ", shape,
             " of dtype ", options.dtype, " needs more bytes than a size_t holds");
    nbytes *= size_t(s);
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(nbytes, options.device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = options.dtype;
  impl->requires_grad = options.requires_grad;
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t d) const { return impl().shape[size_t(wrap_dim(d, dim(), "size"))]; }

int64_t Tensor::stride(int64_t d) const { return impl().strides[size_t(wrap_dim(d, dim(), "stride"))]; }

bool Tensor::is_contiguous() const {
  const TensorImpl& t = impl();
  if (numel_of(t.shape) == 0) return true;
  int64_t expected = 1;
  for (size_t i = t.shape.size(); i-- > 0;) {
    if (t.shape[i] == 1) continue;  // a size-1 dim is never stepped over, whatever its stride
    if (t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  const TensorImpl& t = impl();
  return static_cast<char*>(t.storage->data()) + t.offset * int64_t(dtype_size(t.dtype));
}

Tensor Tensor::as_strided(const Shape& shape, const Strides& strides, int64_t offset) const {
  const TensorImpl& t = impl();
  MG_CHECK(shape.size() == strides.size(), "as_strided: shape ", shape, " and strides ", strides,
           " differ in length");
  MG_CHECK(offset >= 0, "as_strided: negative offset ", offset);
  // The view addresses elements offset + sum_i k_i * strides[i] for 0 <= k_i < shape[i]; with
  // non-negative strides the largest is at k_i = shape[i] - 1.
  int64_t last = offset;
  for (size_t i = 0; i < shape.size(); ++i) {
    MG_CHECK(shape[i] >= 0, "as_strided: negative size in shape ", shape);
    MG_CHECK(strides[i] >= 0, "as_strided: negative strides are not supported, got ", strides);
    if (shape[i] > 0) last += (shape[i] - 1) * strides[i];
  }
  int64_t capacity = int64_t(t.storage->nbytes() / dtype_size(t.dtype));  // in elements
  // An empty view addresses nothing, but its offset must still lie within the storage.
  MG_CHECK(numel_of(shape) == 0 ? offset <= capacity : last < capacity, "as_strided: shape ", shape, ", strides ", strides,
           " and offset ", offset, " reach element ", last, " of a storage of ", capacity, " elements");
  auto view = std::make_shared<TensorImpl>();
  view->storage = t.storage;
  view->shape = shape;
  view->strides = strides;
  view->offset = offset;
  view->dtype = t.dtype;
  return Tensor(std::move(view));
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  return detail::str_cat("Tensor(shape=", shape(), ", dtype=", dtype(), ", device=", device(), ")");
}

}  // namespace mg

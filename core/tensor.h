// core/tensor.h — Tensor: a typed, strided view of a Storage on one device.
//
// A Tensor is a cheap handle (shared_ptr) to a TensorImpl: shape, strides (in elements),
// offset (in elements) and dtype over a shared Storage. Views (reshape of a contiguous tensor,
// view, transpose, permute, slice, expand) make a new TensorImpl over the same Storage, so
// writes through one are seen through the other. Copying a Tensor copies the handle.
//
// Layering: core knows nothing of kernels or autograd. The compute methods declared at the end
// of the class (to, contiguous, reshape, sum, relu, ...) are conveniences over the functional
// API (mg::sum, mg::relu, ...); they are defined in autograd/tensor_methods.cpp, as ATen's
// Tensor methods are defined over its ops. Nothing in core calls them.
#pragma once

#include <cstdint>
#include <cstring>
#include <iosfwd>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "multigrad/core/device.h"
#include "multigrad/core/dtype.h"
#include "multigrad/core/error.h"
#include "multigrad/core/shape.h"
#include "multigrad/core/storage.h"

namespace mg {

// TensorOptions::dtype: a DType, or none given, which reads as Float32 (the default dtype) except
// where a factory infers one from its values, as torch.tensor does (mg::tensor of integers: Int64).
class DTypeChoice {
 public:
  constexpr DTypeChoice() = default;
  constexpr DTypeChoice(DType dtype) : dtype_(dtype), given_(true) {}  // implicit: `.dtype = DType::Float64`
  constexpr operator DType() const { return dtype_; }
  constexpr bool given() const { return given_; }

 private:
  DType dtype_ = DType::Float32;
  bool given_ = false;
};
inline std::ostream& operator<<(std::ostream& os, DTypeChoice d) { return os << DType(d); }

struct TensorOptions {
  DTypeChoice dtype;
  Device device = Device("cpu");
  bool requires_grad = false;
};

// Autograd's per-tensor state (gradient, producing node, hooks), defined in autograd/tape.h.
// Core only holds the pointer, as c10's TensorImpl holds an AutogradMetaInterface.
struct AutogradMeta;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::Float32;
  bool requires_grad = false;
  std::shared_ptr<AutogradMeta> autograd;  // null until autograd needs it
};

class Tensor {
 public:
  Tensor() = default;  // undefined: holds nothing; most calls on it throw
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Uninitialised contiguous memory on options.device.
  static Tensor empty(const Shape& shape, const TensorOptions& options = {});

  bool defined() const { return impl_ != nullptr; }
  int64_t dim() const { return int64_t(impl().shape.size()); }
  int64_t size(int64_t d) const;    // negative d counts from the end
  int64_t stride(int64_t d) const;
  const Shape& shape() const { return impl().shape; }
  const Strides& strides() const { return impl().strides; }
  int64_t offset() const { return impl().offset; }
  int64_t numel() const { return numel_of(impl().shape); }
  DType dtype() const { return impl().dtype; }
  size_t element_size() const { return dtype_size(dtype()); }
  Device device() const { return impl().storage->device(); }
  TensorOptions options() const { return {dtype(), device(), false}; }
  bool is_contiguous() const;
  bool requires_grad() const { return impl().requires_grad; }

  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  // Address of element [0, 0, ...] (storage data + offset).
  void* data_ptr() const;
  // Typed data_ptr; throws if T does not match dtype().
  template <class T>
  T* data() const {
    MG_CHECK(dtype_v<T> == dtype(), "data<T>: tensor has dtype ", dtype(), ", asked for ", dtype_v<T>);
    return static_cast<T*>(data_ptr());
  }

  // A view of the same storage with other sizes, strides and offset; checks that every element
  // it can address lies inside the storage.
  Tensor as_strided(const Shape& shape, const Strides& strides, int64_t offset) const;
  // True when both handles share one TensorImpl.
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  TensorImpl* unsafe_impl() const { return impl_.get(); }
  // How many handles share this TensorImpl (0 when undefined): 1 means no other Tensor sees it.
  long use_count() const { return impl_.use_count(); }
  std::string str() const;  // "Tensor(shape=[2, 3], dtype=Float32, device=cpu:0)"; operator<< prints values

  // ---- conveniences over the functional API (autograd/tensor_methods.cpp) ----
  Tensor to(const Device& device) const;  // copies across devices; same device returns *this
  Tensor to(DType dtype) const;           // casts; same dtype returns *this
  Tensor contiguous() const;              // copies only when not contiguous
  Tensor clone() const;                   // always copies
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy; one dim may be -1
  Tensor view(const Shape& shape) const;     // a view or an error
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor expand(const Shape& shape) const;  // -1 keeps a size
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor sum() const;
  Tensor sum(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor neg() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor relu() const;
  Tensor gelu() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor pow(double exponent) const;
  Tensor matmul(const Tensor& other) const;

  // ---- autograd (autograd/tape.cpp) ----
  // Marks a floating tensor as a leaf whose gradient backward() accumulates; returns *this.
  Tensor& requires_grad_(bool requires_grad = true);
  // The accumulated gradient of a leaf (undefined until a backward pass reaches it).
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;  // undefined Tensor() clears it (zero_grad)
  bool is_leaf() const;                     // no producing node
  // The same data, cut from the tape: no producing node, requires_grad false.
  Tensor detach() const;
  // Makes this leaf hold `source`'s data in place (its storage, sizes, strides, offset and dtype):
  // every handle to it sees the change, and it keeps requires_grad, its gradient and its hooks.
  // PyTorch's `param.data = source`: nn::Module::to moves parameters this way, so an optimizer
  // made before the move updates the moved ones. An error on a tensor a node produced.
  void set_data(const Tensor& source) const;
  // Backward from this one-element tensor (gradient 1); see mg::backward.
  void backward(bool retain_graph = false, bool create_graph = false) const;

  // Copies to the host (converting to T's dtype) and returns the elements in row-major order.
  template <class T>
  std::vector<T> to_vector() const {
    static_assert(!std::is_same_v<T, bool>, "to_vector<bool>: use to_vector<int64_t>()");
    Tensor host = device().is_cuda() ? to(Device(DeviceType::CPU, 0)) : *this;
    host = host.to(dtype_v<T>).contiguous();
    std::vector<T> out(size_t(host.numel()));
    if (!out.empty()) std::memcpy(out.data(), host.data_ptr(), out.size() * sizeof(T));
    return out;
  }
  // The value of a one-element tensor.
  template <class T>
  T item() const {
    MG_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ", shape());
    return to_vector<T>()[0];
  }

 private:
  const TensorImpl& impl() const {
    MG_CHECK(impl_ != nullptr, "tensor is undefined (default-constructed)");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

// The values as PyTorch prints them: tensor([[1.0000, 2.5000], ...]), long tensors summarised
// with "...", the dtype, device and autograd state where they differ from the defaults
// (autograd/tensor_print.cpp). Copies the values to the host.
std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace mg

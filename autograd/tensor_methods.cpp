// autograd/tensor_methods.cpp — the compute methods of mg::Tensor (core/tensor.h), each a
// forward to the functional API of autograd/ops.h, as ATen's Tensor methods are.
#include "multigrad/autograd/ops.h"
#include "multigrad/core/tensor.h"

namespace mg {

Tensor Tensor::to(const Device& device) const { return mg::to(*this, device); }
Tensor Tensor::to(DType dtype) const { return mg::to(*this, dtype); }
Tensor Tensor::contiguous() const { return mg::contiguous(*this); }
Tensor Tensor::clone() const { return mg::clone(*this); }
Tensor Tensor::reshape(const Shape& shape) const { return mg::reshape(*this, shape); }
Tensor Tensor::view(const Shape& shape) const { return mg::view(*this, shape); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return mg::transpose(*this, d0, d1); }
Tensor Tensor::permute(const std::vector<int64_t>& dims) const { return mg::permute(*this, dims); }
Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  return mg::slice(*this, dim, start, end, step);
}
Tensor Tensor::expand(const Shape& shape) const { return mg::expand(*this, shape); }
Tensor Tensor::squeeze(int64_t dim) const { return mg::squeeze(*this, dim); }
Tensor Tensor::unsqueeze(int64_t dim) const { return mg::unsqueeze(*this, dim); }
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  return mg::flatten(*this, start_dim, end_dim);
}
Tensor Tensor::sum() const { return mg::sum(*this); }
Tensor Tensor::sum(const std::vector<int64_t>& dims, bool keepdim) const {
  return mg::sum(*this, dims, keepdim);
}
Tensor Tensor::mean() const { return mg::mean(*this); }
Tensor Tensor::mean(const std::vector<int64_t>& dims, bool keepdim) const {
  return mg::mean(*this, dims, keepdim);
}
Tensor Tensor::neg() const { return mg::neg(*this); }
Tensor Tensor::exp() const { return mg::exp(*this); }
Tensor Tensor::log() const { return mg::log(*this); }
Tensor Tensor::sqrt() const { return mg::sqrt(*this); }
Tensor Tensor::abs() const { return mg::abs(*this); }
Tensor Tensor::relu() const { return mg::relu(*this); }
Tensor Tensor::gelu() const { return mg::gelu(*this); }
Tensor Tensor::sigmoid() const { return mg::sigmoid(*this); }
Tensor Tensor::tanh() const { return mg::tanh(*this); }
Tensor Tensor::pow(double exponent) const { return mg::pow(*this, exponent); }
Tensor Tensor::matmul(const Tensor& other) const { return mg::matmul(*this, other); }

}  // namespace mg

// tests/kernels/kernel_test_util.h — building and reading tensors for the kernel tests without
// the functional API: contiguous tensors filled from vectors, strided views over them, and a
// naive strided read used as the reference.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "test_util.h"

namespace mg::test {

// A contiguous tensor holding `values` (row-major) on `device`.
template <class T>
Tensor from_vector(const Shape& shape, const std::vector<T>& values, const Device& device = Device("cpu")) {
  Tensor t = Tensor::empty(shape, {.dtype = dtype_v<T>, .device = device});
  REQUIRE(size_t(t.numel()) == values.size());
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

// n pseudo-random values in [-scale, scale) converted to T (integers round toward zero).
template <class T>
std::vector<T> random_values(size_t n, uint64_t seed, double scale = 1.0) {
  std::vector<T> out(n);
  const std::vector<double> r = pseudo_random(n, seed);
  for (size_t i = 0; i < n; ++i) out[i] = T(r[i] * scale);
  return out;
}

// A contiguous tensor of pseudo-random values.
template <class T>
Tensor random_tensor(const Shape& shape, uint64_t seed, double scale = 1.0) {
  return from_vector<T>(shape, random_values<T>(size_t(numel_of(shape)), seed, scale));
}

// The elements of any strided tensor in row-major order, read by explicit index arithmetic.
template <class T>
std::vector<T> read(const Tensor& t) {
  std::vector<T> out;
  out.reserve(size_t(t.numel()));
  const T* base = static_cast<const T*>(t.data_ptr());
  std::vector<int64_t> idx(t.shape().size(), 0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
    out.push_back(base[off]);
    for (int64_t d = int64_t(idx.size()) - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < t.shape()[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
  return out;
}

// A (rows, cols) view whose memory is column-major: the transpose of a contiguous (cols, rows).
template <class T>
Tensor transposed(const std::vector<T>& row_major_values, int64_t rows, int64_t cols) {
  std::vector<T> col_major(row_major_values.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) col_major[size_t(c * rows + r)] = row_major_values[size_t(r * cols + c)];
  Tensor base = from_vector<T>({cols, rows}, col_major);
  return base.as_strided({rows, cols}, {1, rows}, 0);
}

// An uninitialised (rows, cols) view inside a larger buffer: row stride `cols + pad`, offset
// `pad`, so writes that ignore the strides land in the wrong place.
inline Tensor padded_view(int64_t rows, int64_t cols, DType dtype, int64_t pad = 3) {
  Tensor base = Tensor::empty({rows * (cols + pad) + pad}, {.dtype = dtype});
  return base.as_strided({rows, cols}, {cols + pad, 1}, pad);
}

template <class T>
std::vector<double> to_doubles(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

}  // namespace mg::test

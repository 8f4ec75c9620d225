// tests/autograd/reference.h — naive references for the functional API's tests: a row-major
// array of doubles with index-by-index broadcasting, permutes and reductions, written without
// any multigrad code so a test compares two independent computations.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "test_util.h"

namespace mg::test {

struct Array {
  Shape shape;
  std::vector<double> data;  // row-major

  int64_t numel() const { return int64_t(data.size()); }
  double at(const std::vector<int64_t>& index) const {
    int64_t flat = 0;
    for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
    return data[size_t(flat)];
  }
};

inline int64_t count(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// The multi-index of row-major position i in shape.
inline std::vector<int64_t> unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = i % shape[d];
    i /= shape[d];
  }
  return index;
}

// A shape's array of pseudo-random values in [-1, 1).
inline Array random_array(const Shape& shape, uint64_t seed = 1) {
  return {shape, pseudo_random(size_t(count(shape)), seed)};
}

inline Tensor to_tensor(const Array& a, DType dtype = DType::Float32) {
  return mg::tensor(a.data, a.shape, {.dtype = dtype});
}

// The element of `a` that position `index` of the broadcast shape `out` reads.
inline double broadcast_at(const Array& a, const std::vector<int64_t>& index, const Shape& out) {
  std::vector<int64_t> own(a.shape.size());
  const size_t lead = out.size() - a.shape.size();
  for (size_t d = 0; d < a.shape.size(); ++d) own[d] = a.shape[d] == 1 ? 0 : index[lead + d];
  return a.at(own);
}

inline Array binary(const Array& a, const Array& b, const Shape& out,
                    const std::function<double(double, double)>& f) {
  Array r{out, std::vector<double>(size_t(count(out)))};
  for (int64_t i = 0; i < r.numel(); ++i) {
    auto index = unravel(i, out);
    r.data[size_t(i)] = f(broadcast_at(a, index, out), broadcast_at(b, index, out));
  }
  return r;
}

inline Array map(const Array& a, const std::function<double(double)>& f) {
  Array r = a;
  for (double& x : r.data) x = f(x);
  return r;
}

// r[i_0, ..., i_n] = a[i_perm[0], ...]: the same reordering as Tensor::permute.
inline Array permute(const Array& a, const std::vector<int64_t>& perm) {
  Shape shape(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) shape[d] = a.shape[size_t(perm[d])];
  Array r{shape, std::vector<double>(a.data.size())};
  for (int64_t i = 0; i < r.numel(); ++i) {
    auto index = unravel(i, shape);
    std::vector<int64_t> src(perm.size());
    for (size_t d = 0; d < perm.size(); ++d) src[size_t(perm[d])] = index[d];
    r.data[size_t(i)] = a.at(src);
  }
  return r;
}

// Folds the dims marked in `reduced` with f, starting from init; `finish(acc, n)` maps the
// accumulator of n elements to the result (mean divides, the rest keep it).
inline Array reduce(
    const Array& a, const std::vector<bool>& reduced, bool keepdim, double init,
    const std::function<double(double, double)>& f,
    const std::function<double(double, int64_t)>& finish = [](double acc, int64_t) { return acc; }) {
  Shape kept, out_shape;
  for (size_t d = 0; d < a.shape.size(); ++d) {
    if (!reduced[d]) kept.push_back(a.shape[d]);
    if (!reduced[d] || keepdim) out_shape.push_back(reduced[d] ? 1 : a.shape[d]);
  }
  std::vector<double> acc(size_t(count(kept)), init);
  std::vector<int64_t> n(acc.size(), 0);
  for (int64_t i = 0; i < a.numel(); ++i) {
    auto index = unravel(i, a.shape);
    int64_t flat = 0;
    for (size_t d = 0; d < a.shape.size(); ++d)
      if (!reduced[d]) flat = flat * a.shape[d] + index[d];
    acc[size_t(flat)] = f(acc[size_t(flat)], a.data[size_t(i)]);
    ++n[size_t(flat)];
  }
  for (size_t k = 0; k < acc.size(); ++k) acc[k] = finish(acc[k], n[k]);
  return {out_shape, acc};
}

}  // namespace mg::test

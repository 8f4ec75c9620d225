// kernels/cpu/index.cpp — kernels/index.h on the CPU.
//
// Every index is checked before any thread starts (an exception cannot leave an OpenMP region),
// check_indices or not: on the CPU the check costs a pass over the indices and no synchronisation.
// The reads (index_select, gather) split their output rows across threads (parallel.h). The
// accumulations split what no two indices can share: index_add the (o, k) columns, scatter_add the
// (o, k) lines; each thread walks i in increasing order, so duplicates accumulate without races and
// in a fixed order (the result does not depend on the thread count). cumsum splits the lines; sort
// the rows (std::stable_sort of the positions, compared by value).
// Layouts are checked by the dispatch (kernels/index.cpp).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "multigrad/kernels/cpu/parallel.h"
#include "multigrad/kernels/index.h"

namespace mg::kernels::cpu {
namespace {

void check_indices(const int64_t* idx, int64_t n, int64_t size, const char* name) {
  for (int64_t i = 0; i < n; ++i)
    MG_CHECK(idx[i] >= 0 && idx[i] < size, name, ": index ", idx[i], " (position ", i,
             ") is out of range [0, ", size, ")");
}

// Elements of a (O, L, I) tensor per unit of work: enough units per thread to reach kGrain.
int64_t grain_for(int64_t work_per_unit) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(work_per_unit, 1)); }

// a before b in ascending order: numbers by value, NaN above all of them.
template <class T>
bool ascending_before(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

}  // namespace

void index_select(const Tensor& src, const Tensor& index, const Tensor& out, bool, const char* name) {
  const int64_t outer = src.size(0), size = src.size(1), inner = src.size(2), n = index.size(0);
  const int64_t* idx = index.data<int64_t>();
  check_indices(idx, n, size, name);
  MG_DISPATCH_ARITH(src.dtype(), name, [&] {
    using T = scalar_t;
    const T* s = src.data<T>();
    T* o = out.data<T>();
    parallel_for(out.device(), outer * n, grain_for(inner), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {  // row r = (b, i) of out
        const int64_t b = r / n, i = r - b * n;
        std::copy_n(s + (b * size + idx[i]) * inner, inner, o + r * inner);
      }
    });
  });
}

void index_add(const Tensor& src, const Tensor& index, const Tensor& out, bool, const char* name) {
  const int64_t outer = out.size(0), size = out.size(1), inner = out.size(2), n = index.size(0);
  const int64_t* idx = index.data<int64_t>();
  check_indices(idx, n, size, name);
  MG_DISPATCH_ARITH(out.dtype(), name, [&] {
    using T = scalar_t;
    const T* s = src.data<T>();
    T* o = out.data<T>();
    // A strip of columns k of one o costs n additions per column.
    parallel_for(out.device(), outer * inner, grain_for(n), [&](int64_t begin, int64_t end) {
      for (int64_t b = begin / inner; b * inner < end; ++b) {
        const int64_t k0 = std::max(begin, b * inner) - b * inner, k1 = std::min(end, (b + 1) * inner) - b * inner;
        for (int64_t i = 0; i < n; ++i) {
          const T* from = s + (b * n + i) * inner;
          T* to = o + (b * size + idx[i]) * inner;
          for (int64_t k = k0; k < k1; ++k) to[k] += from[k];
        }
      }
    });
  });
}

void gather(const Tensor& src, const Tensor& index, const Tensor& out, bool) {
  const int64_t outer = src.size(0), size = src.size(1), inner = src.size(2), n = out.size(1);
  const int64_t* idx = index.data<int64_t>();
  check_indices(idx, index.numel(), size, "gather");
  MG_DISPATCH_ARITH(src.dtype(), "gather", [&] {
    using T = scalar_t;
    const T* s = src.data<T>();
    T* o = out.data<T>();
    parallel_for(out.device(), outer * n, grain_for(inner), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {  // row r = (b, i) of out and index
        const int64_t b = r / n;
        for (int64_t k = 0; k < inner; ++k) o[r * inner + k] = s[(b * size + idx[r * inner + k]) * inner + k];
      }
    });
  });
}

void scatter_add(const Tensor& src, const Tensor& index, const Tensor& out, bool) {
  const int64_t outer = out.size(0), size = out.size(1), inner = out.size(2), n = src.size(1);
  const int64_t* idx = index.data<int64_t>();
  check_indices(idx, index.numel(), size, "scatter_add");
  MG_DISPATCH_ARITH(out.dtype(), "scatter_add", [&] {
    using T = scalar_t;
    const T* s = src.data<T>();
    T* o = out.data<T>();
    parallel_for(out.device(), outer * inner, grain_for(n), [&](int64_t begin, int64_t end) {
      for (int64_t line = begin; line < end; ++line) {  // line = (b, k): its destinations are its own
        const int64_t b = line / inner, k = line - b * inner;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t from = (b * n + i) * inner + k;
          o[(b * size + idx[from]) * inner + k] += s[from];
        }
      }
    });
  });
}

void cumsum(const Tensor& in, const Tensor& out, bool reverse) {
  const int64_t outer = in.size(0), len = in.size(1), inner = in.size(2);
  if (in.numel() == 0) return;
  MG_DISPATCH_ARITH(in.dtype(), "cumsum", [&] {
    using T = scalar_t;
    const T* x = in.data<T>();
    T* y = out.data<T>();
    parallel_for(out.device(), outer, grain_for(len * inner), [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const int64_t base = b * len * inner, step = reverse ? -inner : inner;
        int64_t at = base + (reverse ? (len - 1) * inner : 0);
        std::copy_n(x + at, inner, y + at);
        for (int64_t i = 1; i < len; ++i, at += step)
          for (int64_t k = 0; k < inner; ++k) y[at + step + k] = y[at + k] + x[at + step + k];
      }
    });
  });
}

void sort(const Tensor& in, const Tensor& values, const Tensor& indices, bool descending) {
  const int64_t rows = in.size(0), len = in.size(1);
  MG_DISPATCH_ARITH(in.dtype(), "sort", [&] {
    using T = scalar_t;
    const T* x = in.data<T>();
    T* v = values.data<T>();
    int64_t* p = indices.data<int64_t>();
    parallel_for(in.device(), rows, grain_for(len * 16), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* row = x + r * len;
        int64_t* order = p + r * len;
        std::iota(order, order + len, int64_t(0));
        std::stable_sort(order, order + len, [&](int64_t a, int64_t b) {
          return descending ? ascending_before(row[b], row[a]) : ascending_before(row[a], row[b]);
        });
        for (int64_t j = 0; j < len; ++j) v[r * len + j] = row[order[j]];
      }
    });
  });
}

}  // namespace mg::kernels::cpu

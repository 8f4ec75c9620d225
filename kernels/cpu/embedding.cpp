// kernels/cpu/embedding.cpp — embedding gather and scatter-add on the CPU (kernels/embedding.h).
//
// Forward: out[i, :] = weight[indices[i], :], assigned; rows split in contiguous chunks across
// threads (parallel.h). Every index is checked before any thread starts: an exception cannot
// leave an OpenMP region.
// Backward: grad_weight[indices[i], :] += grad_out[i, :]. Two indices may name one row, so
// threads split the D columns instead of the n rows: each thread owns a strip of columns of
// every row of grad_weight and walks the indices in order, so duplicates accumulate without
// races and in a fixed order (the result does not depend on the thread count).
// Layouts are checked by the dispatch (kernels/embedding.cpp).
#include <algorithm>

#include "multigrad/kernels/cpu/parallel.h"
#include "multigrad/kernels/embedding.h"

namespace mg::kernels::cpu {

void embedding_fwd(const Tensor& weight, const Tensor& indices, const Tensor& out) {
  const int64_t vocab = weight.size(0), dim = weight.size(1), n = indices.size(0);
  const int64_t* idx = indices.data<int64_t>();  // (n)
  for (int64_t i = 0; i < n; ++i)
    MG_CHECK(idx[i] >= 0 && idx[i] < vocab, "embedding: index ", idx[i], " (position ", i,
             ") is out of range [0, V) for V = ", vocab);
  MG_DISPATCH_FLOATING(weight.dtype(), "embedding", [&] {
    using T = scalar_t;
    const T* w = weight.data<T>();  // (V, D)
    T* o = out.data<T>();           // (n, D)
    parallel_for(out.device(), n, std::max<int64_t>(1, kGrain / std::max<int64_t>(dim, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t i = begin; i < end; ++i) std::copy_n(w + idx[i] * dim, dim, o + i * dim);
                 });
  });
}

void embedding_bwd(const Tensor& grad_out, const Tensor& indices, const Tensor& grad_weight) {
  const int64_t dim = grad_weight.size(1), n = indices.size(0);
  const int64_t* idx = indices.data<int64_t>();  // (n)
  MG_DISPATCH_FLOATING(grad_weight.dtype(), "embedding backward", [&] {
    using T = scalar_t;
    const T* go = grad_out.data<T>();  // (n, D)
    T* gw = grad_weight.data<T>();     // (V, D)
    // A column strip costs n additions: enough columns per thread to reach kGrain of them.
    const int64_t cols_per_thread = std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1));
    parallel_for(grad_weight.device(), dim, cols_per_thread, [&](int64_t begin, int64_t end) {
      for (int64_t i = 0; i < n; ++i) {
        const T* src = go + i * dim;
        T* dst = gw + idx[i] * dim;
        for (int64_t d = begin; d < end; ++d) dst[d] += src[d];
      }
    });
  });
}

}  // namespace mg::kernels::cpu

// kernels/cuda/index.cu — kernels/index.h on CUDA, deterministic: every result is the CPU's bits.
//
// index_select, gather: one thread per output element (grid-stride); consecutive threads read and
// write consecutive k, so both sides are coalesced. A thread whose index is outside [0, S) writes
// nothing and records its position in a BadIndexFlag (bad_index.cuh), read back by the launcher.
// index_add: each position i becomes the key index[i] * n + i (n < 2^31 and S < 2^32 keep it
// inside int64); a bitonic sort of the keys (padded with INT64_MAX to m = the next power of two:
// log2(m)(log2(m)+1)/2 compare-and-swap launches) groups the positions of one destination row in
// increasing i. Then one thread per (o, sorted slot, k) whose slot starts a row's run reads
// out[o, row, k], adds the run's src elements in increasing i and writes it back: the CPU's
// sequence of additions, independent of block order (atomicAdd's order, and so its rounding,
// would vary from run to run). Scratch: m int64 keys from the caching allocator on the stream.
// scatter_add, cumsum: one thread per line (o, k), walking i in increasing order (decreasing for a
// reverse cumsum); lines own disjoint outputs. Parallel over O * I only: a long dim with few lines
// runs on few threads.
// sort: each row padded to m = the next power of two with entries that sort last, then a bitonic
// sort of every row at once (each compare-and-swap stays inside its row) by (value, position):
// all keys differ, so the network's order is the stable order; NaN above every number.
// check_indices = false: no BadIndexFlag and no synchronisation; a bad index is still never
// written through (skipped).
// Preconditions (asserted by the dispatch, kernels/index.cpp): see kernels/index.h.
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <optional>

#include "multigrad/core/stream.h"
#include "multigrad/kernels/cuda/bad_index.cuh"
#include "multigrad/kernels/cuda/cuda_utils.cuh"
#include "multigrad/kernels/cuda/launch.cuh"
#include "multigrad/kernels/functors.h"
#include "multigrad/kernels/index.h"

namespace mg::kernels::cuda {
namespace {

// ============================== kernels ==============================

// In a kernel: `pos` holds a bad index; recorded when the launcher asked for a check.
__device__ __forceinline__ void note_bad(unsigned long long* bad, int64_t pos) {
  if (bad) report_bad_index(bad, pos);
}

// `slots` = max(I, 1) and `blocks` = max(O, 1): with I == 0 or O == 0 there is nothing to copy,
// yet one thread per index still checks it, so an empty tensor rejects bad indices as the CPU does.
template <class T>
__global__ void index_select_kernel(const T* src, const int64_t* index, T* out, int64_t outer, int64_t blocks,
                                    int64_t size, int64_t n, int64_t inner, int64_t slots, unsigned long long* bad) {
  const int64_t total = blocks * n * slots;
  for (int64_t e = global_thread_index(); e < total; e += grid_stride()) {
    const int64_t r = e / slots, k = e - r * slots, b = r / n, i = r - b * n;
    const int64_t row = index[i];
    if (row < 0 || row >= size) {
      note_bad(bad, i);
      continue;
    }
    if (b < outer && k < inner) out[r * inner + k] = src[(b * size + row) * inner + k];
  }
}

template <class T>
__global__ void gather_kernel(const T* src, const int64_t* index, T* out, int64_t total, int64_t size, int64_t n,
                              int64_t inner, unsigned long long* bad) {
  for (int64_t e = global_thread_index(); e < total; e += grid_stride()) {
    const int64_t row = index[e];
    if (row < 0 || row >= size) {
      note_bad(bad, e);
      continue;
    }
    const int64_t k = e % inner, b = e / (n * inner);
    out[e] = src[(b * size + row) * inner + k];
  }
}

// Keys index[i] * n + i; a bad index gets the padding key (nothing is added for it) and is
// recorded when `bad` is given.
__global__ void index_keys_kernel(const int64_t* index, int64_t* keys, int64_t n, int64_t m, int64_t size,
                                  unsigned long long* bad) {
  for (int64_t i = global_thread_index(); i < m; i += grid_stride()) {
    int64_t key = std::numeric_limits<int64_t>::max();
    if (i < n) {
      if (index[i] < 0 || index[i] >= size)
        note_bad(bad, i);
      else
        key = index[i] * n + i;
    }
    keys[i] = key;
  }
}

// One stage (k, j) of the bitonic sort of keys[0, m): slot i and its partner i ^ j are put in
// increasing order where bit k of i is clear, in decreasing order where it is set.
__global__ void bitonic_stage_kernel(int64_t* keys, int64_t m, int64_t k, int64_t j) {
  for (int64_t i = global_thread_index(); i < m; i += grid_stride()) {
    const int64_t partner = i ^ j;
    if (partner <= i) continue;
    const int64_t a = keys[i], b = keys[partner];
    if (((i & k) == 0) == (a > b)) {
      keys[i] = b;
      keys[partner] = a;
    }
  }
}

template <class T>
__global__ void index_add_kernel(const T* src, const int64_t* keys, T* out, int64_t outer, int64_t size, int64_t n,
                                 int64_t inner) {  // keys sorted; padding keys (INT64_MAX) sort last
  const int64_t total = outer * n * inner;
  constexpr int64_t kPad = std::numeric_limits<int64_t>::max();
  for (int64_t e = global_thread_index(); e < total; e += grid_stride()) {
    const int64_t k = e % inner, s0 = (e / inner) % n, b = e / (n * inner);
    if (keys[s0] == kPad) continue;
    const int64_t row = keys[s0] / n;
    if (s0 > 0 && keys[s0 - 1] / n == row) continue;  // not the first slot of its row's run
    T* to = out + (b * size + row) * inner + k;
    T acc = *to;
    for (int64_t s = s0; s < n && keys[s] != kPad && keys[s] / n == row; ++s)
      acc += src[(b * n + keys[s] % n) * inner + k];
    *to = acc;
  }
}

template <class T>
__global__ void scatter_add_kernel(const T* src, const int64_t* index, T* out, int64_t outer, int64_t size,
                                   int64_t n, int64_t inner, unsigned long long* bad) {
  for (int64_t line = global_thread_index(); line < outer * inner; line += grid_stride()) {
    const int64_t b = line / inner, k = line - b * inner;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t from = (b * n + i) * inner + k, row = index[from];
      if (row < 0 || row >= size)
        note_bad(bad, from);
      else
        out[(b * size + row) * inner + k] += src[from];
    }
  }
}

template <class T>
__global__ void cumsum_kernel(const T* in, T* out, int64_t outer, int64_t len, int64_t inner, bool reverse) {
  for (int64_t line = global_thread_index(); line < outer * inner; line += grid_stride()) {
    const int64_t b = line / inner, k = line - b * inner, step = reverse ? -inner : inner;
    int64_t at = b * len * inner + k + (reverse ? (len - 1) * inner : 0);
    T acc = in[at];
    out[at] = acc;
    for (int64_t i = 1; i < len; ++i) {
      at += step;
      acc = acc + in[at];
      out[at] = acc;
    }
  }
}

// a before b in the requested order; position -1 marks padding, after everything.
template <class T>
__device__ __forceinline__ bool sorts_before(T av, int64_t ap, T bv, int64_t bp, bool descending) {
  if (ap < 0) return false;
  if (bp < 0) return true;
  const bool a_nan = m_isnan(av), b_nan = m_isnan(bv);
  if (a_nan != b_nan) return descending ? a_nan : b_nan;
  if (!a_nan && av != bv) return descending ? av > bv : av < bv;
  return ap < bp;
}

template <class T>
__global__ void sort_init_kernel(const T* in, T* vals, int64_t* pos, int64_t rows, int64_t len, int64_t m) {
  for (int64_t e = global_thread_index(); e < rows * m; e += grid_stride()) {
    const int64_t r = e / m, j = e - r * m;
    vals[e] = j < len ? in[r * len + j] : T(0);
    pos[e] = j < len ? j : -1;
  }
}

template <class T>
__global__ void sort_stage_kernel(T* vals, int64_t* pos, int64_t total, int64_t m, int64_t k, int64_t j,
                                  bool descending) {
  for (int64_t e = global_thread_index(); e < total; e += grid_stride()) {
    const int64_t i = e % m, partner = i ^ j;
    if (partner <= i) continue;
    const int64_t f = e - i + partner;
    const bool ordered = sorts_before(vals[e], pos[e], vals[f], pos[f], descending);
    if (((i & k) == 0) != ordered) {
      const T v = vals[e];
      vals[e] = vals[f];
      vals[f] = v;
      const int64_t p = pos[e];
      pos[e] = pos[f];
      pos[f] = p;
    }
  }
}

template <class T>
__global__ void sort_copy_kernel(const T* vals, const int64_t* pos, T* values, int64_t* indices, int64_t rows,
                                 int64_t len, int64_t m) {
  for (int64_t e = global_thread_index(); e < rows * len; e += grid_stride()) {
    const int64_t r = e / len, j = e - r * len;
    values[e] = vals[r * m + j];
    indices[e] = pos[r * m + j];
  }
}

int64_t next_power_of_two(int64_t n) {
  int64_t m = 1;
  while (m < n) m *= 2;
  return m;
}

// The error for a bad index at `position` of `index`, if `bad` recorded one.
void throw_if_bad(const BadIndexFlag& bad, const Tensor& index, int64_t size, const char* name) {
  const int64_t position = bad.first_bad();
  if (position >= 0)
    MG_ERROR(name, ": index ", bad.read(index.data<int64_t>() + position), " (position ", position,
             ") is out of range [0, ", size, ")");
}

}  // namespace

// ============================== launchers ==============================

void index_select(const Tensor& src, const Tensor& index, const Tensor& out, bool check_indices, const char* name,
                  cudaStream_t stream) {
  set_cuda_device(out.device());
  const int64_t outer = src.size(0), size = src.size(1), inner = src.size(2), n = index.size(0);
  if (n == 0) return;
  std::optional<BadIndexFlag> bad;
  if (check_indices) bad.emplace(out.device(), stream);
  const int64_t slots = std::max<int64_t>(inner, 1), blocks = std::max<int64_t>(outer, 1);
  MG_DISPATCH_ARITH(src.dtype(), name, [&] {
    using T = scalar_t;
    // reads the chosen rows and the indices, writes them
    const LaunchCost cost = launch_cost(2.0 * double(out.numel()) * sizeof(T) + 8.0 * double(n), 0);
    MG_LAUNCH(index_select_kernel<T>, grid_for(blocks * n * slots, kElementwiseBlock), kElementwiseBlock, stream, cost,
              src.data<T>(), index.data<int64_t>(), out.data<T>(), outer, blocks, size, n, inner, slots,
              bad ? bad->data() : nullptr);
    MG_CUDA_CHECK_LAUNCH(stream);
  });
  if (bad) throw_if_bad(*bad, index, size, name);
}

void index_add(const Tensor& src, const Tensor& index, const Tensor& out, bool check_indices, const char* name,
               cudaStream_t stream) {
  set_cuda_device(out.device());
  const int64_t outer = out.size(0), size = out.size(1), inner = out.size(2), n = index.size(0);
  if (n == 0) return;
  MG_CHECK(n < (int64_t(1) << 31) && size < (int64_t(1) << 32), name, " on CUDA: n = ", n, " indices and S = ",
           size, " rows overflow its int64 sort keys (n < 2^31, S < 2^32)");
  const int64_t m = next_power_of_two(n);
  const Tensor keys = Tensor::empty({m}, {DType::Int64, out.device()});
  int64_t* k_data = keys.data<int64_t>();
  std::optional<BadIndexFlag> bad;
  if (check_indices) bad.emplace(out.device(), stream);
  MG_LAUNCH(index_keys_kernel, grid_for(m, kElementwiseBlock), kElementwiseBlock, stream,
            launch_cost(8.0 * double(n + m), 0), index.data<int64_t>(), k_data, n, m, size,
            bad ? bad->data() : nullptr);
  MG_CUDA_CHECK_LAUNCH(stream);
  if (bad) throw_if_bad(*bad, index, size, name);
  if (outer * inner == 0) return;
  for (int64_t k = 2; k <= m; k *= 2) {
    for (int64_t j = k / 2; j > 0; j /= 2) {
      MG_LAUNCH(bitonic_stage_kernel, grid_for(m, kElementwiseBlock), kElementwiseBlock, stream,
                per_element(m, 1, 1, 8, 0.5), k_data, m, k, j);  // a compare per pair
      MG_CUDA_CHECK_LAUNCH(stream);
    }
  }
  MG_DISPATCH_ARITH(out.dtype(), name, [&] {
    using T = scalar_t;
    // reads src and the keys, reads and writes the rows it adds into
    const double added = double(outer) * double(n) * double(inner);
    MG_LAUNCH(index_add_kernel<T>, grid_for(outer * n * inner, kElementwiseBlock), kElementwiseBlock, stream,
              launch_cost(3.0 * added * sizeof(T) + 8.0 * double(n), added), src.data<T>(), k_data, out.data<T>(),
              outer, size, n, inner);
    MG_CUDA_CHECK_LAUNCH(stream);
  });
}

void gather(const Tensor& src, const Tensor& index, const Tensor& out, bool check_indices, cudaStream_t stream) {
  set_cuda_device(out.device());
  const int64_t total = out.numel(), size = src.size(1), n = out.size(1), inner = out.size(2);
  if (total == 0) return;
  std::optional<BadIndexFlag> bad;
  if (check_indices) bad.emplace(out.device(), stream);
  MG_DISPATCH_ARITH(src.dtype(), "gather", [&] {
    using T = scalar_t;
    MG_LAUNCH(gather_kernel<T>, grid_for(total, kElementwiseBlock), kElementwiseBlock, stream,
              launch_cost(double(total) * (2.0 * sizeof(T) + 8), 0), src.data<T>(), index.data<int64_t>(),
              out.data<T>(), total, size, n, inner, bad ? bad->data() : nullptr);
    MG_CUDA_CHECK_LAUNCH(stream);
  });
  if (bad) throw_if_bad(*bad, index, size, "gather");
}

void scatter_add(const Tensor& src, const Tensor& index, const Tensor& out, bool check_indices, cudaStream_t stream) {
  set_cuda_device(out.device());
  const int64_t outer = out.size(0), size = out.size(1), inner = out.size(2), n = src.size(1);
  if (src.numel() == 0) return;
  std::optional<BadIndexFlag> bad;
  if (check_indices) bad.emplace(out.device(), stream);
  MG_DISPATCH_ARITH(out.dtype(), "scatter_add", [&] {
    using T = scalar_t;
    const double added = double(src.numel());  // each read with its index, added into a read and written value
    MG_LAUNCH(scatter_add_kernel<T>, grid_for(outer * inner, kElementwiseBlock), kElementwiseBlock, stream,
              launch_cost(added * (3.0 * sizeof(T) + 8), added), src.data<T>(), index.data<int64_t>(), out.data<T>(),
              outer, size, n, inner, bad ? bad->data() : nullptr);
    MG_CUDA_CHECK_LAUNCH(stream);
  });
  // Every good index has been added: out is left partly updated, where the CPU (which checks
  // first) leaves it as it was; the functional API adds into a fresh copy, so nothing is lost.
  if (bad) throw_if_bad(*bad, index, size, "scatter_add");
}

void cumsum(const Tensor& in, const Tensor& out, bool reverse, cudaStream_t stream) {
  set_cuda_device(out.device());
  const int64_t outer = in.size(0), len = in.size(1), inner = in.size(2);
  if (in.numel() == 0) return;
  MG_DISPATCH_ARITH(in.dtype(), "cumsum", [&] {
    using T = scalar_t;
    MG_LAUNCH(cumsum_kernel<T>, grid_for(outer * inner, kElementwiseBlock), kElementwiseBlock, stream,
              per_element(in.numel(), 1, 1, sizeof(T), 1), in.data<T>(), out.data<T>(), outer, len, inner, reverse);
    MG_CUDA_CHECK_LAUNCH(stream);
  });
}

void sort(const Tensor& in, const Tensor& values, const Tensor& indices, bool descending, cudaStream_t stream) {
  set_cuda_device(in.device());
  const int64_t rows = in.size(0), len = in.size(1);
  if (in.numel() == 0) return;
  const int64_t m = next_power_of_two(len);
  MG_DISPATCH_ARITH(in.dtype(), "sort", [&] {
    using T = scalar_t;
    const Tensor vals = Tensor::empty({rows, m}, {in.dtype(), in.device()});
    const Tensor pos = Tensor::empty({rows, m}, {DType::Int64, in.device()});
    const unsigned grid = grid_for(rows * m, kElementwiseBlock);
    MG_LAUNCH(sort_init_kernel<T>, grid, kElementwiseBlock, stream,
              launch_cost(double(rows) * (double(len) * sizeof(T) + double(m) * (sizeof(T) + 8)), 0), in.data<T>(),
              vals.data<T>(), pos.data<int64_t>(), rows, len, m);
    MG_CUDA_CHECK_LAUNCH(stream);
    for (int64_t k = 2; k <= m; k *= 2) {
      for (int64_t j = k / 2; j > 0; j /= 2) {
        MG_LAUNCH(sort_stage_kernel<T>, grid, kElementwiseBlock, stream,
                  per_element(rows * m, 1, 1, sizeof(T) + 8, 0.5), vals.data<T>(), pos.data<int64_t>(), rows * m, m, k,
                  j, descending);
        MG_CUDA_CHECK_LAUNCH(stream);
      }
    }
    MG_LAUNCH(sort_copy_kernel<T>, grid_for(rows * len, kElementwiseBlock), kElementwiseBlock, stream,
              per_element(rows * len, 1, 1, sizeof(T) + 8), vals.data<T>(), pos.data<int64_t>(), values.data<T>(),
              indices.data<int64_t>(), rows, len, m);
    MG_CUDA_CHECK_LAUNCH(stream);
  });
}

}  // namespace mg::kernels::cuda

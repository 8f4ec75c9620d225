// kernels/cuda/attention.cu — fused scaled dot-product attention on CUDA in the FlashAttention
// style (kernels/attention.h has the formulas): tiles of keys and values (or queries) staged in
// shared memory, an online softmax, no (L, S) matrix anywhere, the probabilities recomputed in
// backward from the forward's log-sum-exp.
//
// Work split: one thread per output row, kRows threads per block, so that every thread of a
// block reads the same shared element at once (a broadcast: no bank conflicts) and each output
// is summed by one thread in a fixed order (deterministic, as kernels/attention.h promises, with
// no atomics: FlashAttention-2 adds grad_q with atomicAdd, whose rounding follows block order).
// A row of E or F values lives in registers (arrays of kMaxD, the head width rounded up to 32, 64
// or 128; at 128 some spill to local memory). Tiles are kRows rows of kMaxD: kTileBytes for the
// two staged tiles, so that 3 blocks fit an SM's shared memory.
//   attention_fwd_kernel      grid (B H, L / kRows), a thread per query row i. For each tile of
//                             keys it may see: s = scale q_i . k_j, and the online softmax:
//                             a larger s rescales the running sum l and accumulator by exp(m - s)
//                             and becomes the max m; then l += exp(s - m), acc += exp(s - m) v_j.
//                             out_i = acc / l, lse_i = m + log l.
//   attention_bwd_dq_kernel   grid (B H, L / kRows), a thread per query row i: D_i = g_i . out_i
//                             (kept for the next kernel), then over the key tiles p, dp, ds as in
//                             kernels/attention.h, grad_q_i = scale sum_j ds_ij k_j.
//   attention_bwd_dkv_kernel  grid (B H, S / kRows), a thread per key row j, over the tiles of
//                             queries that see it (from j on when causal): grad_v_j = sum_i p_ij
//                             g_i, grad_k_j = scale sum_i ds_ij q_i.
// Loads into shared memory are coalesced: consecutive threads take consecutive columns.
// Accumulation in the element type. With bf16 or fp16 inputs (kernels/attention.h) each p and ds
// is rounded to that precision where it multiplies a row (as_input): the arithmetic of a bf16 or
// fp16 attention kernel that accumulates in float32, on CUDA cores (no tensor-core path yet). The
// forward rounds exp(s - m) against the running max m, as FlashAttention's online softmax does.
// Preconditions (asserted by kernels/attention.cpp): the (B, H, rows, cols) operands have a unit
// column stride; lse contiguous (B, H, L); E, F <= 128.
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <type_traits>

#include "multigrad/core/stream.h"
#include "multigrad/kernels/attention.h"
#include "multigrad/kernels/cuda/cuda_utils.cuh"
#include "multigrad/kernels/cuda/launch.cuh"
#include "multigrad/kernels/functors.h"

namespace mg::kernels::cuda {
namespace {

// Shared memory for a block's two staged tiles: 32 KB leaves room for 3 blocks in an SM's
// 100+ KB, and fits the 48 KB a block gets without opting in to more.
inline constexpr int kTileBytes = 32 * 1024;

template <class T, int kMaxD>
constexpr int tile_rows() {
  return kTileBytes / (2 * kMaxD * int(sizeof(T)));  // 16 (double, 128) to 128 (float, 32)
}

// One operand (B, H, rows, cols): element (b, h, r, c) at data + b * stride_b + h * stride_h +
// r * stride_row + c.
template <class T>
struct Heads {
  T* data;
  int64_t stride_b, stride_h, stride_row, heads;
  __device__ T* row(int64_t bh, int64_t r) const {
    return data + (bh / heads) * stride_b + (bh % heads) * stride_h + r * stride_row;
  }
};

template <class T>
Heads<T> heads_of(const Tensor& t) {
  const auto& s = t.strides();
  return {static_cast<T*>(t.data_ptr()), s[0], s[1], s[2], t.size(1)};
}

struct Sizes {
  int64_t queries, keys;
  int qk_dim, v_dim;
  bool causal;
  __device__ int64_t seen(int64_t i) const { return causal ? (i + 1 < keys ? i + 1 : keys) : keys; }
};

// tile[r][c] = rows r0 + r of `src` (c < cols), 0 past its last row: the block's threads stride
// over the tile's elements, consecutive threads on consecutive columns.
template <class T, int kRows, int kMaxD>
__device__ void stage(T (&tile)[kRows][kMaxD], const Heads<const T>& src, int64_t bh, int64_t r0, int64_t rows,
                      int cols) {
  for (int e = threadIdx.x; e < kRows * cols; e += blockDim.x) {
    const int r = e / cols, c = e - r * cols;
    tile[r][c] = r0 + r < rows ? src.row(bh, r0 + r)[c] : T(0);
  }
}

template <class T, int kMaxD>
__device__ void load_row(T (&dst)[kMaxD], const T* src, int cols) {
#pragma unroll
  for (int c = 0; c < kMaxD; ++c) dst[c] = c < cols ? src[c] : T(0);
}

// dst[c] = factor * src[c] for c < cols. The loop runs over kMaxD with a guard, not to cols: a
// register array indexed by a runtime bound would be moved to local memory.
template <class T, int kMaxD>
__device__ void store_row(T* dst, const T (&src)[kMaxD], int cols, T factor) {
#pragma unroll
  for (int c = 0; c < kMaxD; ++c)
    if (c < cols) dst[c] = factor * src[c];
}

template <class T, int kMaxD>
__device__ T dot(const T (&a)[kMaxD], const T* b, int cols) {
  T sum = 0;
#pragma unroll
  for (int c = 0; c < kMaxD; ++c)
    if (c < cols) sum += a[c] * b[c];
  return sum;
}

// x as the operand of a product in the inputs' precision: rounded to bf16 or fp16 (T float), or x.
template <class T>
__device__ T as_input(T x, GemmInputs inputs) {
  if constexpr (std::is_same_v<T, float>) {
    if (inputs == GemmInputs::BFloat16) return RoundBFloat16Op{}(x);
    if (inputs == GemmInputs::Float16) return RoundFloat16Op{}(x);
  }
  return x;
}

// The walk of the forward and of grad_q, over the tiles of keys (and values) that the block's
// query rows [i0, i0 + kRows) see: each tile staged into shared memory by the whole block, then
// visit(r) for each key j0 + r of it that this thread's row i = i0 + threadIdx.x sees (none for a
// row past L). Every thread of the block must call it: it holds the barriers.
template <class T, int kRows, int kMaxD, class Visit>
__device__ void for_each_visible_key(T (&k_tile)[kRows][kMaxD], T (&v_tile)[kRows][kMaxD], const Heads<const T>& k,
                                     const Heads<const T>& v, int64_t bh, int64_t i0, const Sizes& n,
                                     const Visit& visit) {
  const int64_t i = i0 + threadIdx.x;
  const int64_t last_row = std::min<int64_t>(i0 + kRows, n.queries) - 1;
  for (int64_t j0 = 0; j0 < n.seen(last_row); j0 += kRows) {  // the keys any row of the block sees
    __syncthreads();  // the previous tiles are consumed
    stage(k_tile, k, bh, j0, n.keys, n.qk_dim);
    stage(v_tile, v, bh, j0, n.keys, n.v_dim);
    __syncthreads();
    if (i >= n.queries) continue;
    const int64_t count = std::min<int64_t>(kRows, n.seen(i) - j0);
    for (int r = 0; r < count; ++r) visit(r);
  }
}

// ============================== kernels ==============================

template <class T, int kMaxD>
__global__ void attention_fwd_kernel(Heads<const T> q, Heads<const T> k, Heads<const T> v, Heads<T> out, T* lse,
                                     Sizes n, T scale, GemmInputs inputs) {  // lse (B H, L)
  constexpr int kRows = tile_rows<T, kMaxD>();
  __shared__ T k_tile[kRows][kMaxD];  // (kRows, E)
  __shared__ T v_tile[kRows][kMaxD];  // (kRows, F)
  const int64_t bh = blockIdx.x, i0 = int64_t(blockIdx.y) * kRows, i = i0 + threadIdx.x;
  const bool active = i < n.queries;
  T qi[kMaxD], acc[kMaxD];
  load_row(qi, active ? q.row(bh, i) : nullptr, active ? n.qk_dim : 0);
  load_row(acc, static_cast<const T*>(nullptr), 0);
  T m = -std::numeric_limits<T>::infinity(), l = 0;
  for_each_visible_key(k_tile, v_tile, k, v, bh, i0, n, [&](int r) {
    const T s = scale * dot(qi, k_tile[r], n.qk_dim);
    if (s > m) {  // a new max: rescale what was summed against the old one
      const T alpha = m_exp(m - s);
      l *= alpha;
#pragma unroll
      for (int c = 0; c < kMaxD; ++c) acc[c] *= alpha;
      m = s;
    }
    const T p = m_exp(s - m);
    l += p;
    const T weight = as_input(p, inputs);
#pragma unroll
    for (int c = 0; c < kMaxD; ++c)
      if (c < n.v_dim) acc[c] += weight * v_tile[r][c];
  });
  if (!active) return;
  T* o = out.row(bh, i);
  store_row(o, acc, n.v_dim, l > 0 ? T(1) / l : T(0));
  lse[bh * n.queries + i] = l > 0 ? m + m_log(l) : -std::numeric_limits<T>::infinity();
}

template <class T, int kMaxD>
__global__ void attention_bwd_dq_kernel(Heads<const T> g, Heads<const T> q, Heads<const T> k, Heads<const T> v,
                                        Heads<const T> out, const T* lse, Heads<T> grad_q, T* delta, Sizes n,
                                        T scale, GemmInputs inputs) {  // lse, delta (B H, L)
  constexpr int kRows = tile_rows<T, kMaxD>();
  __shared__ T k_tile[kRows][kMaxD];  // (kRows, E)
  __shared__ T v_tile[kRows][kMaxD];  // (kRows, F)
  const int64_t bh = blockIdx.x, i0 = int64_t(blockIdx.y) * kRows, i = i0 + threadIdx.x;
  const bool active = i < n.queries;
  T qi[kMaxD], gi[kMaxD], dq[kMaxD];
  load_row(qi, active ? q.row(bh, i) : nullptr, active ? n.qk_dim : 0);
  load_row(gi, active ? g.row(bh, i) : nullptr, active ? n.v_dim : 0);
  load_row(dq, static_cast<const T*>(nullptr), 0);
  const T d = active ? dot(gi, out.row(bh, i), n.v_dim) : T(0);
  const T lse_i = active ? lse[bh * n.queries + i] : T(0);
  for_each_visible_key(k_tile, v_tile, k, v, bh, i0, n, [&](int r) {
    const T p = m_exp(scale * dot(qi, k_tile[r], n.qk_dim) - lse_i);
    const T ds = as_input(p * (dot(gi, v_tile[r], n.v_dim) - d), inputs);
#pragma unroll
    for (int c = 0; c < kMaxD; ++c)
      if (c < n.qk_dim) dq[c] += ds * k_tile[r][c];
  });
  if (!active) return;
  T* out_row = grad_q.row(bh, i);
  store_row(out_row, dq, n.qk_dim, scale);
  delta[bh * n.queries + i] = d;
}

template <class T, int kMaxD>
__global__ void attention_bwd_dkv_kernel(Heads<const T> g, Heads<const T> q, Heads<const T> k, Heads<const T> v,
                                         const T* lse, const T* delta, Heads<T> grad_k, Heads<T> grad_v, Sizes n,
                                         T scale, GemmInputs inputs) {  // lse, delta (B H, L)
  constexpr int kRows = tile_rows<T, kMaxD>();
  __shared__ T q_tile[kRows][kMaxD];  // (kRows, E)
  __shared__ T g_tile[kRows][kMaxD];  // (kRows, F)
  __shared__ T lse_tile[kRows], delta_tile[kRows];
  const int64_t bh = blockIdx.x, j0 = int64_t(blockIdx.y) * kRows, j = j0 + threadIdx.x;
  const bool active = j < n.keys;
  T kj[kMaxD], vj[kMaxD], dk[kMaxD], dv[kMaxD];
  load_row(kj, active ? k.row(bh, j) : nullptr, active ? n.qk_dim : 0);
  load_row(vj, active ? v.row(bh, j) : nullptr, active ? n.v_dim : 0);
  load_row(dk, static_cast<const T*>(nullptr), 0);
  load_row(dv, static_cast<const T*>(nullptr), 0);
  // Causal: query i sees key j when i >= j, so the block's first query is j0 (the tiles align).
  for (int64_t i0 = n.causal ? j0 : 0; i0 < n.queries; i0 += kRows) {
    __syncthreads();
    stage(q_tile, q, bh, i0, n.queries, n.qk_dim);
    stage(g_tile, g, bh, i0, n.queries, n.v_dim);
    for (int r = threadIdx.x; r < kRows; r += blockDim.x) {
      const bool real = i0 + r < n.queries;
      lse_tile[r] = real ? lse[bh * n.queries + i0 + r] : T(0);
      delta_tile[r] = real ? delta[bh * n.queries + i0 + r] : T(0);
    }
    __syncthreads();
    if (!active) continue;
    const int64_t rows = std::min<int64_t>(kRows, n.queries - i0);
    for (int r = 0; r < rows; ++r) {
      if (n.causal && i0 + r < j) continue;
      const T p = m_exp(scale * dot(kj, q_tile[r], n.qk_dim) - lse_tile[r]);
      const T ds = as_input(p * (dot(vj, g_tile[r], n.v_dim) - delta_tile[r]), inputs);
      const T weight = as_input(p, inputs);
#pragma unroll
      for (int c = 0; c < kMaxD; ++c) {
        dv[c] += weight * (c < n.v_dim ? g_tile[r][c] : T(0));
        dk[c] += ds * (c < n.qk_dim ? q_tile[r][c] : T(0));
      }
    }
  }
  if (!active) return;
  T* gk = grad_k.row(bh, j);
  T* gv = grad_v.row(bh, j);
  store_row(gk, dk, n.qk_dim, scale);
  store_row(gv, dv, n.v_dim, T(1));
}

// Calls body.template operator()<kMaxD>() with the smallest of 32, 64, 128 that holds both widths.
template <class Body>
void with_head_width(int64_t qk_dim, int64_t v_dim, const Body& body) {
  const int64_t widest = std::max(qk_dim, v_dim);
  if (widest <= 32) return body.template operator()<32>();
  if (widest <= 64) return body.template operator()<64>();
  body.template operator()<kAttentionMaxHeadDim>();
}

Sizes sizes_of(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  return {q.size(2), k.size(2), int(q.size(3)), int(v.size(3)), causal};
}

// The (query, key) pairs one head scores: all of them, or under the causal mask each query i sees
// the keys up to i + S - L (the queries being the last L of the S positions).
double pairs_of(const Sizes& n) {
  if (!n.causal) return double(n.queries) * double(n.keys);
  double pairs = 0;
  for (int64_t i = 0; i < n.queries; ++i) pairs += double(std::clamp<int64_t>(i + n.keys - n.queries + 1, 0, n.keys));
  return pairs;
}

// A pass's cost: `rows` of q/k/v-shaped tensors moved once per head, and per scored pair
// `flops_per_pair` (a dot product over a width is 2 x the width; softmax's scale, max, exp, sum 5).
LaunchCost attention_cost(const Sizes& n, int64_t bh, int value_bytes, double query_rows, double key_rows,
                          double flops_per_pair) {
  const double bytes = (query_rows * double(n.queries) + key_rows * double(n.keys)) * double(bh) * value_bytes;
  return launch_cost(bytes, pairs_of(n) * double(bh) * flops_per_pair);
}

}  // namespace

// ============================== launchers ==============================

void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, const Tensor& out,
                   const Tensor& lse, GemmInputs inputs, cudaStream_t stream) {
  set_cuda_device(out.device());
  const Sizes n = sizes_of(q, k, v, causal);
  const int64_t bh = q.size(0) * q.size(1);
  if (bh * n.queries == 0) return;
  MG_DISPATCH_FLOATING(q.dtype(), "attention_fwd", [&] {
    using T = scalar_t;
    with_head_width(n.qk_dim, n.v_dim, [&]<int kMaxD>() {
      constexpr int kRows = tile_rows<T, kMaxD>();
      auto* kernel = &attention_fwd_kernel<T, kMaxD>;
      // reads q, k, v; writes out and lse
      const LaunchCost cost = attention_cost(n, bh, sizeof(T), n.qk_dim + n.v_dim + 1, n.qk_dim + n.v_dim,
                                             2.0 * (n.qk_dim + n.v_dim) + 5);
      MG_LAUNCH(kernel, dim3(unsigned(bh), unsigned(ceil_div(n.queries, kRows))), kRows, stream, cost,
                heads_of<const T>(q), heads_of<const T>(k), heads_of<const T>(v), heads_of<T>(out), lse.data<T>(), n,
                T(scale), inputs);
      MG_CUDA_CHECK_LAUNCH(stream);
    });
  });
}

void attention_bwd(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& lse, bool causal, double scale, const Tensor& grad_q, const Tensor& grad_k,
                   const Tensor& grad_v, GemmInputs inputs, cudaStream_t stream) {
  set_cuda_device(q.device());
  const Sizes n = sizes_of(q, k, v, causal);
  const int64_t bh = q.size(0) * q.size(1);
  if (bh == 0) return;
  MG_DISPATCH_FLOATING(q.dtype(), "attention_bwd", [&] {
    using T = scalar_t;
    // D_i per query row, written by the first kernel and read by the second (same stream).
    const Tensor delta = Tensor::empty({bh, n.queries}, lse.options());  // (B H, L)
    with_head_width(n.qk_dim, n.v_dim, [&]<int kMaxD>() {
      constexpr int kRows = tile_rows<T, kMaxD>();
      if (n.queries > 0) {
        auto* dq_kernel = &attention_bwd_dq_kernel<T, kMaxD>;
        // reads grad_out, q, out, lse and k, v; writes grad_q and delta
        const LaunchCost cost = attention_cost(n, bh, sizeof(T), 2.0 * n.qk_dim + 2.0 * n.v_dim + 2,
                                               n.qk_dim + n.v_dim, 4.0 * n.qk_dim + 2.0 * n.v_dim + 5);
        MG_LAUNCH(dq_kernel, dim3(unsigned(bh), unsigned(ceil_div(n.queries, kRows))), kRows, stream, cost,
                  heads_of<const T>(grad_out), heads_of<const T>(q), heads_of<const T>(k), heads_of<const T>(v),
                  heads_of<const T>(out), lse.data<T>(), heads_of<T>(grad_q), delta.data<T>(), n, T(scale),
                  inputs);
        MG_CUDA_CHECK_LAUNCH(stream);
      }
      if (n.keys > 0) {
        auto* dkv_kernel = &attention_bwd_dkv_kernel<T, kMaxD>;
        // reads grad_out, q, lse, delta and k, v; writes grad_k and grad_v
        const LaunchCost cost = attention_cost(n, bh, sizeof(T), n.qk_dim + n.v_dim + 2,
                                               2.0 * (n.qk_dim + n.v_dim), 4.0 * (n.qk_dim + n.v_dim) + 5);
        MG_LAUNCH(dkv_kernel, dim3(unsigned(bh), unsigned(ceil_div(n.keys, kRows))), kRows, stream, cost,
                  heads_of<const T>(grad_out), heads_of<const T>(q), heads_of<const T>(k), heads_of<const T>(v),
                  lse.data<T>(), delta.data<T>(), heads_of<T>(grad_k), heads_of<T>(grad_v), n, T(scale),
                  inputs);
        MG_CUDA_CHECK_LAUNCH(stream);
      }
    });
  });
}

}  // namespace mg::kernels::cuda

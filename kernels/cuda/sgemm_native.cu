// kernels/cuda/sgemm_native.cu — a handwritten tiled SGEMM, kept for study and benchmarked
// against cuBLAS (selected with MG_GEMM=native; see matmul.cu).
//
// What it computes: C[b] = A[b] @ B[b], A (M, K), B (K, N), C (M, N), float32, row-major; C is
// assigned (=). Each C element is a float32 sum over k in order of kTileK-wide chunks, one FMA
// per k (so it rounds differently from the CPU's BLAS and from cuBLAS, within K * eps * |A||B|).
//
// Work split and the hardware reasons for it:
//   - Block tile 128 x 128 of C, 256 threads (blockIdx.x: N tiles, blockIdx.y: M tiles,
//     blockIdx.z: batch). Each A and B element brought from global memory into shared memory is
//     reused 128 times, which lifts the kernel from memory-bound to compute-bound.
//   - K advances in chunks of kTileK = 8: the A tile (128 x 8) and the B tile (8 x 128) are 1024
//     floats each, exactly one float4 per thread per tile, and the two tiles take 8.4 KB of
//     shared memory, so several blocks stay resident per SM.
//   - Register blocking 8 x 8: each thread accumulates 64 outputs in registers; per k it reads 8
//     A and 8 B values from shared memory (four float4 loads) and issues 64 FMAs, so shared-memory
//     bandwidth is not the limit.
//   - A thread's 8 x 8 outputs are two 4-row bands (rows 4ty and 64 + 4ty) times two 4-column
//     bands (cols 4tx and 64 + 4tx): the 16 threads of a half-warp then read 16 consecutive
//     float4 of a shared row, which is conflict-free, and write C with float4 stores.
//   - The A tile is stored transposed (As[k][m]) so the compute loop reads A fragments as float4
//     along m; its rows are padded by 4 floats so the transposing stores of a warp hit 32
//     distinct banks.
//   - Global loads are float4 (one 128-bit transaction per 4 floats) when K and N are multiples
//     of 4 and the pointers and row strides are 16-byte aligned (kVec); otherwise scalar.
//     Out-of-range elements load as 0 and are not stored, so any M, N, K works.
// Preconditions (checked by the launcher): unit inner stride for every matrix, C contiguous.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "multigrad/core/cuda_check.h"
#include "multigrad/kernels/cuda/cuda_utils.cuh"
#include "multigrad/kernels/cuda/launch.cuh"
#include "multigrad/kernels/cuda/sgemm_native.cuh"

namespace mg::kernels::cuda {
namespace {

inline constexpr int kTileM = 128, kTileN = 128, kTileK = 8;
inline constexpr int kThreadM = 8, kThreadN = 8;  // outputs per thread
inline constexpr int kThreads = (kTileM / kThreadM) * (kTileN / kThreadN);  // 256
inline constexpr int kBand = 4;                   // a thread's rows (cols) come in two bands of 4
inline constexpr int kHalfTile = kTileM / 2;      // offset of the second band
inline constexpr int kTransposePad = 4;           // As row padding: conflict-free transposing stores
inline constexpr int kMaxGridYZ = 65535;          // hardware limit of gridDim.y and gridDim.z

static_assert(kThreads == kTileM * kTileK / 4 && kThreads == kTileK * kTileN / 4,
              "each thread loads exactly one float4 of each tile");

// Four consecutive elements of row `row`, columns col..col+3, of a (rows, cols) matrix with row
// stride ld; zeros outside it. kVec: cols % 4 == 0, col % 4 == 0 and 16-byte aligned rows, so the
// four are all inside or all outside and one 128-bit load fetches them.
template <bool kVec>
__device__ __forceinline__ float4 load_four(const float* m, int64_t ld, int row, int col, int rows, int cols) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (row >= rows) return v;
  const float* p = m + int64_t(row) * ld + col;
  if constexpr (kVec) {
    if (col < cols) v = *reinterpret_cast<const float4*>(p);
  } else {
    if (col + 0 < cols) v.x = p[0];
    if (col + 1 < cols) v.y = p[1];
    if (col + 2 < cols) v.z = p[2];
    if (col + 3 < cols) v.w = p[3];
  }
  return v;
}

// ============================== kernel ==============================

template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    sgemm_native_kernel(int batch, int M, int N, int K, const float* A, int64_t lda, int64_t stride_a,
                        const float* B, int64_t ldb, int64_t stride_b, float* C) {
  __shared__ __align__(16) float As[kTileK][kTileM + kTransposePad];  // A tile, transposed: As[k][m]
  __shared__ __align__(16) float Bs[kTileK][kTileN];                  // B tile: Bs[k][n]

  const int tile_m = blockIdx.y * kTileM, tile_n = blockIdx.x * kTileN;
  const int tid = threadIdx.x;
  // Loading roles: one float4 of A (row a_row, cols a_col..+3) and of B (row b_row, cols b_col..+3).
  const int a_row = tid / (kTileK / 4), a_col = (tid % (kTileK / 4)) * 4;
  const int b_row = tid / (kTileN / 4), b_col = (tid % (kTileN / 4)) * 4;
  // Compute roles: rows {ty*4 + i, 64 + ty*4 + i}, cols {tx*4 + j, 64 + tx*4 + j} of the tile.
  const int ty = tid / (kTileN / kThreadN), tx = tid % (kTileN / kThreadN);

  for (int b = blockIdx.z; b < batch; b += gridDim.z) {
    const float* a = A + int64_t(b) * stride_a;  // (M, K)
    const float* bm = B + int64_t(b) * stride_b;  // (K, N)
    float* c = C + int64_t(b) * M * N;            // (M, N)

    float acc[kThreadM][kThreadN] = {};
    for (int k0 = 0; k0 < K; k0 += kTileK) {
      float4 a4 = load_four<kVec>(a, lda, tile_m + a_row, k0 + a_col, M, K);
      float4 b4 = load_four<kVec>(bm, ldb, k0 + b_row, tile_n + b_col, K, N);
      As[a_col + 0][a_row] = a4.x;
      As[a_col + 1][a_row] = a4.y;
      As[a_col + 2][a_row] = a4.z;
      As[a_col + 3][a_row] = a4.w;
      *reinterpret_cast<float4*>(&Bs[b_row][b_col]) = b4;
      __syncthreads();

#pragma unroll
      for (int k = 0; k < kTileK; ++k) {
        float a_frag[kThreadM], b_frag[kThreadN];
        *reinterpret_cast<float4*>(&a_frag[0]) = *reinterpret_cast<const float4*>(&As[k][ty * kBand]);
        *reinterpret_cast<float4*>(&a_frag[kBand]) = *reinterpret_cast<const float4*>(&As[k][kHalfTile + ty * kBand]);
        *reinterpret_cast<float4*>(&b_frag[0]) = *reinterpret_cast<const float4*>(&Bs[k][tx * kBand]);
        *reinterpret_cast<float4*>(&b_frag[kBand]) = *reinterpret_cast<const float4*>(&Bs[k][kHalfTile + tx * kBand]);
#pragma unroll
        for (int i = 0; i < kThreadM; ++i)
#pragma unroll
          for (int j = 0; j < kThreadN; ++j) acc[i][j] = fmaf(a_frag[i], b_frag[j], acc[i][j]);
      }
      __syncthreads();  // the next chunk overwrites the tiles
    }

#pragma unroll
    for (int i = 0; i < kThreadM; ++i) {
      int row = tile_m + (i < kBand ? ty * kBand + i : kHalfTile + ty * kBand + (i - kBand));
      if (row >= M) continue;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        int col = tile_n + half * kHalfTile + tx * kBand;
        float* out = c + int64_t(row) * N + col;
        const float* v = &acc[i][half * kBand];
        if (kVec && col < N) {
          *reinterpret_cast<float4*>(out) = make_float4(v[0], v[1], v[2], v[3]);
        } else {
          for (int j = 0; j < kBand; ++j)
            if (col + j < N) out[j] = v[j];
        }
      }
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

// ============================== launcher ==============================

void sgemm_native(int64_t batch, int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, int64_t stride_a,
                  const float* b_, int64_t ldb, int64_t stride_b, float* c, cudaStream_t stream) {
  constexpr int64_t kIntMax = 2147483647;
  MG_CHECK(M <= kIntMax && N <= kIntMax && K <= kIntMax && batch <= kIntMax,
           "matmul (native SGEMM): sizes above 2^31 (M=", M, " N=", N, " K=", K, " batch=", batch, ")");
  MG_CHECK(ceil_div(M, kTileM) <= kMaxGridYZ, "matmul (native SGEMM): M=", M, " needs more than ", kMaxGridYZ,
           " row tiles");
  if (batch == 0 || M == 0 || N == 0) return;
  // float4 global loads and stores need every row start 16-byte aligned.
  bool vec = K % 4 == 0 && N % 4 == 0 && lda % 4 == 0 && ldb % 4 == 0 && stride_a % 4 == 0 && stride_b % 4 == 0 &&
             aligned16(a) && aligned16(b_) && aligned16(c);
  dim3 grid(unsigned(ceil_div(N, kTileN)), unsigned(ceil_div(M, kTileM)), unsigned(std::min<int64_t>(batch, kMaxGridYZ)));
  const LaunchCost cost = launch_cost(double(batch) * double(M * K + K * N + M * N) * sizeof(float),
                                      2.0 * double(batch) * double(M) * double(N) * double(K));
  if (vec)
    MG_LAUNCH(sgemm_native_kernel<true>, grid, kThreads, stream, cost, int(batch), int(M), int(N), int(K), a, lda,
              stride_a, b_, ldb, stride_b, c);
  else
    MG_LAUNCH(sgemm_native_kernel<false>, grid, kThreads, stream, cost, int(batch), int(M), int(N), int(K), a, lda,
              stride_a, b_, ldb, stride_b, c);
  MG_CUDA_CHECK_LAUNCH(stream);
}

}  // namespace mg::kernels::cuda

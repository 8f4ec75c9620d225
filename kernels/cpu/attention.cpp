// kernels/cpu/attention.cpp — fused scaled dot-product attention on the CPU (kernels/attention.h).
//
// Work split: the forward's unit is one (batch, head) and a block of kRowBlock query rows; the
// backward's is one (batch, head), whose blocks run in order because grad_k and grad_v sum over
// them. A unit runs on one thread with single-threaded GEMM calls whose shapes depend only on
// (L, S, E, F), so results depend neither on the thread count nor on B and H.
// Per block of rows [i0, i0 + rows), the keys any of its rows sees are [0, visible) (visible =
// min(S, i0 + rows) when causal, else S): row i of the block uses the first n_i of them and the
// rest of its probabilities are 0.
//   forward   X = scale * Q_blk K^T            (rows, visible)   one GEMM
//             per row: m = max, E = exp(X - m), l = sum, lse = m + log(l)
//             out_blk = (E V) / l              (rows, F)         one GEMM
//   backward  P = exp(scale * Q_blk K^T - lse)                    the forward's GEMM again: the
//                                                                 same bits, so P - lse <= 0
//             grad_v += P^T G_blk,   dP = G_blk V^T,   dS = P (dP - D)
//             grad_q_blk = scale dS K,   grad_k += scale dS^T Q_blk       five GEMMs
// With bf16 or fp16 inputs (kernels/attention.h) E, P and dS are rounded to that precision for the
// GEMMs that multiply them (BlockGemms::rounded); bf16 GEMMs run in oneDNN's kernels where the CPU
// has them, on dense bf16 copies of their operands (BlockGemms::operand), whose results go through
// a dense buffer too, so that the kernel oneDNN picks depends on the shapes alone.
// Scratch: two (kRowBlock, S) buffers per thread, and the bf16 copies of the operands (those of a
// head in the backward); nothing of size (L, S) outlives a block.
// Float rows take exp through the vector loops of exp_rows.h.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "multigrad/kernels/attention.h"
#include "multigrad/kernels/cpu/blas.h"
#include "multigrad/kernels/cpu/exp_rows.h"
#include "multigrad/kernels/cpu/matmul_bf16.h"
#include "multigrad/kernels/cpu/parallel.h"
#include "multigrad/kernels/functors.h"

namespace mg::kernels::cpu {
namespace {

// Query rows per block: a GEMM of 64 rows keeps OpenBLAS's packed K panel in use, and two
// (64, S) float buffers stay in L2 up to S = 2048.
constexpr int64_t kRowBlock = 64;

// One (batch, head) of a (B, H, rows, cols) operand: its first element and its row stride (a
// valid BLAS leading dimension even for a single row).
template <class T>
struct Matrix {
  T* data;
  int64_t ld;
  T* row(int64_t i) const { return data + i * ld; }
};
template <class T>
Matrix<T> matrix(const Tensor& t, int64_t b, int64_t h) {
  const int64_t ld = t.size(2) > 1 ? t.strides()[2] : std::max<int64_t>(t.size(3), 1);
  return {t.data<std::remove_const_t<T>>() + b * t.strides()[0] + h * t.strides()[1], std::max<int64_t>(ld, 1)};
}

// C (m, n) = alpha op(A) op(B) + beta C on this thread; an empty inner dimension (k = 0) makes the
// product 0, which BLAS implementations need not handle.
template <class T>
void gemm_on_thread(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                    int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == T(0))
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
    return;
  }
  blas_gemm(ta, tb, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

// A matrix that a block's GEMMs read: `values` with leading dim ld (BLAS), or `packed`, a dense
// bf16 copy whose leading dim ld is its width (oneDNN).
template <class T>
struct Operand {
  const T* values;
  const BFloat16* packed;
  int64_t ld;
  Operand from_row(int64_t i) const {
    return {values ? values + i * ld : nullptr, packed ? packed + i * ld : nullptr, ld};
  }
};

// The GEMMs of one thread's blocks, given what their inputs hold (kernels/attention.h): Float32
// multiplies the values as they are through BLAS (T float or double); BFloat16 and Float16 (T
// float) round E, P and dS to that precision, and multiply bf16 values in bf16 where this CPU
// can, else in float32 (exact products; only the order of the sums differs).
template <class T>
class BlockGemms {
 public:
  enum Slot { kQ, kK, kV, kG, kRounded, kSlots };  // kRounded: E or P, then dS

  explicit BlockGemms(GemmInputs inputs)
      : inputs_(inputs), bf16_(std::is_same_v<T, float> && inputs == GemmInputs::BFloat16 && runs_bf16_gemm()) {}

  // The (rows, cols) matrix at src (leading dim ld) whose values the inputs hold already (q, k, v,
  // g): itself, or its bf16 copy kept in `slot` until the slot's next use.
  Operand<T> operand(Slot slot, const T* src, int64_t ld, int64_t rows, int64_t cols) {
    if (!bf16_) return {src, nullptr, ld};
    return pack(slot, src, ld, rows, cols);
  }

  // The (rows, cols) matrix at src (E, P or dS) rounded to the inputs' precision, in the kRounded
  // slot; src is left as it is.
  Operand<T> rounded(const T* src, int64_t ld, int64_t rows, int64_t cols) {
    if (bf16_) return pack(kRounded, src, ld, rows, cols);
    if (inputs_ == GemmInputs::Float32) return {src, nullptr, ld};
    if constexpr (std::is_same_v<T, float>) {
      const int64_t width = std::max<int64_t>(cols, 1);
      grow(rounded_, rows * width);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          rounded_[size_t(r * width + c)] = inputs_ == GemmInputs::BFloat16 ? RoundBFloat16Op{}(src[r * ld + c])
                                                                            : RoundFloat16Op{}(src[r * ld + c]);
      return {rounded_.data(), nullptr, width};
    }
    return {src, nullptr, ld};
  }

  // C (m, n) = alpha op(A) op(B) + beta C, beta 0 or 1.
  void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, T alpha, const Operand<T>& a,
            const Operand<T>& b, T beta, T* c, int64_t ldc) {
    if constexpr (std::is_same_v<T, float>) {
      if (bf16_) return gemm_bf16(ta, tb, m, n, k, alpha, a, b, beta, c, ldc);
    }
    gemm_on_thread<T>(ta, tb, m, n, k, alpha, a.values, a.ld, b.values, b.ld, beta, c, ldc);
  }

 private:
  template <class U>
  static void grow(std::vector<U>& buffer, int64_t size) {
    if (buffer.size() < size_t(size)) buffer.resize(size_t(size));
  }

  Operand<T> pack(Slot slot, const T* src, int64_t ld, int64_t rows, int64_t cols) {
    if constexpr (std::is_same_v<T, float>) {
      std::vector<BFloat16>& dense = packed_[slot];
      const int64_t width = std::max<int64_t>(cols, 1);
      grow(dense, rows * width);
      for (int64_t r = 0; r < rows; ++r) round_to_bf16(src + r * ld, dense.data() + r * width, cols);
      return {nullptr, dense.data(), width};
    }
    return {src, nullptr, ld};
  }

  // The product into C directly when C is dense and assigned, else through product_; then scaled
  // by alpha and added to C when beta is 1.
  void gemm_bf16(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const Operand<T>& a, const Operand<T>& b, float beta, float* c, int64_t ldc) {
    if (m == 0 || n == 0) return;
    const bool direct = beta == 0.0f && ldc == n;
    if (!direct) grow(product_, m * n);
    float* product = direct ? c : product_.data();  // (m, n)
    if (k == 0) {
      std::fill(product, product + m * n, 0.0f);
    } else {
      gemm_bf16_on_thread(ta, tb, int(m), int(n), int(k), a.packed, int(a.ld), b.packed, int(b.ld), product, int(n));
    }
    if (direct && alpha == 1.0f) return;
    for (int64_t i = 0; i < m; ++i) {
      float* row = c + i * ldc;
      const float* from = product + i * n;
      if (beta == 0.0f) {
        for (int64_t j = 0; j < n; ++j) row[j] = alpha * from[j];
      } else {
        for (int64_t j = 0; j < n; ++j) row[j] += alpha * from[j];
      }
    }
  }

  GemmInputs inputs_;
  bool bf16_;  // multiplies in bf16 (oneDNN)
  std::array<std::vector<BFloat16>, kSlots> packed_;
  std::vector<T> rounded_;  // a rounded matrix, multiplied in float32
  std::vector<float> product_;
};

// out_j = exp(x_j - shift) for j < n; returns their sum (float64). x - shift <= 0.
template <class T>
double exp_row(const T* x, T* out, int64_t n, T shift) {
  if constexpr (std::is_same_v<T, float>) return exp_shifted(x, out, n, shift);
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += double(out[j] = m_exp(x[j] - shift));
  return sum;
}

struct Problem {
  int64_t batch, heads, queries, keys, qk_dim, v_dim;
  bool causal;
  int64_t blocks() const { return (queries + kRowBlock - 1) / kRowBlock; }
  int64_t seen(int64_t i) const { return causal ? std::min(i + 1, keys) : keys; }  // keys query i sees
};

Problem problem(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  return {q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3), causal};
}

template <class T>
void forward(const Tensor& qt, const Tensor& kt, const Tensor& vt, bool causal, double scale, const Tensor& outt,
             const Tensor& lset, GemmInputs inputs) {
  const Problem p = problem(qt, kt, vt, causal);
  const int64_t units = p.batch * p.heads * p.blocks();
  use_single_threaded_blas();
  parallel_for(qt.device(), units, 1, [&](int64_t first, int64_t last) {
    BlockGemms<T> gemms(inputs);
    std::vector<T> scores(size_t(kRowBlock * std::max<int64_t>(p.keys, 1)));  // X, then E (rows, visible)
    std::vector<T> inverse_sum(kRowBlock);                                     // 1 / l per row
    for (int64_t unit = first; unit < last; ++unit) {
      const int64_t bh = unit / p.blocks(), b = bh / p.heads, h = bh % p.heads;
      const int64_t i0 = (unit % p.blocks()) * kRowBlock, rows = std::min(kRowBlock, p.queries - i0);
      const int64_t visible = p.seen(i0 + rows - 1), ld = std::max<int64_t>(visible, 1);
      const Matrix<const T> q = matrix<const T>(qt, b, h), k = matrix<const T>(kt, b, h), v = matrix<const T>(vt, b, h);
      const Matrix<T> out = matrix<T>(outt, b, h);
      T* lse = lset.data<T>() + bh * p.queries;
      gemms.gemm(CblasNoTrans, CblasTrans, rows, visible, p.qk_dim, T(scale),
                 gemms.operand(gemms.kQ, q.row(i0), q.ld, rows, p.qk_dim),
                 gemms.operand(gemms.kK, k.data, k.ld, visible, p.qk_dim), T(0), scores.data(), ld);
      for (int64_t r = 0; r < rows; ++r) {
        T* row = scores.data() + r * ld;
        const int64_t n = p.seen(i0 + r);
        if (n == 0) {  // no keys at all (S = 0): visible is 0 too, and the product below 0
          lse[i0 + r] = -std::numeric_limits<T>::infinity();
          inverse_sum[size_t(r)] = T(0);
          continue;
        }
        T m = row[0];
        for (int64_t j = 1; j < n; ++j) m = MaximumOp{}(m, row[j]);
        const double sum = exp_row(row, row, n, m);
        lse[i0 + r] = T(double(m) + std::log(sum));
        inverse_sum[size_t(r)] = T(1.0 / sum);
        std::fill(row + n, row + visible, T(0));
      }
      const Operand<T> weights = gemms.rounded(scores.data(), ld, rows, visible);
      gemms.gemm(CblasNoTrans, CblasNoTrans, rows, p.v_dim, visible, T(1), weights,
                 gemms.operand(gemms.kV, v.data, v.ld, visible, p.v_dim), T(0), out.row(i0), out.ld);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < p.v_dim; ++c) out.row(i0 + r)[c] *= inverse_sum[size_t(r)];
    }
  });
}

template <class T>
void backward(const Tensor& gt, const Tensor& qt, const Tensor& kt, const Tensor& vt, const Tensor& outt,
              const Tensor& lset, bool causal, double scale, const Tensor& gqt, const Tensor& gkt, const Tensor& gvt,
              GemmInputs inputs) {
  const Problem p = problem(qt, kt, vt, causal);
  use_single_threaded_blas();
  parallel_for(qt.device(), p.batch * p.heads, 1, [&](int64_t first, int64_t last) {
    BlockGemms<T> gemms(inputs);
    std::vector<T> probs(size_t(kRowBlock * std::max<int64_t>(p.keys, 1)));  // P (rows, visible)
    std::vector<T> dprobs(probs.size());                                      // dP, then dS
    for (int64_t bh = first; bh < last; ++bh) {
      const int64_t b = bh / p.heads, h = bh % p.heads;
      const Matrix<const T> q = matrix<const T>(qt, b, h), k = matrix<const T>(kt, b, h), v = matrix<const T>(vt, b, h);
      const Matrix<const T> g = matrix<const T>(gt, b, h), out = matrix<const T>(outt, b, h);
      const Matrix<T> gq = matrix<T>(gqt, b, h), gk = matrix<T>(gkt, b, h), gv = matrix<T>(gvt, b, h);
      const T* lse = lset.data<T>() + bh * p.queries;
      for (int64_t j = 0; j < p.keys; ++j) {
        std::fill(gk.row(j), gk.row(j) + p.qk_dim, T(0));
        std::fill(gv.row(j), gv.row(j) + p.v_dim, T(0));
      }
      const Operand<T> qs = gemms.operand(gemms.kQ, q.data, q.ld, p.queries, p.qk_dim);
      const Operand<T> ks = gemms.operand(gemms.kK, k.data, k.ld, p.keys, p.qk_dim);
      const Operand<T> vs = gemms.operand(gemms.kV, v.data, v.ld, p.keys, p.v_dim);
      const Operand<T> gs = gemms.operand(gemms.kG, g.data, g.ld, p.queries, p.v_dim);
      for (int64_t i0 = 0; i0 < p.queries; i0 += kRowBlock) {
        const int64_t rows = std::min(kRowBlock, p.queries - i0);
        const int64_t visible = p.seen(i0 + rows - 1), ld = std::max<int64_t>(visible, 1);
        gemms.gemm(CblasNoTrans, CblasTrans, rows, visible, p.qk_dim, T(scale), qs.from_row(i0), ks, T(0),
                   probs.data(), ld);
        for (int64_t r = 0; r < rows; ++r) {
          T* row = probs.data() + r * ld;
          const int64_t n = p.seen(i0 + r);
          exp_row(row, row, n, lse[i0 + r]);
          std::fill(row + n, row + visible, T(0));
        }
        const Operand<T> weights = gemms.rounded(probs.data(), ld, rows, visible);
        gemms.gemm(CblasTrans, CblasNoTrans, visible, p.v_dim, rows, T(1), weights, gs.from_row(i0), T(1), gv.data,
                   gv.ld);
        gemms.gemm(CblasNoTrans, CblasTrans, rows, visible, p.v_dim, T(1), gs.from_row(i0), vs, T(0), dprobs.data(),
                   ld);
        for (int64_t r = 0; r < rows; ++r) {
          T d = 0;  // D_i = g_i . out_i
          for (int64_t c = 0; c < p.v_dim; ++c) d += g.row(i0 + r)[c] * out.row(i0 + r)[c];
          const T* pr = probs.data() + r * ld;
          T* ds = dprobs.data() + r * ld;
          for (int64_t j = 0; j < visible; ++j) ds[j] = pr[j] * (ds[j] - d);
        }
        const Operand<T> ds = gemms.rounded(dprobs.data(), ld, rows, visible);
        gemms.gemm(CblasNoTrans, CblasNoTrans, rows, p.qk_dim, visible, T(scale), ds, ks, T(0), gq.row(i0), gq.ld);
        gemms.gemm(CblasTrans, CblasNoTrans, visible, p.qk_dim, rows, T(scale), ds, qs.from_row(i0), T(1), gk.data,
                   gk.ld);
      }
    }
  });
}

}  // namespace

void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, const Tensor& out,
                   const Tensor& lse, GemmInputs inputs) {
  if (q.dtype() == DType::Float32) return forward<float>(q, k, v, causal, scale, out, lse, inputs);
  forward<double>(q, k, v, causal, scale, out, lse, inputs);
}

void attention_bwd(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& lse, bool causal, double scale, const Tensor& grad_q, const Tensor& grad_k,
                   const Tensor& grad_v, GemmInputs inputs) {
  if (q.dtype() == DType::Float32)
    return backward<float>(grad_out, q, k, v, out, lse, causal, scale, grad_q, grad_k, grad_v, inputs);
  backward<double>(grad_out, q, k, v, out, lse, causal, scale, grad_q, grad_k, grad_v, inputs);
}

}  // namespace mg::kernels::cpu

// kernels/cpu/attention.cpp — fused scaled dot-product attention on the CPU (kernels/attention.h).
//
// Work split: the forward's unit is one (batch, head) and a block of kRowBlock query rows; the
// backward's is one (batch, head), whose blocks run in order because grad_k and grad_v sum over
// them. A unit runs on one thread with single-threaded OpenBLAS calls whose shapes depend only on
// (L, S, E, F), so results depend neither on the thread count nor on B and H.
// Per block of rows [i0, i0 + rows), the keys any of its rows sees are [0, visible) (visible =
// min(S, i0 + rows) when causal, else S): row i of the block uses the first n_i of them and the
// rest of its probabilities are 0.
//   forward   P = scale * Q_blk K^T            (rows, visible)   one GEMM
//             per row: m = max, P = exp(P - m), lse = m + log(sum), P /= sum
//             out_blk = P V                    (rows, F)         one GEMM
//   backward  P = exp(scale * Q_blk K^T - lse)                    the forward's GEMM again: the
//                                                                 same bits, so P - lse <= 0
//             grad_v += P^T G_blk,   dP = G_blk V^T,   dS = scale * P (dP - D)
//             grad_q_blk = dS K,     grad_k += dS^T Q_blk       five GEMMs
// Scratch: two (kRowBlock, S) buffers per thread; nothing of size (L, S) outlives a block.
// Float rows take exp through the vector loops of exp_rows.h.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/exp_rows.h"
#include "kernels/cpu/parallel.h"
#include "kernels/functors.h"

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

// P (rows, visible) = scale * Q[i0, i0 + rows) K[0, visible)^T.
template <class T>
void block_scores(const Problem& p, const Matrix<const T>& q, const Matrix<const T>& k, int64_t i0, int64_t rows,
                  int64_t visible, T scale, T* scores) {
  gemm_on_thread<T>(CblasNoTrans, CblasTrans, rows, visible, p.qk_dim, scale, q.row(i0), q.ld, k.data, k.ld, T(0),
                    scores, std::max<int64_t>(visible, 1));
}

template <class T>
void forward(const Tensor& qt, const Tensor& kt, const Tensor& vt, bool causal, double scale, const Tensor& outt,
             const Tensor& lset) {
  const Problem p = problem(qt, kt, vt, causal);
  const int64_t units = p.batch * p.heads * p.blocks();
  use_single_threaded_blas();
  parallel_for(qt.device(), units, 1, [&](int64_t first, int64_t last) {
    std::vector<T> scores(size_t(kRowBlock * std::max<int64_t>(p.keys, 1)));  // (rows, visible)
    for (int64_t unit = first; unit < last; ++unit) {
      const int64_t bh = unit / p.blocks(), b = bh / p.heads, h = bh % p.heads;
      const int64_t i0 = (unit % p.blocks()) * kRowBlock, rows = std::min(kRowBlock, p.queries - i0);
      const int64_t visible = p.seen(i0 + rows - 1), ld = std::max<int64_t>(visible, 1);
      const Matrix<const T> q = matrix<const T>(qt, b, h), k = matrix<const T>(kt, b, h), v = matrix<const T>(vt, b, h);
      const Matrix<T> out = matrix<T>(outt, b, h);
      T* lse = lset.data<T>() + bh * p.queries;
      block_scores(p, q, k, i0, rows, visible, T(scale), scores.data());
      for (int64_t r = 0; r < rows; ++r) {
        T* row = scores.data() + r * ld;
        const int64_t n = p.seen(i0 + r);
        if (n == 0) {
          lse[i0 + r] = -std::numeric_limits<T>::infinity();
          continue;
        }
        T m = row[0];
        for (int64_t j = 1; j < n; ++j) m = MaximumOp{}(m, row[j]);
        const double sum = exp_row(row, row, n, m);
        lse[i0 + r] = T(double(m) + std::log(sum));
        const T inv = T(1.0 / sum);
        for (int64_t j = 0; j < n; ++j) row[j] *= inv;
        std::fill(row + n, row + visible, T(0));
      }
      gemm_on_thread<T>(CblasNoTrans, CblasNoTrans, rows, p.v_dim, visible, T(1), scores.data(), ld, v.data, v.ld,
                        T(0), out.row(i0), out.ld);
    }
  });
}

template <class T>
void backward(const Tensor& gt, const Tensor& qt, const Tensor& kt, const Tensor& vt, const Tensor& outt,
              const Tensor& lset, bool causal, double scale, const Tensor& gqt, const Tensor& gkt, const Tensor& gvt) {
  const Problem p = problem(qt, kt, vt, causal);
  use_single_threaded_blas();
  parallel_for(qt.device(), p.batch * p.heads, 1, [&](int64_t first, int64_t last) {
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
      for (int64_t i0 = 0; i0 < p.queries; i0 += kRowBlock) {
        const int64_t rows = std::min(kRowBlock, p.queries - i0);
        const int64_t visible = p.seen(i0 + rows - 1), ld = std::max<int64_t>(visible, 1);
        block_scores(p, q, k, i0, rows, visible, T(scale), probs.data());
        for (int64_t r = 0; r < rows; ++r) {
          T* row = probs.data() + r * ld;
          const int64_t n = p.seen(i0 + r);
          exp_row(row, row, n, lse[i0 + r]);
          std::fill(row + n, row + visible, T(0));
        }
        gemm_on_thread<T>(CblasTrans, CblasNoTrans, visible, p.v_dim, rows, T(1), probs.data(), ld, g.row(i0), g.ld,
                          T(1), gv.data, gv.ld);
        gemm_on_thread<T>(CblasNoTrans, CblasTrans, rows, visible, p.v_dim, T(1), g.row(i0), g.ld, v.data, v.ld, T(0),
                          dprobs.data(), ld);
        for (int64_t r = 0; r < rows; ++r) {
          T d = 0;  // D_i = g_i . out_i
          for (int64_t c = 0; c < p.v_dim; ++c) d += g.row(i0 + r)[c] * out.row(i0 + r)[c];
          const T* pr = probs.data() + r * ld;
          T* ds = dprobs.data() + r * ld;
          for (int64_t j = 0; j < visible; ++j) ds[j] = T(scale) * (pr[j] * (ds[j] - d));
        }
        gemm_on_thread<T>(CblasNoTrans, CblasNoTrans, rows, p.qk_dim, visible, T(1), dprobs.data(), ld, k.data, k.ld,
                          T(0), gq.row(i0), gq.ld);
        gemm_on_thread<T>(CblasTrans, CblasNoTrans, visible, p.qk_dim, rows, T(1), dprobs.data(), ld, q.row(i0), q.ld,
                          T(1), gk.data, gk.ld);
      }
    }
  });
}

}  // namespace

void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, const Tensor& out,
                   const Tensor& lse) {
  if (q.dtype() == DType::Float32) return forward<float>(q, k, v, causal, scale, out, lse);
  forward<double>(q, k, v, causal, scale, out, lse);
}

void attention_bwd(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& lse, bool causal, double scale, const Tensor& grad_q, const Tensor& grad_k,
                   const Tensor& grad_v) {
  if (q.dtype() == DType::Float32)
    return backward<float>(grad_out, q, k, v, out, lse, causal, scale, grad_q, grad_k, grad_v);
  backward<double>(grad_out, q, k, v, out, lse, causal, scale, grad_q, grad_k, grad_v);
}

}  // namespace mg::kernels::cpu

// kernels/cpu/conv.cpp — 2-d convolution on the CPU: im2col + GEMM, forward and both backwards.
//
// Columns. For one image, im2col unrolls every receptive field into a column:
//   cols (C * kH * kW, L)   with L = oH * oW,
//   cols[(c * kH + i) * kW + j, y * oW + x] = in[c, y sH - pH + i dH, x sW - pW + j dW]  (0 outside)
// Group g owns the K = (C / groups) * kH * kW rows starting at g * K, and the weight's rows
// g * Og ... (g + 1) * Og - 1 (Og = O / groups) read as one (Og, K) matrix. Then, per image and
// group (all row-major):
//   forward          out[n, g]   (Og, L) = W_g (Og, K) @ cols_g (K, L)          (=), then + bias
//   backward input   dcols_g     (K, L)  = W_g^T (K, Og) @ dout[n, g] (Og, L)   (=),
//                    grad_in[n] = col2im(dcols): each column entry added (+=) back to the
//                    input element it was read from, into a plane zeroed first
//   backward weight  dW_g        (Og, K) += dout[n, g] (Og, L) @ cols_g^T (L, K), over n in order
//                    (beta 0 for the first image, so dW is assigned overall)
// A 1x1 convolution with stride 1 and no padding needs no columns: cols is the input itself.
//
// Work split. im2col and col2im are memory-bound and independent per (image, channel) plane:
// parallel_for runs over the planes of a chunk of images, within the device's thread budget,
// all threads writing disjoint parts of one shared column buffer (no per-thread scratch). The
// GEMMs then run one after another, each parallelised by OpenBLAS (kernels/cpu/blas.h). Chunks
// bound the column buffer to kColumnBytes. No sum depends on the thread count.
// Preconditions (checked): contiguous tensors of one floating dtype; sizes <= INT_MAX for BLAS.
#include <algorithm>
#include <climits>

#include "kernels/conv.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/parallel.h"

namespace mg::kernels::cpu {
namespace {

// The column buffer of one chunk of images stays under this: enough images for the im2col
// threads to share, small next to the activations of the network it serves.
inline constexpr int64_t kColumnBytes = int64_t(32) << 20;

struct ConvGeometry {
  int64_t N, C, H, W;  // input
  int64_t O, kH, kW;   // weight (O, C / groups, kH, kW)
  int64_t oH, oW;      // output
  int64_t sH, sW, pH, pW, dH, dW, groups;

  int64_t Cg() const { return C / groups; }
  int64_t Og() const { return O / groups; }
  int64_t K() const { return Cg() * kH * kW; }  // column rows of one group
  int64_t L() const { return oH * oW; }         // columns
  int64_t rows() const { return C * kH * kW; }  // column rows of one image
  bool cols_are_input() const { return kH == 1 && kW == 1 && sH == 1 && sW == 1 && pH == 0 && pW == 0; }
  // Images per chunk so that their columns fit kColumnBytes (at least one).
  int64_t chunk(size_t element_size) const {
    return std::clamp<int64_t>(kColumnBytes / std::max<int64_t>(1, rows() * L() * int64_t(element_size)), 1,
                               std::max<int64_t>(N, 1));
  }
};

ConvGeometry geometry(const Tensor& input, const Tensor& weight, const Tensor& out, const Conv2dParams& p) {
  return {input.size(0), input.size(1), input.size(2), input.size(3), weight.size(0), weight.size(2),
          weight.size(3), out.size(2),  out.size(3),   p.stride[0],   p.stride[1],    p.padding[0],
          p.padding[1],   p.dilation[0], p.dilation[1], p.groups};
}

void check_conv(const char* op, const ConvGeometry& g, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    MG_CHECK(t->is_contiguous(), op, ": expected contiguous tensors, got shape ", t->shape(), " with strides ",
             t->strides());
  for (int64_t v : {g.Og(), g.K(), g.L(), g.H * g.W})
    MG_CHECK(v <= INT_MAX, op, ": GEMM dimension ", v, " exceeds the BLAS int range");
}

// Plane (H, W) of one channel -> its kH * kW column rows (kH * kW, L).
template <class T>
void im2col_plane(const T* in, const ConvGeometry& g, T* col) {
  const int64_t L = g.L();
  for (int64_t i = 0; i < g.kH; ++i)
    for (int64_t j = 0; j < g.kW; ++j) {
      T* row = col + (i * g.kW + j) * L;
      for (int64_t y = 0; y < g.oH; ++y) {
        T* dst = row + y * g.oW;
        const int64_t h = y * g.sH - g.pH + i * g.dH;
        if (h < 0 || h >= g.H) {
          std::fill(dst, dst + g.oW, T(0));
          continue;
        }
        const T* src = in + h * g.W;
        for (int64_t x = 0; x < g.oW; ++x) {
          const int64_t w = x * g.sW - g.pW + j * g.dW;
          dst[x] = (w >= 0 && w < g.W) ? src[w] : T(0);
        }
      }
    }
}

// The inverse scatter: plane (H, W) = 0, then += every entry of the channel's column rows
// (kH * kW, L) at the input element it came from, in row order.
template <class T>
void col2im_plane(const T* col, const ConvGeometry& g, T* in) {
  std::fill(in, in + g.H * g.W, T(0));
  const int64_t L = g.L();
  for (int64_t i = 0; i < g.kH; ++i)
    for (int64_t j = 0; j < g.kW; ++j) {
      const T* row = col + (i * g.kW + j) * L;
      for (int64_t y = 0; y < g.oH; ++y) {
        const int64_t h = y * g.sH - g.pH + i * g.dH;
        if (h < 0 || h >= g.H) continue;
        const T* src = row + y * g.oW;
        T* dst = in + h * g.W;
        for (int64_t x = 0; x < g.oW; ++x) {
          const int64_t w = x * g.sW - g.pW + j * g.dW;
          if (w >= 0 && w < g.W) dst[w] += src[x];
        }
      }
    }
}

// Planes per thread so that each thread moves at least kGrain column entries.
int64_t plane_grain(const ConvGeometry& g) {
  return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, g.kH * g.kW * g.L()));
}

// cols (images, C * kH * kW, L) of images [first, first + images) of x (N, C, H, W).
template <class T>
void im2col_images(const Device& device, const T* x, const ConvGeometry& g, int64_t first, int64_t images, T* cols) {
  const int64_t plane_rows = g.kH * g.kW;
  parallel_for(device, images * g.C, plane_grain(g), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p)  // p = image-in-chunk * C + channel
      im2col_plane(x + (first * g.C + p) * g.H * g.W, g, cols + p * plane_rows * g.L());
  });
}

// Calls body(first, images, cols) for consecutive chunks of the batch, cols (images, C * kH * kW,
// L) holding the chunk's im2col columns: the input itself for a 1x1 convolution, else a scratch
// buffer of at most g.chunk images.
template <class T, class Body>
void for_each_column_chunk(const Tensor& input, const ConvGeometry& g, Body&& body) {
  const T* x = input.data<T>();  // (N, C, H, W)
  const int64_t chunk = g.cols_are_input() ? g.N : g.chunk(sizeof(T));
  Tensor scratch = g.cols_are_input() ? Tensor() : Tensor::empty({chunk, g.rows(), g.L()}, input.options());
  for (int64_t first = 0; first < g.N; first += chunk) {
    const int64_t images = std::min(chunk, g.N - first);
    const T* cols = x + first * g.C * g.H * g.W;
    if (!g.cols_are_input()) {
      im2col_images(input.device(), x, g, first, images, scratch.data<T>());
      cols = scratch.data<T>();
    }
    body(first, images, cols);
  }
}

template <class T>
void forward(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& out, const ConvGeometry& g) {
  const T* w = weight.data<T>();   // (O, C / groups, kH, kW) = per group (Og, K)
  T* y = out.data<T>();            // (N, O, oH, oW) = per image and group (Og, L)
  const int64_t Og = g.Og(), K = g.K(), L = g.L();
  for_each_column_chunk<T>(input, g, [&](int64_t first, int64_t images, const T* cols) {
    for (int64_t n = 0; n < images; ++n)
      for (int64_t grp = 0; grp < g.groups; ++grp)
        gemm(input.device(), CblasNoTrans, CblasNoTrans, int(Og), int(L), int(K), T(1), w + grp * Og * K, int(K),
             cols + (n * g.groups + grp) * K * L, int(L), T(0), y + ((first + n) * g.O + grp * Og) * L, int(L));
  });
  if (!bias.defined()) return;
  const T* b = bias.data<T>();  // (O)
  parallel_for(out.device(), g.N * g.O, std::max<int64_t>(1, kGrain / L), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)  // r = n * O + o
      for (int64_t l = 0; l < L; ++l) y[r * L + l] += b[r % g.O];
  });
}

template <class T>
void backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_input, const ConvGeometry& g) {
  const T* dy = grad_out.data<T>();  // (N, O, oH, oW)
  const T* w = weight.data<T>();     // per group (Og, K)
  T* dx = grad_input.data<T>();      // (N, C, H, W)
  const int64_t Og = g.Og(), K = g.K(), L = g.L();
  const int64_t chunk = g.cols_are_input() ? g.N : g.chunk(sizeof(T));
  Tensor scratch = g.cols_are_input() ? Tensor() : Tensor::empty({chunk, g.rows(), L}, grad_out.options());
  for (int64_t first = 0; first < g.N; first += chunk) {
    const int64_t images = std::min(chunk, g.N - first);
    // dcols (images, C * kH * kW, L); for a 1x1 convolution it is grad_input itself.
    T* dcols = g.cols_are_input() ? dx + first * g.C * g.H * g.W : scratch.data<T>();
    for (int64_t n = 0; n < images; ++n)
      for (int64_t grp = 0; grp < g.groups; ++grp)
        gemm(grad_out.device(), CblasTrans, CblasNoTrans, int(K), int(L), int(Og), T(1), w + grp * Og * K, int(K),
             dy + ((first + n) * g.O + grp * Og) * L, int(L), T(0), dcols + (n * g.groups + grp) * K * L, int(L));
    if (g.cols_are_input()) continue;
    const int64_t plane_rows = g.kH * g.kW;
    parallel_for(grad_out.device(), images * g.C, plane_grain(g), [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p)
        col2im_plane(dcols + p * plane_rows * L, g, dx + (first * g.C + p) * g.H * g.W);
    });
  }
}

template <class T>
void backward_weight(const Tensor& grad_out, const Tensor& input, const Tensor& grad_weight, const ConvGeometry& g) {
  const T* dy = grad_out.data<T>();  // (N, O, oH, oW)
  T* dw = grad_weight.data<T>();     // per group (Og, K)
  const int64_t Og = g.Og(), K = g.K(), L = g.L();
  if (g.N == 0) {
    std::fill(dw, dw + grad_weight.numel(), T(0));
    return;
  }
  for_each_column_chunk<T>(input, g, [&](int64_t first, int64_t images, const T* cols) {
    for (int64_t n = 0; n < images; ++n)
      for (int64_t grp = 0; grp < g.groups; ++grp)
        gemm(grad_out.device(), CblasNoTrans, CblasTrans, int(Og), int(K), int(L), T(1),
             dy + ((first + n) * g.O + grp * Og) * L, int(L), cols + (n * g.groups + grp) * K * L, int(L),
             first + n == 0 ? T(0) : T(1), dw + grp * Og * K, int(K));
  });
}

}  // namespace

void conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& out,
                    const Conv2dParams& p) {
  const ConvGeometry g = geometry(input, weight, out, p);
  check_conv("conv2d", g, {&input, &weight, &out});
  if (bias.defined()) check_conv("conv2d", g, {&bias});
  if (out.numel() == 0) return;
  MG_DISPATCH_FLOATING(input.dtype(), "conv2d", [&] { forward<scalar_t>(input, weight, bias, out, g); });
}

void conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_input,
                           const Conv2dParams& p) {
  const ConvGeometry g = geometry(grad_input, weight, grad_out, p);
  check_conv("conv2d_backward_input", g, {&grad_out, &weight, &grad_input});
  if (grad_input.numel() == 0) return;
  MG_DISPATCH_FLOATING(grad_out.dtype(), "conv2d_backward_input",
                       [&] { backward_input<scalar_t>(grad_out, weight, grad_input, g); });
}

void conv2d_backward_weight(const Tensor& grad_out, const Tensor& input, const Tensor& grad_weight,
                            const Conv2dParams& p) {
  const ConvGeometry g = geometry(input, grad_weight, grad_out, p);
  check_conv("conv2d_backward_weight", g, {&grad_out, &input, &grad_weight});
  if (grad_weight.numel() == 0) return;
  MG_DISPATCH_FLOATING(grad_out.dtype(), "conv2d_backward_weight",
                       [&] { backward_weight<scalar_t>(grad_out, input, grad_weight, g); });
}

}  // namespace mg::kernels::cpu

// kernels/cpu/conv.cpp — 2-d convolution on the CPU: im2col + GEMM, forward and both backwards.
// Float32 outside deterministic mode goes to oneDNN instead (conv_onednn.h says when); this path
// runs the rest, Float64 and deterministic mode among them.
//
// Columns. im2col unrolls every receptive field of a chunk of `images` images into a column of
// one matrix, the images side by side:
//   cols (C * kH * kW, images * L)   with L = oH * oW,
//   cols[(c * kH + i) * kW + j, n * L + y * oW + x] = in[n, c, y sH - pH + i dH, x sW - pW + j dW]
//   (0 outside the plane). Group g owns the K = (C / groups) * kH * kW rows starting at g * K,
// and the weight's rows g * Og ... (g + 1) * Og - 1 (Og = O / groups) read as one (Og, K) matrix.
// With the images side by side, each group needs one GEMM per chunk, not one per image: OpenBLAS
// is slow on the small per-image products of a small network (Fashion-MNIST's second layer is
// (64, 288) @ (288, 196)), and every call wakes its threads. The GEMMs' (O, images * L) side is
// channel-major, so it passes through a scratch `chw` (O, images, L) that is copied to or from the
// (images, O, L) layout of out / grad_out (L contiguous values per copy). Per chunk and group:
//   forward          chw_g   (Og, nL)  = W_g (Og, K) @ cols_g (K, nL)            (=),
//                    out[n, o] = chw[o, n] (+ bias[o])
//   backward input   chw[o, n] = grad_out[n, o],
//                    dcols_g (K, nL)   = W_g^T (K, Og) @ chw_g (Og, nL)          (=),
//                    grad_in[n] = col2im(dcols): each column entry added (+=) back to the
//                    input element it was read from, into a plane zeroed first
//   backward weight  chw[o, n] = grad_out[n, o],
//                    dW_g    (Og, K)  += chw_g (Og, nL) @ cols_g^T (nL, K)       (beta 0 for the
//                    first chunk, so dW is assigned overall)
// with nL = images * L. The sums over images run inside one GEMM, so their order depends on the
// chunk size (a function of the shapes alone) and OpenBLAS's blocking, not on the thread count
// in deterministic mode (kernels/cpu/blas.h).
//
// Work split. im2col, col2im and the layout copies are memory-bound and independent per (image,
// channel) plane: parallel_for runs over the planes of a chunk within the device's thread
// budget, all threads writing disjoint parts of one shared buffer (no per-thread scratch). The
// GEMMs run one after another, each parallelised by OpenBLAS (kernels/cpu/blas.h). Chunks bound
// the scratch to kColumnBytes.
// Preconditions (checked): contiguous tensors of one floating dtype; sizes <= INT_MAX for BLAS.
#include <algorithm>
#include <climits>

#include "multigrad/kernels/conv.h"
#include "multigrad/kernels/cpu/blas.h"
#include "multigrad/kernels/cpu/conv_onednn.h"
#include "multigrad/kernels/cpu/parallel.h"

namespace mg::kernels::cpu {
namespace {

// The scratch of one chunk of images (columns and the channel-major copy) stays under this:
// enough images for the GEMMs to be large and the copies to share out, small next to the
// activations of the network it serves.
inline constexpr int64_t kColumnBytes = int64_t(32) << 20;

struct ConvGeometry {
  int64_t N, C, H, W;  // input
  int64_t O, kH, kW;   // weight (O, C / groups, kH, kW)
  int64_t oH, oW;      // output
  int64_t sH, sW, pH, pW, dH, dW, groups;

  int64_t Cg() const { return C / groups; }
  int64_t Og() const { return O / groups; }
  int64_t K() const { return Cg() * kH * kW; }  // column rows of one group
  int64_t L() const { return oH * oW; }         // columns of one image
  int64_t rows() const { return C * kH * kW; }  // column rows
  // Images per chunk so that their columns and channel-major copy fit kColumnBytes (at least
  // one), and the GEMMs' column count images * L fits a BLAS int.
  int64_t chunk(size_t element_size) const {
    const int64_t per_image = std::max<int64_t>(1, (rows() + O) * L() * int64_t(element_size));
    const int64_t fit = std::min(kColumnBytes / per_image, int64_t(INT_MAX) / std::max<int64_t>(1, L()));
    return std::clamp<int64_t>(fit, 1, std::max<int64_t>(N, 1));
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

// The outputs [begin, end) of a row whose kernel column j reads inside the plane:
// 0 <= x sW - pW + j dW < W. Outside that range the column entry is padding.
struct ColumnRange {
  int64_t begin, end;
};
ColumnRange inside_columns(const ConvGeometry& g, int64_t j) {
  const int64_t shift = j * g.dW - g.pW;  // w = x sW + shift
  const auto ceil_div = [](int64_t a, int64_t b) { return a <= 0 ? -((-a) / b) : (a + b - 1) / b; };
  const int64_t begin = std::clamp<int64_t>(ceil_div(-shift, g.sW), 0, g.oW);
  const int64_t end = std::clamp<int64_t>(ceil_div(g.W - shift, g.sW), begin, g.oW);
  return {begin, end};
}

// Plane (H, W) of one channel -> its kH * kW column rows, each L entries at `col` + row * ld.
// Per output row, the padding entries are zero-filled and the rest copied without bounds
// checks (a straight copy at stride 1).
template <class T>
void im2col_plane(const T* in, const ConvGeometry& g, T* col, int64_t ld) {
  for (int64_t i = 0; i < g.kH; ++i)
    for (int64_t j = 0; j < g.kW; ++j) {
      T* row = col + (i * g.kW + j) * ld;
      const ColumnRange xs = inside_columns(g, j);
      const int64_t shift = j * g.dW - g.pW, sW = g.sW;
      for (int64_t y = 0; y < g.oH; ++y) {
        T* dst = row + y * g.oW;
        const int64_t h = y * g.sH - g.pH + i * g.dH;
        if (h < 0 || h >= g.H) {
          std::fill(dst, dst + g.oW, T(0));
          continue;
        }
        const T* src = in + h * g.W + shift;  // src[x sW] is element (h, x sW + shift)
        std::fill(dst, dst + xs.begin, T(0));
        for (int64_t x = xs.begin; x < xs.end; ++x) dst[x] = src[x * sW];
        std::fill(dst + xs.end, dst + g.oW, T(0));
      }
    }
}

// The inverse scatter: plane (H, W) = 0, then += every entry of the channel's column rows (as
// im2col_plane lays them out) at the input element it came from, in row order; padding entries
// are skipped.
template <class T>
void col2im_plane(const T* col, int64_t ld, const ConvGeometry& g, T* in) {
  std::fill(in, in + g.H * g.W, T(0));
  for (int64_t i = 0; i < g.kH; ++i)
    for (int64_t j = 0; j < g.kW; ++j) {
      const T* row = col + (i * g.kW + j) * ld;
      const ColumnRange xs = inside_columns(g, j);
      const int64_t shift = j * g.dW - g.pW, sW = g.sW;
      for (int64_t y = 0; y < g.oH; ++y) {
        const int64_t h = y * g.sH - g.pH + i * g.dH;
        if (h < 0 || h >= g.H) continue;
        const T* src = row + y * g.oW;
        T* dst = in + h * g.W + shift;
        for (int64_t x = xs.begin; x < xs.end; ++x) dst[x * sW] += src[x];
      }
    }
}

// Calls fn(n, c) for every (image, channel) plane of a chunk of `images` images with `channels`
// channels, split over the device's threads with at least kGrain units of `per_plane` work each.
template <class Fn>
void for_each_plane(const Device& device, int64_t images, int64_t channels, int64_t per_plane, const Fn& fn) {
  parallel_for(device, images * channels, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, per_plane)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t p = begin; p < end; ++p) fn(p / channels, p % channels);
               });
}

// cols (C * kH * kW, images * L) of images [first, first + images) of x (N, C, H, W).
template <class T>
void im2col(const Device& device, const T* x, const ConvGeometry& g, int64_t first, int64_t images, T* cols) {
  const int64_t ld = images * g.L();
  for_each_plane(device, images, g.C, g.kH * g.kW * g.L(), [&](int64_t n, int64_t c) {
    im2col_plane(x + ((first + n) * g.C + c) * g.H * g.W, g, cols + c * g.kH * g.kW * ld + n * g.L(), ld);
  });
}

// chw (O, images, L) = y[first, first + images] (images, O, L), or the reverse: the layout change
// between the GEMMs' channel-major side and out / grad_out.
template <class T>
void to_channel_major(const Device& device, const T* y, const ConvGeometry& g, int64_t first, int64_t images, T* chw) {
  const int64_t L = g.L();
  for_each_plane(device, images, g.O, L, [&](int64_t n, int64_t o) {
    std::copy_n(y + ((first + n) * g.O + o) * L, L, chw + (o * images + n) * L);
  });
}
template <class T>
void from_channel_major(const Device& device, const T* chw, const ConvGeometry& g, int64_t first, int64_t images,
                        T* y) {
  const int64_t L = g.L();
  for_each_plane(device, images, g.O, L, [&](int64_t n, int64_t o) {
    std::copy_n(chw + (o * images + n) * L, L, y + ((first + n) * g.O + o) * L);
  });
}

// Calls body(first, images, cols, chw) for consecutive chunks of the batch: cols holds the
// chunk's columns when `with_columns` (else it is scratch for the body to fill), chw is scratch
// for (O, images, L).
template <class T, class Body>
void for_each_chunk(const Tensor& input, const ConvGeometry& g, bool with_columns, Body&& body) {
  const int64_t chunk = g.chunk(sizeof(T));
  const Tensor cols = Tensor::empty({g.rows(), chunk * g.L()}, input.options());
  const Tensor chw = Tensor::empty({g.O, chunk * g.L()}, input.options());
  for (int64_t first = 0; first < g.N; first += chunk) {
    const int64_t images = std::min(chunk, g.N - first);
    if (with_columns) im2col(input.device(), input.data<T>(), g, first, images, cols.data<T>());
    body(first, images, cols.data<T>(), chw.data<T>());
  }
}

template <class T>
void forward(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& out, const ConvGeometry& g) {
  const T* w = weight.data<T>();  // (O, C / groups, kH, kW) = per group (Og, K)
  T* y = out.data<T>();           // (N, O, oH, oW)
  const Device& device = input.device();
  const int64_t Og = g.Og(), K = g.K(), L = g.L();
  for_each_chunk<T>(input, g, true, [&](int64_t first, int64_t images, const T* cols, T* chw) {
    const int64_t nL = images * L;
    for (int64_t grp = 0; grp < g.groups; ++grp)
      gemm(device, CblasNoTrans, CblasNoTrans, int(Og), int(nL), int(K), T(1), w + grp * Og * K, int(K),
           cols + grp * K * nL, int(nL), T(0), chw + grp * Og * nL, int(nL));
    from_channel_major(device, chw, g, first, images, y);
  });
  if (!bias.defined()) return;
  const T* b = bias.data<T>();  // (O)
  parallel_for(device, g.N * g.O, std::max<int64_t>(1, kGrain / L), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)  // r = n * O + o
      for (int64_t l = 0; l < L; ++l) y[r * L + l] += b[r % g.O];
  });
}

template <class T>
void backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_input, const ConvGeometry& g) {
  const T* dy = grad_out.data<T>();  // (N, O, oH, oW)
  const T* w = weight.data<T>();     // per group (Og, K)
  T* dx = grad_input.data<T>();      // (N, C, H, W)
  const Device& device = grad_out.device();
  const int64_t Og = g.Og(), K = g.K(), L = g.L(), plane_rows = g.kH * g.kW;
  for_each_chunk<T>(grad_input, g, false, [&](int64_t first, int64_t images, T* dcols, T* chw) {
    const int64_t nL = images * L;
    to_channel_major(device, dy, g, first, images, chw);
    for (int64_t grp = 0; grp < g.groups; ++grp)
      gemm(device, CblasTrans, CblasNoTrans, int(K), int(nL), int(Og), T(1), w + grp * Og * K, int(K),
           chw + grp * Og * nL, int(nL), T(0), dcols + grp * K * nL, int(nL));
    for_each_plane(device, images, g.C, plane_rows * L, [&](int64_t n, int64_t c) {
      col2im_plane(dcols + c * plane_rows * nL + n * L, nL, g, dx + ((first + n) * g.C + c) * g.H * g.W);
    });
  });
}

template <class T>
void backward_weight(const Tensor& grad_out, const Tensor& input, const Tensor& grad_weight, const ConvGeometry& g) {
  const T* dy = grad_out.data<T>();  // (N, O, oH, oW)
  T* dw = grad_weight.data<T>();     // per group (Og, K)
  const Device& device = grad_out.device();
  const int64_t Og = g.Og(), K = g.K(), L = g.L();
  if (g.N == 0) {
    std::fill(dw, dw + grad_weight.numel(), T(0));
    return;
  }
  for_each_chunk<T>(input, g, true, [&](int64_t first, int64_t images, const T* cols, T* chw) {
    const int64_t nL = images * L;
    to_channel_major(device, dy, g, first, images, chw);
    for (int64_t grp = 0; grp < g.groups; ++grp)
      gemm(device, CblasNoTrans, CblasTrans, int(Og), int(K), int(nL), T(1), chw + grp * Og * nL, int(nL),
           cols + grp * K * nL, int(nL), first == 0 ? T(0) : T(1), dw + grp * Og * K, int(K));
  });
}

}  // namespace

void conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& out,
                    const Conv2dParams& p) {
  const ConvGeometry g = geometry(input, weight, out, p);
  check_conv("conv2d", g, {&input, &weight, &out});
  if (bias.defined()) check_conv("conv2d", g, {&bias});
  if (out.numel() == 0 || onednn_conv2d_forward(input, weight, bias, out, p)) return;
  MG_DISPATCH_FLOATING(input.dtype(), "conv2d", [&] { forward<scalar_t>(input, weight, bias, out, g); });
}

void conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_input,
                           const Conv2dParams& p) {
  const ConvGeometry g = geometry(grad_input, weight, grad_out, p);
  check_conv("conv2d_backward_input", g, {&grad_out, &weight, &grad_input});
  if (grad_input.numel() == 0 || onednn_conv2d_backward_input(grad_out, weight, grad_input, p)) return;
  MG_DISPATCH_FLOATING(grad_out.dtype(), "conv2d_backward_input",
                       [&] { backward_input<scalar_t>(grad_out, weight, grad_input, g); });
}

void conv2d_backward_weight(const Tensor& grad_out, const Tensor& input, const Tensor& grad_weight,
                            const Conv2dParams& p) {
  const ConvGeometry g = geometry(input, grad_weight, grad_out, p);
  check_conv("conv2d_backward_weight", g, {&grad_out, &input, &grad_weight});
  if (grad_weight.numel() == 0 || onednn_conv2d_backward_weight(grad_out, input, grad_weight, p)) return;
  MG_DISPATCH_FLOATING(grad_out.dtype(), "conv2d_backward_weight",
                       [&] { backward_weight<scalar_t>(grad_out, input, grad_weight, g); });
}

}  // namespace mg::kernels::cpu

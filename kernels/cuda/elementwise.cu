// kernels/cuda/elementwise.cu — every elementwise op on CUDA: unary and binary math, tensor-scalar
// ops, clamp, where, copy/cast between any two dtypes, fill and arange.
//
// What it computes: out[i] = f(in_0[i], ..., in_{n-1}[i]) for every index i of out's shape, with f
// a functor from kernels/functors.h (the same one the CPU loop applies, selectors for where,
// cast and fill included). Broadcast inputs arrive expanded (stride 0).
//
// Work split: kernels/tensor_iterator.h coalesces the operands' dims once on the host; then
//   - contiguous path (every operand one dense run and every pointer aligned to its pack): each
//     thread of a grid-stride loop loads a pack of V elements per operand with one vector
//     instruction (V = 16 bytes / widest element: float4-sized loads, one memory transaction per
//     16 bytes), applies f V times and stores a pack; the last numel % V elements go one per
//     thread.
//   - strided path: one element per thread of a grid-stride loop; each thread turns its linear
//     index into per-operand offsets with StridedLayout::offsets (div/mod over <= kMaxDims dims).
// Preconditions (checked in the launchers or by make_layout): all operands have out's shape;
// out is on a CUDA device and never partially overlaps an input. Values are assigned (=).
#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>

#include "multigrad/core/cuda_check.h"
#include "multigrad/core/stream.h"
#include "multigrad/kernels/cuda/cuda_kernels.h"
#include "multigrad/kernels/cuda/cuda_utils.cuh"
#include "multigrad/kernels/cuda/launch.cuh"
#include "multigrad/kernels/functors.h"
#include "multigrad/kernels/op_functors.h"
#include "multigrad/kernels/tensor_iterator.h"

namespace mg::kernels::cuda {
namespace {

inline constexpr int kVectorBytes = 16;  // widest single load/store instruction (LDG.128)

// V elements moved by one vector instruction; the alignment makes the compiler emit it.
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// ============================== kernels ==============================

template <class Out, int V, class F, class... In>
__device__ __forceinline__ Pack<Out, V> apply_pack(F f, const Pack<In, V>&... in) {
  Pack<Out, V> result;
#pragma unroll
  for (int j = 0; j < V; ++j) result.v[j] = Out(f(in.v[j]...));
  return result;
}

// Contiguous operands: out (n), in_k (n), pointers aligned to Pack<., V>.
template <int V, class F, class Out, class... In>
__global__ void elementwise_vec_kernel(int64_t n, F f, Out* out, const In*... in) {
  int64_t packs = n / V;
  for (int64_t p = global_thread_index(); p < packs; p += grid_stride())
    reinterpret_cast<Pack<Out, V>*>(out)[p] =
        apply_pack<Out, V>(f, reinterpret_cast<const Pack<In, V>*>(in)[p]...);
  for (int64_t i = packs * V + global_thread_index(); i < n; i += grid_stride()) out[i] = Out(f(in[i]...));
}

template <class F, size_t... K, class... In>
__device__ __forceinline__ auto apply_at(F f, const int64_t* offsets, std::index_sequence<K...>,
                                         const In*... in) {
  return f(in[offsets[K + 1]]...);  // offsets[0] is the output's
}

// Any strides: operand k of element i sits at offsets[k] (tensor_iterator.h).
template <int N, class F, class Out, class... In>
__global__ void elementwise_strided_kernel(StridedLayout<N> layout, F f, Out* out, const In*... in) {
  for (int64_t i = global_thread_index(); i < layout.numel; i += grid_stride()) {
    int64_t offsets[N];
    layout.offsets(i, offsets);
    out[offsets[0]] = Out(apply_at(f, offsets, std::make_index_sequence<N - 1>{}, in...));
  }
}

// out[i] = start + i * step, rounded like the CPU (no FMA), computed in double then converted.
template <class T>
__global__ void arange_kernel(int64_t n, double start, double step, T* out) {  // out (n)
  for (int64_t i = global_thread_index(); i < n; i += grid_stride())
    out[i] = convert<T, double>(add_rn(start, mul_rn(double(i), step)));
}

// ============================== launchers ==============================

template <class T, int V>
bool is_pack_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % sizeof(Pack<T, V>) == 0;
}

// out = f(in...) elementwise; Out and In... are the element types of out and the inputs.
template <class Out, class... In, class F, class... Tensors>
void elementwise(F f, cudaStream_t stream, const Tensor& out, const Tensors&... in) {
  static_assert(sizeof...(In) == sizeof...(Tensors), "one element type per input tensor");
  constexpr int N = 1 + int(sizeof...(In));
  MG_CHECK(out.dtype() == dtype_v<Out>, "elementwise (CUDA): output dtype ", out.dtype(), ", kernel writes ",
           dtype_v<Out>);
  MG_CHECK(((in.dtype() == dtype_v<In>) && ...), "elementwise (CUDA): an input's dtype does not match the kernel");
  MG_CHECK(out.device().is_cuda() && ((in.device() == out.device()) && ...),
           "elementwise (CUDA): expected all tensors on ", out.device());
  StridedLayout<N> layout = make_layout<N>({&out, &in...});
  if (layout.numel == 0) return;

  Out* out_ptr = static_cast<Out*>(out.data_ptr());
  constexpr size_t kWidest = std::max({sizeof(Out), sizeof(In)...});
  constexpr int V = int(kVectorBytes / kWidest);
  bool aligned = is_pack_aligned<Out, V>(out_ptr) && (is_pack_aligned<In, V>(in.data_ptr()) && ...);
  // one operation per element; each operand moves once (a broadcast one at the output's count)
  const LaunchCost cost =
      launch_cost(double(layout.numel) * double((sizeof(Out) + ... + sizeof(In))), double(layout.numel));
  if (layout.contiguous && aligned) {
    MG_LAUNCH(elementwise_vec_kernel<V>, grid_for(ceil_div(layout.numel, V), kElementwiseBlock), kElementwiseBlock,
              stream, cost, layout.numel, f, out_ptr, static_cast<const In*>(in.data_ptr())...);
  } else {
    MG_LAUNCH(elementwise_strided_kernel<N>, grid_for(layout.numel, kElementwiseBlock), kElementwiseBlock, stream,
              cost, layout, f, out_ptr, static_cast<const In*>(in.data_ptr())...);
  }
  MG_CUDA_CHECK_LAUNCH(stream);
}

// op(s, x) == mirrored(op)(x, s) exactly (NaN and signed zeros included) for these ops, so the
// scalar-first form of each reuses the scalar-second kernel: fewer instantiations to compile.
// Only the kernels API reaches it (the functional API puts a scalar first for s - x and s / x
// alone); tests/cuda/test_cuda_elementwise.cpp holds it to the CPU's bytes there.
std::optional<BinaryOp> mirrored(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: case BinaryOp::Mul: case BinaryOp::Eq: case BinaryOp::Ne: return op;
    case BinaryOp::Lt: return BinaryOp::Gt;
    case BinaryOp::Le: return BinaryOp::Ge;
    case BinaryOp::Gt: return BinaryOp::Lt;
    case BinaryOp::Ge: return BinaryOp::Le;
    default: return std::nullopt;
  }
}
template <class Op>
inline constexpr bool kHasMirror = std::is_same_v<Op, AddOp> || std::is_same_v<Op, MulOp> || std::is_same_v<Op, EqOp> ||
                                   std::is_same_v<Op, NeOp> || std::is_same_v<Op, LtOp> || std::is_same_v<Op, LeOp> ||
                                   std::is_same_v<Op, GtOp> || std::is_same_v<Op, GeOp>;

template <class T>
void unary_typed(UnaryOp op, const Tensor& in, const Tensor& out, cudaStream_t stream) {
  auto run = [&](auto functor) { elementwise<T, T>(functor, stream, out, in); };
  switch (op) {
    case UnaryOp::Neg: return run(NegOp{});
    case UnaryOp::Abs: return run(AbsOp{});
    case UnaryOp::Relu: return run(ReluOp{});
    default: break;
  }
  // The float-only ops: the functional API converts integer inputs to Float32 first.
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case UnaryOp::Exp: return run(ExpOp{});
      case UnaryOp::Log: return run(LogOp{});
      case UnaryOp::Sqrt: return run(SqrtOp{});
      case UnaryOp::Gelu: return run(GeluOp{});
      case UnaryOp::Sigmoid: return run(SigmoidOp{});
      case UnaryOp::Tanh: return run(TanhOp{});
      case UnaryOp::Sin: return run(SinOp{});
      case UnaryOp::Cos: return run(CosOp{});
      case UnaryOp::Erf: return run(ErfOp{});
      case UnaryOp::Expm1: return run(Expm1Op{});
      case UnaryOp::Log1p: return run(Log1pOp{});
      default: break;
    }
  }
  if constexpr (std::is_same_v<T, float>) {
    if (op == UnaryOp::RoundBFloat16) return run(RoundBFloat16Op{});
    if (op == UnaryOp::RoundFloat16) return run(RoundFloat16Op{});
  }
  if (op == UnaryOp::RoundBFloat16 || op == UnaryOp::RoundFloat16)
    MG_ERROR(op_name(op), ": expected a Float32 tensor, got ", in.dtype());
  MG_ERROR(op_name(op), ": expected a Float32 or Float64 tensor, got ", in.dtype());
}

}  // namespace

void unary(UnaryOp op, const Tensor& in, const Tensor& out, cudaStream_t stream) {
  set_cuda_device(out.device());
  MG_DISPATCH_ARITH(in.dtype(), op_name(op), [&] { unary_typed<scalar_t>(op, in, out, stream); });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, cudaStream_t stream) {
  set_cuda_device(out.device());
  MG_CHECK(a.dtype() == b.dtype(), op_name(op), ": operands have dtypes ", a.dtype(), " and ", b.dtype());
  MG_DISPATCH_ARITH(a.dtype(), op_name(op), [&] {
    using T = scalar_t;
    with_binary_functor(op, [&](auto functor) {
      using R = decltype(functor(T(), T()));  // T, or bool for comparisons
      elementwise<R, T, T>(functor, stream, out, a, b);
    });
  });
}

void binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first, const Tensor& out,
                   cudaStream_t stream) {
  set_cuda_device(out.device());
  if (scalar_first && mirrored(op)) {
    op = *mirrored(op);
    scalar_first = false;
  }
  MG_DISPATCH_ARITH(a.dtype(), op_name(op), [&] {
    using T = scalar_t;
    with_binary_functor(op, [&](auto functor) {
      using Op = decltype(functor);
      using R = decltype(functor(T(), T()));
      if constexpr (!kHasMirror<Op>) {
        if (scalar_first) return elementwise<R, T>(BindScalar<Op, T, true>{T(s)}, stream, out, a);
      }
      elementwise<R, T>(BindScalar<Op, T, false>{T(s)}, stream, out, a);
    });
  });
}

void clamp(const Tensor& in, double lo, double hi, const Tensor& out, cudaStream_t stream) {
  set_cuda_device(out.device());
  MG_DISPATCH_ARITH(in.dtype(), "clamp", [&] {
    using T = scalar_t;
    elementwise<T, T>(ClampOp<T>{T(lo), T(hi)}, stream, out, in);
  });
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out, cudaStream_t stream) {
  set_cuda_device(out.device());
  MG_CHECK(cond.dtype() == DType::Bool, "where: condition must be Bool, got ", cond.dtype());
  MG_CHECK(a.dtype() == b.dtype(), "where: operands have dtypes ", a.dtype(), " and ", b.dtype());
  MG_DISPATCH_ALL(a.dtype(), "where", [&] {
    using T = scalar_t;
    elementwise<T, bool, T, T>(SelectOp<T>{}, stream, out, cond, a, b);
  });
}

void copy(const Tensor& src, const Tensor& dst, cudaStream_t stream) {
  set_cuda_device(dst.device());
  MG_CHECK(src.shape() == dst.shape(), "copy: shapes ", src.shape(), " and ", dst.shape(), " differ");
  if (src.numel() == 0) return;
  // A dense same-dtype copy is a plain DMA; everything else goes through the cast kernel.
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    if (src.data_ptr() != dst.data_ptr())
      MG_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), size_t(src.numel()) * src.element_size(),
                                    cudaMemcpyDeviceToDevice, stream));
    return;
  }
  MG_DISPATCH_ALL(dst.dtype(), "copy", [&] {
    using To = scalar_t;
    MG_DISPATCH_ALL(src.dtype(), "copy", [&] {
      using From = scalar_t;
      elementwise<To, From>(ConvertOp<To, From>{}, stream, dst, src);
    });
  });
}

void fill(const Tensor& out, double value, cudaStream_t stream) {
  set_cuda_device(out.device());
  MG_DISPATCH_ALL(out.dtype(), "fill", [&] {
    using T = scalar_t;
    elementwise<T>(ConstantOp<T>{convert<T, double>(value)}, stream, out);
  });
}

void arange(const Tensor& out, double start, double step, cudaStream_t stream) {
  set_cuda_device(out.device());
  MG_CHECK(out.dim() == 1 && out.is_contiguous(), "arange: expected a contiguous 1-d output, got shape ",
           out.shape(), " strides ", out.strides());
  int64_t n = out.numel();
  if (n == 0) return;
  MG_DISPATCH_ALL(out.dtype(), "arange", [&] {
    using T = scalar_t;
    MG_LAUNCH(arange_kernel<T>, grid_for(n, kElementwiseBlock), kElementwiseBlock, stream,
              per_element(n, 0, 1, sizeof(T), 2), n, start, step, out.data<T>());
    MG_CUDA_CHECK_LAUNCH(stream);
  });
}

}  // namespace mg::kernels::cuda

// kernels/cpu/elementwise.cpp — elementwise ops on the CPU: unary, binary (tensor-tensor and
// tensor-scalar), clamp, where, copy/cast, fill, arange.
//
// Every op is out[i] = f(in_0[i], in_1[i], ...) with f a functor of kernels/functors.h, applied
// by one loop, `map`, over the StridedLayout of kernels/tensor_iterator.h:
//   - every operand contiguous: a plain indexed loop under `omp simd`, which the compiler
//     vectorises, built for AVX-512, AVX2 and SSE2 and chosen at run time (run_contiguous);
//   - otherwise: the layout's odometer (for_each_offsets) walks the coalesced dims, advancing
//     the operand offsets by additions; broadcast inputs have stride 0.
// Work split: [0, numel) is cut into one contiguous chunk per thread (parallel.h), up to the
// device's thread budget; below kGrain elements the op runs on the calling thread.
// Outputs may be strided views. Inputs and output have one shape (the functional API expands
// broadcast inputs before calling).
#include <array>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "multigrad/kernels/cpu/cpu_kernels.h"
#include "multigrad/kernels/cpu/isa.h"
#include "multigrad/kernels/cpu/matmul_bf16.h"
#include "multigrad/kernels/cpu/parallel.h"
#include "multigrad/kernels/functors.h"
#include "multigrad/kernels/op_functors.h"
#include "multigrad/kernels/tensor_iterator.h"

namespace mg::kernels::cpu {
namespace {

// The contiguous loop, o[i] = f(p[i]...) for i in [begin, end), compiled for each instruction
// set (cpu/isa.h: GELU's exp_poly runs 2.5-4x faster in AVX-512 / AVX2 vectors) and picked at
// run time. Element i is read before it is written, so in-place ops (o == p) are safe.
#define MG_CONTIGUOUS_LOOP(suffix, attributes)                                                       \
  template <class Out, class F, class... In>                                                         \
  attributes void contiguous_loop##suffix(int64_t begin, int64_t end, const F& f, Out* o, const In*... p) { \
    _Pragma("omp simd") for (int64_t i = begin; i < end; ++i) o[i] = f(p[i]...);                      \
  }
MG_DEFINE_FOR_EACH_ISA(MG_CONTIGUOUS_LOOP)
#undef MG_CONTIGUOUS_LOOP

template <class Out, class F, class... In>
void run_contiguous(int64_t begin, int64_t end, const F& f, Out* o, const In*... p) {
  MG_CALL_BEST_ISA(contiguous_loop, begin, end, f, o, p...);
}

template <class Out, class... In, class F, size_t... K>
void map_impl(std::index_sequence<K...>, const F& f, const Tensor& out,
              const std::array<const Tensor*, sizeof...(In)>& ins) {
  constexpr int N = 1 + int(sizeof...(In));
  const StridedLayout<N> layout = make_layout<N>({&out, ins[K]...});
  if (layout.numel == 0) return;
  Out* const o = static_cast<Out*>(out.data_ptr());
  const std::tuple<const In*...> in{static_cast<const In*>(ins[K]->data_ptr())...};

  parallel_for(out.device(), layout.numel, kGrain, [&](int64_t begin, int64_t end) {
    // Unpack the input pointers into locals so the loop keeps them in registers.
    std::apply(
        [&](const In*... p) {
          if (layout.contiguous) {
            run_contiguous(begin, end, f, o, p...);
          } else {
            layout.for_each_offsets(begin, end, [&](const int64_t(&offs)[N]) {
              o[offs[0]] = f(p[offs[K + 1]]...);
            });
          }
        },
        in);
  });
}

// out = f(ins...) elementwise, where out holds Out and input k holds the k-th type of In.
template <class Out, class... In, class F, class... Ts>
void map(const F& f, const Tensor& out, const Ts&... ins) {
  static_assert(sizeof...(In) == sizeof...(Ts), "map: one element type per input");
  map_impl<Out, In...>(std::index_sequence_for<In...>{}, f, out, {&ins...});
}

// d[j] = s[j] as binary16, j < n (to_float16_variants in cpu_kernels.h). The compiler does not
// vectorise Float16's rounding into 16-bit stores, so x86's F16C instruction does it where the CPU
// has it (VCVTPS2PH, 8 values at a time: the same bits, core/dtype.h). Its 16-value AVX-512 form
// was no faster (memory-bound: 0.20-0.26 ms against 0.17-0.18 per 2M values on a Zen 5).
void to_float16_loop(const float* s, Float16* d, int64_t n) {
  for (int64_t j = 0; j < n; ++j) d[j] = Float16(s[j]);
}
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,f16c"))) void to_float16_f16c(const float* s, Float16* d, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m128i half = _mm256_cvtps_ph(_mm256_loadu_ps(s + j), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + j), half);
  }
  to_float16_loop(s + j, d + j, n - j);
}
#endif

void check_same_dtype(const char* name, const Tensor& a, const Tensor& b) {
  MG_CHECK(a.dtype() == b.dtype(), name, ": operands have dtypes ", a.dtype(), " and ", b.dtype(),
           ", expected one dtype");
}

// Checks that out holds the functor's result type (the input dtype, or Bool for comparisons).
template <class Res>
void check_out_dtype(const char* name, const Tensor& out) {
  MG_CHECK(out.dtype() == dtype_v<Res>, name, ": output has dtype ", out.dtype(), ", expected ",
           dtype_v<Res>);
}

// out = f(in) for a functor defined on every arithmetic dtype (or only the floating ones).
template <class F>
void unary_arith(F f, const char* name, const Tensor& in, const Tensor& out) {
  MG_DISPATCH_ARITH(in.dtype(), name, [&] { map<scalar_t, scalar_t>(f, out, in); });
}
template <class F>
void unary_floating(F f, const char* name, const Tensor& in, const Tensor& out) {
  MG_DISPATCH_FLOATING(in.dtype(), name, [&] { map<scalar_t, scalar_t>(f, out, in); });
}

template <class F>
void unary_float32(F f, const char* name, const Tensor& in, const Tensor& out) {
  MG_CHECK(in.dtype() == DType::Float32, name, ": expected a Float32 tensor, got ", in.dtype());
  map<float, float>(f, out, in);
}

}  // namespace

void unary(UnaryOp op, const Tensor& in, const Tensor& out) {
  const char* name = op_name(op);
  check_same_dtype(name, in, out);
  switch (op) {
    case UnaryOp::Neg: return unary_arith(NegOp{}, name, in, out);
    case UnaryOp::Abs: return unary_arith(AbsOp{}, name, in, out);
    case UnaryOp::Relu: return unary_arith(ReluOp{}, name, in, out);
    case UnaryOp::Exp: return unary_floating(ExpOp{}, name, in, out);
    case UnaryOp::Log: return unary_floating(LogOp{}, name, in, out);
    case UnaryOp::Sqrt: return unary_floating(SqrtOp{}, name, in, out);
    case UnaryOp::Gelu: return unary_floating(GeluOp{}, name, in, out);
    case UnaryOp::Sigmoid: return unary_floating(SigmoidOp{}, name, in, out);
    case UnaryOp::Tanh: return unary_floating(TanhOp{}, name, in, out);
    case UnaryOp::RoundBFloat16: return unary_float32(RoundBFloat16Op{}, name, in, out);
    case UnaryOp::RoundFloat16: return unary_float32(RoundFloat16Op{}, name, in, out);
  }
  MG_ERROR("unary: unknown op ", int(op));
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const char* name = op_name(op);
  check_same_dtype(name, a, b);
  with_binary_functor(op, [&](auto f) {
    MG_DISPATCH_ARITH(a.dtype(), name, [&] {
      using Res = std::invoke_result_t<decltype(f), scalar_t, scalar_t>;
      check_out_dtype<Res>(name, out);
      map<Res, scalar_t, scalar_t>(f, out, a, b);
    });
  });
}

void binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first, const Tensor& out) {
  const char* name = op_name(op);
  with_binary_functor(op, [&](auto f) {
    using Op = decltype(f);
    MG_DISPATCH_ARITH(a.dtype(), name, [&] {
      using Res = std::invoke_result_t<Op, scalar_t, scalar_t>;
      check_out_dtype<Res>(name, out);
      const scalar_t value = convert<scalar_t>(s);
      if (scalar_first) map<Res, scalar_t>(BindScalar<Op, scalar_t, true>{value}, out, a);
      else map<Res, scalar_t>(BindScalar<Op, scalar_t, false>{value}, out, a);
    });
  });
}

void clamp(const Tensor& in, double lo, double hi, const Tensor& out) {
  check_same_dtype("clamp", in, out);
  MG_DISPATCH_ARITH(in.dtype(), "clamp", [&] {
    map<scalar_t, scalar_t>(ClampOp<scalar_t>{convert<scalar_t>(lo), convert<scalar_t>(hi)}, out, in);
  });
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  MG_CHECK(cond.dtype() == DType::Bool, "where: condition must be Bool, got ", cond.dtype());
  check_same_dtype("where", a, b);
  check_same_dtype("where", a, out);
  MG_DISPATCH_ALL(out.dtype(), "where", [&] {
    map<scalar_t, bool, scalar_t, scalar_t>(SelectOp<scalar_t>{}, out, cond, a, b);
  });
}

void copy(const Tensor& src, const Tensor& dst) {
  MG_CHECK(src.shape() == dst.shape(), "copy: source shape ", src.shape(),
           " differs from destination shape ", dst.shape());
  if (src.numel() == 0 || src.is_same(dst)) return;
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    // One dense run each: memcpy per chunk beats an element loop for every dtype.
    const size_t size = src.element_size();
    auto* d = static_cast<char*>(dst.data_ptr());
    const auto* s = static_cast<const char*>(src.data_ptr());
    parallel_for(dst.device(), src.numel(), kGrain, [&](int64_t begin, int64_t end) {
      std::memcpy(d + begin * size, s + begin * size, size_t(end - begin) * size);
    });
    return;
  }
  // Autocast's saved bf16 and fp16 values (autograd/autocast.h) come from Float32 this way: in
  // vector passes, not the element loop below (16-40x slower on Zen 5).
  const auto from_float32 = [&](auto* d, auto convert) {
    const float* s = src.data<float>();
    parallel_for(dst.device(), src.numel(), kGrain,
                 [&](int64_t begin, int64_t end) { convert(s + begin, d + begin, end - begin); });
  };
  if (src.dtype() == DType::Float32 && src.is_contiguous() && dst.is_contiguous()) {
    if (dst.dtype() == DType::BFloat16) return from_float32(dst.data<BFloat16>(), round_to_bf16);
    if (dst.dtype() == DType::Float16) return from_float32(dst.data<Float16>(), to_float16_variants().front().second);
  }
  MG_DISPATCH_ALL(dst.dtype(), "copy", [&] {
    using To = scalar_t;
    MG_DISPATCH_ALL(src.dtype(), "copy", [&] { map<To, scalar_t>(ConvertOp<To, scalar_t>{}, dst, src); });
  });
}

void fill(const Tensor& out, double value) {
  MG_DISPATCH_ALL(out.dtype(), "fill", [&] { map<scalar_t>(ConstantOp<scalar_t>{convert<scalar_t>(value)}, out); });
}

void arange(const Tensor& out, double start, double step) {
  MG_CHECK(out.dim() == 1 && out.is_contiguous(), "arange: output must be contiguous 1-d, got shape ",
           out.shape(), " strides ", out.strides());
  MG_DISPATCH_ARITH(out.dtype(), "arange", [&] {
    scalar_t* o = out.data<scalar_t>();
    parallel_for(out.device(), out.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) o[i] = convert<scalar_t>(start + double(i) * step);
    });
  });
}

const std::vector<std::pair<const char*, ToFloat16>>& to_float16_variants() {
  static const auto variants = [] {
    std::vector<std::pair<const char*, ToFloat16>> v;
#if defined(__x86_64__) && defined(__GNUC__)
    if (best_isa() >= Isa::Avx2 && __builtin_cpu_supports("f16c")) v.emplace_back("f16c", to_float16_f16c);
#endif
    v.emplace_back("loop", to_float16_loop);
    return v;
  }();
  return variants;
}

}  // namespace mg::kernels::cpu

// kernels/cpu/elementwise_map.h — the one loop of the CPU's elementwise kernels (elementwise.cpp,
// copy.cpp): out[i] = f(in_0[i], in_1[i], ...) over the StridedLayout of kernels/tensor_iterator.h.
//   - every operand contiguous: a plain indexed loop under `omp simd`, which the compiler
//     vectorises, built for AVX-512, AVX2 and SSE2 and chosen at run time (run_contiguous);
//   - otherwise: the layout's odometer (for_each_offsets) walks the coalesced dims, advancing
//     the operand offsets by additions; broadcast inputs have stride 0.
// Work split: [0, numel) is cut into one contiguous chunk per thread (parallel.h), up to the
// device's thread budget; below kGrain elements the op runs on the calling thread.
// Internal to kernels/cpu: each including file instantiates what it maps. The ops are spread over
// three files (elementwise.cpp, binary.cpp, copy.cpp) because their instantiations, each built for
// three instruction sets, made one file the library's longest compile, and a build on many cores
// (a GPU machine's 16) waits for its longest file: 36 s for the one file on a Zen 5 core, 8, 23
// and 7 s for the three (2026-12-06, with sin, cos, erf, expm1 and log1p added).
#pragma once

#include <array>
#include <tuple>
#include <type_traits>
#include <utility>

#include "multigrad/core/tensor.h"
#include "multigrad/kernels/cpu/isa.h"
#include "multigrad/kernels/cpu/parallel.h"
#include "multigrad/kernels/tensor_iterator.h"

namespace mg::kernels::cpu::detail {

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

inline void check_same_dtype(const char* name, const Tensor& a, const Tensor& b) {
  MG_CHECK(a.dtype() == b.dtype(), name, ": operands have dtypes ", a.dtype(), " and ", b.dtype(),
           ", expected one dtype");
}

// Checks that out holds the functor's result type (the input dtype, or Bool for comparisons).
template <class Res>
void check_out_dtype(const char* name, const Tensor& out) {
  MG_CHECK(out.dtype() == dtype_v<Res>, name, ": output has dtype ", out.dtype(), ", expected ",
           dtype_v<Res>);
}

}  // namespace mg::kernels::cpu::detail

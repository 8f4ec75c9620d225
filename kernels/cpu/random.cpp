// kernels/cpu/random.cpp — Philox uniform and normal draws on the CPU.
//
//   uniform: out[i] = T(low)  + T(high - low) * U_i,   U_i in [0, 1)
//   normal:  out[i] = T(mean) + T(std) * Z_i,          Z_i ~ N(0, 1) by Box-Muller
// computed in the element type T, where out is element window(i) = j of its draw (core/random.h's
// DrawWindow: the identity unless out is a slice of a larger draw), U_j and Z_j philox_uniform /
// philox_normal of
// kernels/functors.h, which fix the element -> (counter block, word) mapping: element j of a
// Float32 draw reads block offset + j/4, of a Float64 draw block offset + j/2. Each element
// depends only on (seed, offset, j), so the thread split cannot change the numbers and the CUDA
// kernel, applying the same functors and the same affine map, produces the same ones.
// Work split: contiguous chunks of [0, numel) per thread (parallel.h).
#include "multigrad/kernels/cpu/cpu_kernels.h"
#include "multigrad/kernels/cpu/parallel.h"
#include "multigrad/kernels/functors.h"

namespace mg::kernels::cpu {
namespace {

// A Philox block is ~40 integer multiply/xor operations, several times the cost of an add, so
// a thread pays for itself from this many elements.
constexpr int64_t kRandomGrain = kGrain / 8;

// out[i] = draw(i) for a contiguous floating tensor.
template <class Draw>
void fill_draws(const char* name, const Tensor& out, const Draw& draw) {
  MG_CHECK(out.is_contiguous(), name, ": output must be contiguous, got shape ", out.shape(),
           " strides ", out.strides());
  MG_DISPATCH_FLOATING(out.dtype(), name, [&] {
    scalar_t* o = out.data<scalar_t>();  // (numel,)
    parallel_for(out.device(), out.numel(), kRandomGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) o[i] = draw(scalar_t{}, i);
    });
  });
}

}  // namespace

void uniform(const Tensor& out, PhiloxState state, double low, double high, DrawWindow window) {
  fill_draws("uniform", out, [&](auto zero, int64_t i) {
    using T = decltype(zero);
    return T(low) + T(high - low) * philox_uniform<T>(state, window(i));
  });
}

void normal(const Tensor& out, PhiloxState state, double mean, double std, DrawWindow window) {
  fill_draws("normal", out, [&](auto zero, int64_t i) {
    using T = decltype(zero);
    return T(mean) + T(std) * philox_normal<T>(state, window(i));
  });
}

}  // namespace mg::kernels::cpu

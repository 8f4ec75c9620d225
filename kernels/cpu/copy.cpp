// kernels/cpu/copy.cpp — copy and cast on the CPU: dst = src converted to dst's dtype, for every
// pair of dtypes (kernels/kernels.h's copy), through elementwise_map.h's loop; one dense memcpy
// per thread's chunk where nothing converts; Float32 -> BFloat16 and -> Float16 in vector passes.
#include <cstring>
#include <utility>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "multigrad/kernels/cpu/cpu_kernels.h"
#include "multigrad/kernels/cpu/elementwise_map.h"
#include "multigrad/kernels/cpu/matmul_bf16.h"
#include "multigrad/kernels/functors.h"

namespace mg::kernels::cpu {
namespace {

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

}  // namespace

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
    MG_DISPATCH_ALL(src.dtype(), "copy", [&] { detail::map<To, scalar_t>(ConvertOp<To, scalar_t>{}, dst, src); });
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

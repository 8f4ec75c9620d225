// tests/test_util.h — helpers shared by the tests: element access, comparisons, references.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "multigrad/multigrad.h"

namespace mg::test {

// Values of any tensor as doubles (row-major).
inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// |a - b| <= atol + rtol * |b| elementwise, NaNs equal to NaNs; reports the first mismatch.
inline void require_close(const std::vector<double>& got, const std::vector<double>& want,
                          double rtol = 1e-5, double atol = 1e-6) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      INFO("index " << i << ": got " << got[i] << ", want NaN");
      REQUIRE(std::isnan(got[i]));
      continue;
    }
    if (std::isinf(want[i])) {
      INFO("index " << i << ": got " << got[i] << ", want " << want[i]);
      REQUIRE(got[i] == want[i]);
      continue;
    }
    INFO("index " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE(std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i]));
  }
}

inline void require_close(const Tensor& got, const std::vector<double>& want, double rtol = 1e-5,
                          double atol = 1e-6) {
  require_close(values(got), want, rtol, atol);
}

// Sets deterministic mode (core/deterministic.h) and turns it off however the test ends.
struct DeterministicScope {
  explicit DeterministicScope(bool on) { set_deterministic(on); }
  ~DeterministicScope() { set_deterministic(false); }
  DeterministicScope(const DeterministicScope&) = delete;
  DeterministicScope& operator=(const DeterministicScope&) = delete;
};

// Requires `fn` to throw mg::Error whose message contains every one of `parts`.
template <class Fn>
void require_error(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const mg::Error& e) {
    std::string msg = e.what();
    for (const auto& p : parts) {
      INFO("message: " << msg << "\nexpected to contain: " << p);
      REQUIRE(msg.find(p) != std::string::npos);
    }
    return;
  } catch (const std::exception& e) {
    FAIL("threw a non-mg::Error: " << e.what());
  }
  FAIL("did not throw");
}

// Deterministic test data without the library's RNG: a small LCG in [-1, 1).
inline std::vector<double> pseudo_random(size_t n, uint64_t seed = 1) {
  std::vector<double> v(n);
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = double((s >> 11) & ((1ull << 53) - 1)) / double(1ull << 53) * 2.0 - 1.0;
  }
  return v;
}

// A Float64 leaf that requires grad, values in [lo, hi) (gradcheck's inputs).
inline Tensor leaf(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::vector<double> v = pseudo_random(size_t(numel_of(shape)), seed);
  for (double& x : v) x = lo + (x + 1.0) * 0.5 * (hi - lo);
  return tensor(v, shape, {.dtype = DType::Float64, .requires_grad = true});
}

}  // namespace mg::test

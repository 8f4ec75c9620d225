// tests/optim/optim_test_util.h — parameters with hand-set gradients for the optimizer tests.
#pragma once

#include <vector>

#include "test_util.h"

namespace mg::test {

// A Float64 leaf that requires grad (Float64 so hand-computed references agree to ~1e-15).
inline Tensor param64(const std::vector<double>& v) {
  return tensor(v, {int64_t(v.size())}, {.dtype = DType::Float64, .requires_grad = true});
}

inline void set_grad64(const Tensor& p, const std::vector<double>& g) {
  p.set_grad(tensor(g, {int64_t(g.size())}, {.dtype = DType::Float64}));
}

}  // namespace mg::test

// tests/cuda/cuda_test_util.h — running one op on the CPU and on cuda:0 and comparing.
//
// Tolerances: float32 results must agree to a relative error of 1e-5 (plus an absolute 1e-6 for
// values near 0); integer and Bool results exactly. A test that loosens this says why beside the
// call (a different summation order, or CUDA's math library against libm).
#pragma once

#include <cmath>
#include <cstdlib>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace mg::test {

inline Device gpu() { return Device("cuda:0"); }

// A test case that cannot run here (no nccl backend, too few GPUs) calls skip_test(why) and
// returns: cuda_main.cpp prints the reason, and the binary exits 77 (ctest: skipped) when every
// test case it ran was skipped, so that no such test is reported as passed.
std::vector<std::string>& skipped_tests();  // "test name: why", one per skipped test case
void skip_test(const std::string& why);

// A deterministic CPU tensor: pseudo_random values in [-scale, scale); Int64 gets integers in
// [-10 * scale, 10 * scale), Bool alternates with the sign of the values.
inline Tensor cpu_input(const Shape& shape, DType dtype = DType::Float32, uint64_t seed = 1, double scale = 1.0) {
  std::vector<double> v = pseudo_random(size_t(numel_of(shape)), seed);
  for (double& x : v) {
    x *= scale;
    if (dtype == DType::Int64) x = std::floor(x * 10);
    if (dtype == DType::Bool) x = x > 0 ? 1 : 0;
  }
  return tensor(v, shape, {.dtype = dtype});
}

// The elements of `got` and `want` agree to |g - w| <= atol + rtol |w| (NaN matches NaN, an
// infinity only itself). One REQUIRE for the whole tensor, naming the first mismatch: a
// per-element REQUIRE would dominate the run time at 2^20 elements.
inline void expect_close(const Tensor& got, const Tensor& want, double rtol = 1e-5, double atol = 1e-6) {
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  std::vector<double> g = values(got), w = values(want);
  size_t mismatches = 0;
  std::ostringstream first;
  for (size_t i = 0; i < w.size(); ++i) {
    bool ok = std::isnan(w[i]) ? std::isnan(g[i])
              : std::isinf(w[i]) ? g[i] == w[i]
                                 : std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i]);
    if (!ok && mismatches++ == 0) first << "index " << i << ": got " << g[i] << ", want " << w[i];
  }
  INFO(mismatches << " of " << w.size() << " elements differ; first: " << first.str());
  REQUIRE(mismatches == 0);
}

inline void expect_equal(const Tensor& got, const Tensor& want) { expect_close(got, want, 0.0, 0.0); }

using Op = std::function<Tensor(const std::vector<Tensor>&)>;

// Copies `cpu_inputs` to cuda:0, runs `op` on both sets and compares; returns the CUDA result.
inline Tensor check_matches_cpu(const Op& op, const std::vector<Tensor>& cpu_inputs, double rtol = 1e-5,
                                double atol = 1e-6) {
  std::vector<Tensor> gpu_inputs;
  for (const Tensor& t : cpu_inputs) gpu_inputs.push_back(t.to(gpu()));
  Tensor want = op(cpu_inputs);
  Tensor got = op(gpu_inputs);
  REQUIRE(got.device() == gpu());
  expect_close(got, want, rtol, atol);
  return got;
}

inline void check_exact(const Op& op, const std::vector<Tensor>& cpu_inputs) {
  check_matches_cpu(op, cpu_inputs, 0.0, 0.0);
}

inline Tensor int64s(const std::vector<int64_t>& values, const Shape& shape, const Device& device = Device("cpu")) {
  return tensor(values, shape, {.dtype = DType::Int64, .device = device});
}

// Indices (n) in [0, bound), deterministic, with repeats when n > bound.
inline std::vector<int64_t> indices_below(int64_t n, int64_t bound, uint64_t seed) {
  std::vector<double> u = pseudo_random(size_t(n), seed);
  std::vector<int64_t> out;
  for (double x : u) out.push_back(std::min<int64_t>(bound - 1, int64_t((x + 1) / 2 * double(bound))));
  return out;
}

// Runs fn on the CPU inputs and on copies on cuda:0; compares the outputs, then the gradients of
// sum(out * w) (w fixed) for every input that requires grad. Returns nothing: REQUIREs inside.
inline void check_forward_backward(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs, double rtol, double atol) {
  TensorList cpu, cuda;
  for (const Tensor& t : inputs) {
    Tensor c = t.detach().clone(), g = t.detach().to(gpu());
    if (t.requires_grad()) {
      c.requires_grad_();
      g.requires_grad_();
    }
    cpu.push_back(c);
    cuda.push_back(g);
  }
  Tensor want = fn(cpu), got = fn(cuda);
  REQUIRE(got.device() == gpu());
  expect_close(got, want, rtol, atol);
  Tensor w = cpu_input(want.shape(), want.dtype(), 99);
  (want * w).sum().backward();
  (got * w.to(gpu())).sum().backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    INFO("gradient of input " << i);
    REQUIRE(cuda[i].grad().defined());
    expect_close(cuda[i].grad(), cpu[i].grad(), rtol, atol);
  }
}

// Sets an environment variable for a scope (MG_GEMM=native), restoring the old value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_.c_str(), old_->c_str(), 1);
    else unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// The sizes every elementwise op is run at: one element, a few, just under a block multiple, and
// 2^20 + 3 (many blocks, and a tail that the vectorised path handles one by one).
inline const std::vector<int64_t>& odd_sizes() {
  static const std::vector<int64_t> sizes{1, 7, 1023, (int64_t(1) << 20) + 3};
  return sizes;
}

}  // namespace mg::test

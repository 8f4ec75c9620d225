// tests/autograd/test_tensor_print.cpp — operator<< of a tensor (autograd/tensor_print.cpp):
// PyTorch's layout for each format, summarised long tensors, and the suffixes.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include "core/cpu_devices_guard.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

std::string printed(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

}  // namespace

TEST_CASE("a tensor prints its values as PyTorch lays them out", "[autograd][print]") {
  CHECK(printed(tensor({1.0f, 2.5f}, {2})) == "tensor([1.0000, 2.5000])");
  CHECK(printed(tensor({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2})) == "tensor([[1., 2.],\n        [3., 4.]])");
  CHECK(printed(tensor({-1.5f, 2.25f}, {2})) == "tensor([-1.5000,  2.2500])");
  CHECK(printed(tensor({1e-5f, 1.0f}, {2})) == "tensor([1.0000e-05, 1.0000e+00])");
  CHECK(printed(tensor(std::vector<int64_t>{1, -20, 3}, {3}, {.dtype = DType::Int64})) == "tensor([  1, -20,   3])");
  CHECK(printed(tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f}, {2, 2, 2})) ==
        "tensor([[[1., 2.],\n         [3., 4.]],\n\n        [[5., 6.],\n         [7., 8.]]])");
  CHECK(printed(tensor({3.0f}, {})) == "tensor(3.)");
  CHECK(printed(zeros({0, 3})) == "tensor([], size=[0, 3])");
  CHECK(printed(tensor({NAN, INFINITY, 1.5f}, {3})) == "tensor([   nan,    inf, 1.5000])");
}

TEST_CASE("a long tensor prints its first and last three of each dimension", "[autograd][print]") {
  CHECK(printed(arange(2000)) == "tensor([   0.,    1.,    2.,  ..., 1997., 1998., 1999.])");
  const std::string rows = printed(arange(2000).reshape({100, 20}));
  CHECK(rows.find("[   0.,    1.,    2.,  ...,   17.,   18.,   19.]") != std::string::npos);
  CHECK(rows.find("...,\n") != std::string::npos);
  CHECK(rows.find("[1980., 1981., 1982.,  ..., 1997., 1998., 1999.]])") != std::string::npos);
}

TEST_CASE("a tensor's print names its dtype, device and autograd state where they differ from the defaults",
          "[autograd][print]") {
  CpuDevicesGuard devices(2);
  CHECK(printed(tensor({1.0, 2.0}, {2}, {.dtype = DType::Float64})) == "tensor([1., 2.], dtype=Float64)");
  CHECK(printed(tensor({1.0f}, {1}, {.device = Device("cpu:1")})) == "tensor([1.], device=cpu:1)");
  const Tensor leaf = tensor({1.0f, 2.0f}, {2}).requires_grad_();
  CHECK(printed(leaf) == "tensor([1., 2.], requires_grad=True)");
  CHECK(printed(leaf * 2.0) == "tensor([2., 4.], grad_fn=mul)");
  CHECK(printed(tensor(std::vector<int64_t>{1, 0}, {2}, {.dtype = DType::Bool})) == "tensor([ True, False])");
  CHECK(printed(Tensor()) == "tensor(undefined)");
}

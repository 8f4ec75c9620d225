// kernels/dispatch.cpp: op names, the one-device check, copies between CPU devices.
#include "multigrad/kernels/kernels.h"
#include "core/cpu_devices_guard.h"
#include "kernels/kernel_test_util.h"

using namespace mg;
using namespace mg::test;
namespace k = mg::kernels;

TEST_CASE("op names are the functional API's names", "[kernels]") {
  REQUIRE(std::string(k::op_name(k::UnaryOp::Gelu)) == "gelu");
  REQUIRE(std::string(k::op_name(k::UnaryOp::Sigmoid)) == "sigmoid");
  REQUIRE(std::string(k::op_name(k::BinaryOp::Add)) == "add");
  REQUIRE(std::string(k::op_name(k::BinaryOp::Maximum)) == "maximum");
  REQUIRE(std::string(k::op_name(k::BinaryOp::Ge)) == "ge");
  REQUIRE(std::string(k::op_name(k::ReduceOp::Mean)) == "mean");
  REQUIRE(k::is_comparison(k::BinaryOp::Eq));
  REQUIRE_FALSE(k::is_comparison(k::BinaryOp::Minimum));
}

TEST_CASE("kernels mixing cpu:0 and cpu:1 throw naming both devices", "[kernels]") {
  CpuDevicesGuard devices(2);
  Tensor a = Tensor::empty({3}, {.device = Device("cpu:0")});
  Tensor b = Tensor::empty({3}, {.device = Device("cpu:1")});
  Tensor out = Tensor::empty({3}, {.device = Device("cpu:0")});
  require_error([&] { k::binary(k::BinaryOp::Add, a, b, out); }, {"add", "cpu:0", "cpu:1"});
  require_error([&] { k::unary(k::UnaryOp::Exp, b, out); }, {"exp", "cpu:1", "cpu:0"});
  require_error([&] { k::copy(a, b); }, {"copy", "cpu:0", "cpu:1"});
  require_error([&] { k::softmax_rows(a.as_strided({1, 3}, {3, 1}, 0), b.as_strided({1, 3}, {3, 1}, 0), false); },
                {"softmax", "cpu:0", "cpu:1"});
}

TEST_CASE("kernels run on a second CPU device", "[kernels]") {
  CpuDevicesGuard devices(2);
  const Device cpu1("cpu:1");
  Tensor a = Tensor::empty({40001}, {.device = cpu1});
  k::arange(a, 0, 1);
  Tensor out = Tensor::empty({40001}, {.device = cpu1});
  k::binary(k::BinaryOp::Mul, a, a, out);
  const std::vector<float> got = read<float>(out);
  for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == float(i) * float(i));
}

TEST_CASE("copy_across_devices copies bytes between CPU devices", "[kernels]") {
  CpuDevicesGuard devices(2);
  std::vector<double> x = random_values<double>(1000, 1);
  Tensor src = from_vector<double>({10, 100}, x, Device("cpu:0"));
  Tensor dst = Tensor::empty({10, 100}, {.dtype = DType::Float64, .device = Device("cpu:1")});
  k::copy_across_devices(src, dst);
  REQUIRE(read<double>(dst) == x);
  Tensor wrong = Tensor::empty({10, 100}, {.dtype = DType::Float32, .device = Device("cpu:1")});
  require_error([&] { k::copy_across_devices(src, wrong); }, {"copy_across_devices", "Float64", "Float32"});
  Tensor strided = Tensor::empty({10, 200}, {.dtype = DType::Float64, .device = Device("cpu:1")})
                       .as_strided({10, 100}, {200, 1}, 0);
  require_error([&] { k::copy_across_devices(src, strided); }, {"copy_across_devices", "contiguous"});
}

// tests/core/test_device.cpp — device names, CPU virtual device counts and thread budgets,
// and the errors for devices that do not exist.
#include <algorithm>
#include <cstdlib>
#include <thread>

#include "test_util.h"
#include "cpu_devices_guard.h"

using mg::Device;
using mg::DeviceType;
using mg::test::CpuDevicesGuard;
using mg::test::require_error;

TEST_CASE("Device parses cpu, cpu:N, cuda and cuda:N", "[core][device]") {
  Device cpu("cpu"), cpu3("cpu:3"), cuda("cuda"), cuda12("cuda:12");
  CHECK(cpu.is_cpu());
  CHECK(cpu.index() == 0);
  CHECK(cpu3.type() == DeviceType::CPU);
  CHECK(cpu3.index() == 3);
  CHECK(cuda.is_cuda());
  CHECK(cuda.index() == 0);
  CHECK(cuda12.index() == 12);
  CHECK(cpu.str() == "cpu:0");
  CHECK(cuda12.str() == "cuda:12");
  CHECK(Device() == Device("cpu:0"));
  CHECK(Device(DeviceType::CUDA, 1) == Device("cuda:1"));
  CHECK(Device("cpu:1") != Device("cuda:1"));
  std::ostringstream os;
  os << cpu3;
  CHECK(os.str() == "cpu:3");
}

TEST_CASE("Device rejects malformed names, naming the string", "[core][device]") {
  for (const char* bad : {"cpu:", "cpu:-1", "gpu:0", "cuda:x", "cpu:0 ", " cpu", "cpu:1x", "CPU", "cuda:+1",
                          "cpu:0:1", "", "cuda:99999999999"}) {
    INFO("spec '" << bad << "'");
    require_error([&] { Device d(bad); }, {std::string("'") + bad + "'", "expected 'cpu', 'cpu:N', 'cuda' or 'cuda:N'"});
  }
}

TEST_CASE("Device rejects a negative index", "[core][device]") {
  require_error([] { Device d(DeviceType::CPU, -1); }, {"non-negative", "-1"});
}

TEST_CASE("set_cpu_device_count changes device_count and rejects counts below 1 or above kMaxCpuDevices",
          "[core][device]") {
  CpuDevicesGuard guard(3);
  CHECK(mg::device_count(DeviceType::CPU) == 3);
  mg::set_cpu_device_count(1);
  CHECK(mg::device_count(DeviceType::CPU) == 1);
  require_error([] { mg::set_cpu_device_count(0); }, {"set_cpu_device_count", "1 to 1024", "got 0"});
  require_error([] { mg::set_cpu_device_count(-2); }, {"got -2"});
  require_error([] { mg::set_cpu_device_count(mg::kMaxCpuDevices + 1); }, {"1 to 1024", "got 1025"});
  CHECK(mg::device_count(DeviceType::CPU) == 1);
}

TEST_CASE("cpu_thread_budget divides the hardware threads (or MG_CPU_THREADS) among CPU devices", "[core][device]") {
  const char* env = std::getenv("MG_CPU_THREADS");
  const int hardware = env != nullptr ? std::atoi(env) : std::max(1, int(std::thread::hardware_concurrency()));
  CHECK(mg::cpu_thread_count() == hardware);
  {
    CpuDevicesGuard guard(1);
    CHECK(mg::cpu_thread_budget(Device("cpu:0")) == hardware);
  }
  {
    CpuDevicesGuard guard(2);
    CHECK(mg::cpu_thread_budget(Device("cpu:1")) == std::max(1, hardware / 2));
  }
  {
    CpuDevicesGuard guard(4 * hardware);  // more devices than threads: still one thread each
    CHECK(mg::cpu_thread_budget(Device("cpu:3")) == 1);
  }
  require_error([] { mg::cpu_thread_budget(Device("cuda:0")); }, {"cpu_thread_budget", "cuda:0"});
}

TEST_CASE("check_device_exists names a missing CPU device and the count", "[core][device]") {
  CpuDevicesGuard guard(2);
  mg::check_device_exists(Device("cpu:0"));
  mg::check_device_exists(Device("cpu:1"));
  require_error([] { mg::check_device_exists(Device("cpu:5")); }, {"cpu:5: no such device", "2 CPU devices"});
  require_error([] { mg::check_device_exists(Device("cpu:2")); }, {"cpu:2"});
}

TEST_CASE("check_device_exists names a missing CUDA device and why there are none", "[core][device]") {
  int n = mg::device_count(DeviceType::CUDA);
  Device missing(DeviceType::CUDA, std::max(7, n));
  require_error([&] { mg::check_device_exists(missing); },
                {missing.str() + ": no such device", std::to_string(n) + " CUDA device"});
  if (n == 0) {
    require_error([] { mg::check_device_exists(Device("cuda:0")); },
                  {"cuda:0: no such device (0 CUDA devices: " + mg::cuda_unavailable_reason() + ")"});
  }
}

TEST_CASE("cuda_unavailable_reason is set exactly when there are no CUDA devices", "[core][device]") {
  if (mg::device_count(DeviceType::CUDA) == 0) {
    CHECK_FALSE(mg::cuda_unavailable_reason().empty());
    require_error([] { mg::cuda_physical_index(0); }, {"cuda:0: no such device"});
    require_error([] { mg::cuda_device_info(0); }, {"cuda:0: no such device"});
  } else {
    CHECK(mg::cuda_unavailable_reason().empty());
  }
}

TEST_CASE("cuda_device_info describes every logical CUDA device", "[core][device]") {
  int n = mg::device_count(DeviceType::CUDA);
  for (int i = 0; i < n; ++i) {
    mg::CudaDeviceInfo info = mg::cuda_device_info(i);
    CHECK_FALSE(info.name.empty());
    CHECK(info.total_memory > 0);
    CHECK(info.sm_count > 0);
    CHECK(info.major >= 1);
    CHECK(info.physical_index == mg::cuda_physical_index(i));
    CHECK(info.physical_index >= 0);
  }
  require_error([&] { mg::cuda_device_info(n); }, {"no such device"});
}

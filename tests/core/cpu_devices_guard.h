// tests/core/cpu_devices_guard.h — sets the CPU device count for one test and restores it after,
// so tests that run in one process do not see each other's device counts.
#pragma once

#include "multigrad/core/device.h"

namespace mg::test {

class CpuDevicesGuard {
 public:
  explicit CpuDevicesGuard(int n) : previous_(device_count(DeviceType::CPU)) { set_cpu_device_count(n); }
  ~CpuDevicesGuard() { set_cpu_device_count(previous_); }
  CpuDevicesGuard(const CpuDevicesGuard&) = delete;
  CpuDevicesGuard& operator=(const CpuDevicesGuard&) = delete;

 private:
  int previous_;
};

}  // namespace mg::test

// cli/devices.cpp — `multigrad devices`: the CUDA devices (name, memory, SMs, compute
// capability) or why there are none, then the CPU virtual devices and their thread budgets, each
// device with its float32 peak and bf16's where it has one (cli/peak.h), which OpenBLAS kernels
// run the CPU's GEMMs and what runs its float32 convolutions and bf16 matmuls
// (kernels/cpu_libraries.h).
// Exits 0 whether or not a GPU is present: a machine without one still runs on CPU devices.
// The listing is assembled first and printed whole, so an error (a bad MG_CPU_DEVICES) leaves
// stdout empty.
#include <cstdio>
#include <iostream>
#include <sstream>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/peak.h"
#include "multigrad/core/device.h"
#include "multigrad/kernels/cpu_libraries.h"

namespace mg::cli {
namespace {

constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

// "peak 256.0 GFLOP/s float32 (2 threads x 2.00 GHz x 64 FLOPs/cycle)", and where bf16 has a rate
// of its own, ", 512.0 GFLOP/s bf16 (2 threads x 2.00 GHz x 128 FLOPs/cycle of AVX-512 BF16)".
std::string peak_text(const Device& d) {
  const PeakFlops peak = peak_flops(d);
  if (peak.flops_per_s <= 0) return "peak unknown (" + peak.how + ")";
  auto rate = [](const PeakFlops& p) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f", p.flops_per_s / 1e9);
    return std::string(text) + " GFLOP/s " + p.of + " (" + p.how + ")";
  };
  std::string text = "peak " + rate(peak);
  const PeakFlops bf16 = peak_flops(d, Precision::BFloat16);
  if (bf16.flops_per_s > 0 && bf16.of == "bf16") text += ", " + rate(bf16);
  return text;
}

void print_cuda_devices(std::ostream& out) {
  const int n = device_count(DeviceType::CUDA);
  if (n == 0) {
    out << "CUDA devices: none found (" << cuda_unavailable_reason() << ")\n";
    return;
  }
  std::vector<CudaDeviceInfo> infos;
  bool logical = false;  // MG_CUDA_LOGICAL_DEVICES maps several logical devices onto one GPU
  for (int i = 0; i < n; ++i) {
    infos.push_back(cuda_device_info(i));
    logical = logical || infos.back().physical_index != i;
  }
  out << "CUDA devices: " << n << "\n";
  for (int i = 0; i < n; ++i) {
    const CudaDeviceInfo& d = infos[size_t(i)];
    char memory[32];
    std::snprintf(memory, sizeof memory, "%.1f GiB", double(d.total_memory) / kBytesPerGiB);
    out << "  " << Device(DeviceType::CUDA, i) << "  " << d.name << "  " << memory << "  "
              << d.sm_count << " SMs  compute capability " << d.major << "." << d.minor;
    if (logical) out << "  on physical GPU " << d.physical_index;
    out << "  " << peak_text(Device(DeviceType::CUDA, i));
    out << "\n";
  }
}

void print_cpu_devices(std::ostream& out) {
  const int n = device_count(DeviceType::CPU);
  const int hardware = int(std::thread::hardware_concurrency()), threads = cpu_thread_count();
  out << "CPU devices: " << n << " (";
  if (threads != hardware) out << threads << " threads from MG_CPU_THREADS, ";
  out << hardware << " hardware threads)\n";
  for (int i = 0; i < n; ++i) {
    const Device d(DeviceType::CPU, i);
    out << "  " << d << "  thread budget " << cpu_thread_budget(d) << "  " << peak_text(d) << "\n";
  }
}

void print_gemm_kernel(std::ostream& out) {
  const kernels::CpuLibraries& cpu = kernels::cpu_libraries();
  out << "CPU GEMM: " << cpu.gemm.library << ", " << cpu.gemm.core << " kernels (" << cpu.gemm.origin
      << "; this CPU has " << cpu.cpu_isa << ")\n";
  if (!cpu.gemm.warning.empty()) out << "  warning: " << cpu.gemm.warning << "\n";
}

void print_conv_library(std::ostream& out) {
  const auto& c = kernels::cpu_libraries().onednn;
  if (c.name.empty()) {
    out << "CPU conv2d: im2col + GEMM (built without oneDNN)\n";
    return;
  }
  out << "CPU conv2d: " << c.name << " (its " << c.isa
      << " kernels) for float32; im2col + GEMM for float64, with --deterministic and for the backwards of "
         "layers with fewer than 8 input channels per group\n";
  if (!c.warning.empty()) out << "  warning: " << c.warning << "\n";
}

// What multiplies --precision bf16's matmuls on the CPU.
void print_bf16_gemm(std::ostream& out) {
  const kernels::CpuLibraries& cpu = kernels::cpu_libraries();
  out << "CPU bf16 matmul: ";
  if (cpu.bf16_matmuls) {
    out << cpu.onednn.name << " (its " << cpu.onednn.isa << " kernels)\n";
  } else if (cpu.onednn.name.empty()) {
    out << "float32 GEMMs on the bf16 values (built without oneDNN)\n";
  } else {
    out << "float32 GEMMs on the bf16 values (" << cpu.onednn.name << " runs " << cpu.onednn.isa
        << " kernels, without BF16)\n";
  }
}

}  // namespace

void add_devices_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "devices", "List CUDA devices (or why there are none) and CPU devices with their thread budgets");
  cmd->callback([] {
    std::ostringstream out;
    print_cuda_devices(out);
    print_cpu_devices(out);
    print_gemm_kernel(out);
    print_conv_library(out);
    print_bf16_gemm(out);
    std::cout << out.str();
  });
}

}  // namespace mg::cli

// sim/cost_model.cpp — the rules of sim/cost_model.h over the constants of sim/h100.h.
#include "multigrad/sim/cost_model.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include "multigrad/core/error.h"
#include "multigrad/sim/h100.h"

namespace mg::sim::cost {
namespace {

using json = nlohmann::json;
using namespace h100;

constexpr double kUnderfilledBytes = 1e6, kUnderfilledFlops = 1e9;  // issue 44's "moves > 1 MB or does > 1 GFLOP"

double hbm_seconds(double bytes) { return bytes / (kHbmBytesPerS * kHbmEfficiency); }

double product(const json& dims) {
  double p = 1;
  for (const json& d : dims) p *= d.get<double>();
  return p;
}

// A kernel launch's share of the GPU (0, 1]: the threads one wave keeps resident against the
// threads the SMs need to reach their peaks.
double gpu_share(double blocks, double threads_per_block) {
  const double per_sm = std::max(1.0, std::min<double>(kMaxBlocksPerSm, std::floor(kMaxThreadsPerSm / threads_per_block)));
  const double waves = std::ceil(blocks / (kSms * per_sm));
  const double resident_threads = blocks * threads_per_block / waves;  // in the average wave
  return std::min(1.0, resident_threads / (double(kSms) * kSaturatingThreadsPerSm));
}

double value_bytes(const std::string& type) {
  if (type == "bf16" || type == "fp16") return 2;
  if (type == "f64") return 8;
  return 4;
}

// The predicted seconds of one entry, with what it adds to the totals.
struct Priced {
  double seconds = 0, bytes = 0, flops = 0;
  bool launch = false;  // a kernel launch or a library call
  bool underfilled = false;
};

Priced price_launch(const json& e) {
  Priced p{.bytes = e.at("bytes").get<double>(), .flops = e.at("flops").get<double>(), .launch = true};
  const double blocks = product(e.at("grid")), threads = product(e.at("block"));
  const double share = gpu_share(blocks, threads);
  p.seconds = std::max(hbm_seconds(p.bytes), p.flops / (kFp32Flops * kFp32Efficiency)) / share + kLaunchSeconds;
  p.underfilled = blocks < kSms && (p.bytes > kUnderfilledBytes || p.flops > kUnderfilledFlops);
  return p;
}

Priced price_gemm(const json& e) {
  const double m = e.at("m").get<double>(), n = e.at("n").get<double>(), k = e.at("k").get<double>(),
               batch = e.at("batch").get<double>();
  const std::string inputs = e.at("inputs").get<std::string>();
  const double in = value_bytes(inputs), out = value_bytes(e.at("accumulate").get<std::string>());
  Priced p{.bytes = batch * ((m * k + k * n) * in + m * n * out), .flops = 2 * m * n * k * batch, .launch = true};
  const bool tensor = in == 2;  // bf16/fp16 operands: tensor cores; float32 without TF32: CUDA cores
  const double peak = tensor ? kBf16TensorFlops * kGemmTensorEfficiency : kFp32Flops * kGemmFp32Efficiency;
  const double tiles = std::ceil(m / kGemmTile) * std::ceil(n / kGemmTile) * batch;
  // split-K into as many pieces as fit one wave
  const double splits = std::clamp(std::floor(k / kGemmSplitKMin), 1.0, std::max(1.0, std::floor(kSms / tiles)));
  const double blocks = tiles * splits;
  const double filled = blocks / (std::ceil(blocks / kSms) * kSms);
  p.seconds = std::max(p.flops / (peak * filled), hbm_seconds(p.bytes)) + kLaunchSeconds;
  return p;  // never counted as underfilled: cuBLAS picks its grid, the fill above models it
}

Priced price_conv(const json& e) {
  auto v = [&](const char* f) { return e.at(f).get<double>(); };
  const double size = value_bytes(e.at("type").get<std::string>());
  const double out = v("N") * v("K") * v("P") * v("Q");
  Priced p{.bytes = (v("N") * v("C") * v("H") * v("W") + v("K") * v("C_per_group") * v("R") * v("S") + out) * size,
           .flops = 2 * out * v("C_per_group") * v("R") * v("S"),
           .launch = true};
  p.seconds = std::max(p.flops / (kFp32Flops * kGemmFp32Efficiency), hbm_seconds(p.bytes)) + kLaunchSeconds;
  return p;
}

// nccl-tests' bus bytes: what crosses each rank's link for the call's bytes ("bytes" in the
// ledger: what this rank sends, an all-gather's part).
Priced price_nccl(const json& e) {
  const double bytes = e.at("bytes").get<double>(), ranks = e.at("ranks").get<double>();
  const std::string call = e.at("call").get<std::string>();
  Priced p{.bytes = bytes, .launch = true};
  if (ranks <= 1) {
    p.seconds = kLaunchSeconds;
    return p;
  }
  const double bus = call == "ncclAllReduce"       ? 2 * (ranks - 1) / ranks * bytes
                     : call == "ncclReduceScatter" ? (ranks - 1) / ranks * bytes
                     : call == "ncclAllGather"     ? (ranks - 1) * bytes
                                                   : bytes;
  p.seconds = bus / (kNvlinkBytesPerS * kNvlinkEfficiency) + kLaunchSeconds;
  return p;
}

Priced price_copy(const json& e) {
  const std::string kind = e.at("kind").get<std::string>();
  Priced p{.bytes = e.at("bytes").get<double>()};
  if (kind == "h2d" || kind == "d2h")
    p.seconds = p.bytes / (kPcieBytesPerS * kPcieEfficiency);
  else if (kind == "d2d")
    p.seconds = hbm_seconds(2 * p.bytes) + kLaunchSeconds;
  else if (kind == "d")  // a memset
    p.seconds = hbm_seconds(p.bytes) + kLaunchSeconds;
  else if (kind == "peer")
    p.seconds = p.bytes / (kNvlinkBytesPerS * kNvlinkEfficiency);
  if (e.value("host_waits", false)) p.seconds += kHostSyncSeconds;
  return p;
}

std::string fixed(double v, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

}  // namespace

double Prediction::peak_flops() const { return precision == "fp32" ? kFp32Flops : kBf16TensorFlops; }

double Prediction::mfu() const {
  return seconds > 0 ? double(tokens) * flops_per_token / seconds / peak_flops() : 0;
}

Prediction predict_lines(const std::vector<std::string>& lines, const std::string& where) {
  Prediction out;
  std::map<std::string, Family> families;
  std::map<int64_t, double> device_seconds;
  std::map<int64_t, int64_t> thread_device;    // a thread's last device, for entries that name none
  std::map<int64_t, bool> thread_waited;       // the thread's last entry was a copy the host waited for
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    const std::string at = where + ":" + std::to_string(i + 1);
    json e;
    try {
      e = json::parse(lines[i]);
    } catch (const json::exception& err) {
      MG_ERROR(at, ": not a ledger entry (", err.what(), ")");
    }
    MG_CHECK(e.is_object() && e.contains("event") && e["event"].is_string(), at,
             ": not a ledger entry (no \"event\" field)");
    const std::string event = e["event"].get<std::string>();
    try {
      if (event == "step") {
        out.step = e.at("step").get<int64_t>();
        out.tokens = e.at("tokens").get<int64_t>();
        out.flops_per_token = e.at("flops_per_token").get<double>();
        out.precision = e.at("precision").get<std::string>();
        out.record_only = e.at("record_only").get<bool>();
        continue;
      }
      const int64_t thread = e.value("thread", int64_t(0));
      if (e.contains("device")) thread_device[thread] = e["device"].get<int64_t>();
      const int64_t device = thread_device[thread];
      const bool waited_before = thread_waited[thread];
      thread_waited[thread] = false;
      Priced p;
      std::string family;
      if (event == "launch") {
        p = price_launch(e);
        family = e.value("family", json()).is_string() ? e["family"].get<std::string>() : "other";
      } else if (event == "gemm") {
        p = price_gemm(e);
        family = "cublas";
      } else if (event == "conv") {
        p = price_conv(e);
        family = "cudnn";
      } else if (event == "nccl") {
        p = price_nccl(e);
        family = "nccl";
      } else if (event == "copy" || event == "memset") {
        p = price_copy(e);
        family = event;
        if (e.value("host_waits", false)) {
          ++out.host_syncs;
          thread_waited[thread] = true;
        }
      } else if (event == "sync") {
        if (!waited_before) {  // a copy the host waited for, then its stream's sync: one stop
          ++out.host_syncs;
          p.seconds = kHostSyncSeconds;
        }
        family = "sync";
      } else if (event == "malloc" || event == "malloc_host" || event == "free") {
        p.seconds = kMallocSeconds;
        if (event == "malloc") ++out.mallocs;
        family = "malloc";
      } else if (event == "wait_event") {
        continue;  // ordering between streams: no time of its own
      } else {
        MG_ERROR(at, ": unknown ledger event '", event, "'");
      }
      Family& f = families[family];
      f.name = family;
      f.seconds += p.seconds;
      ++f.entries;
      f.bytes += p.bytes;
      f.flops += p.flops;
      device_seconds[device] += p.seconds;
      out.bytes += p.bytes;
      out.flops += p.flops;
      out.launches += p.launch ? 1 : 0;
      out.underfilled += p.underfilled ? 1 : 0;
    } catch (const json::exception& err) {
      MG_ERROR(at, ": a '", event, "' entry without the fields it needs (", err.what(), ")");
    }
  }
  for (const auto& [device, seconds] : device_seconds) out.seconds = std::max(out.seconds, seconds);
  out.devices = int(device_seconds.size());
  for (auto& [name, f] : families) out.families.push_back(std::move(f));
  std::sort(out.families.begin(), out.families.end(),
            [](const Family& a, const Family& b) { return a.seconds > b.seconds; });
  return out;
}

Prediction predict_file(const std::string& path) {
  std::ifstream in(path);
  MG_CHECK(in.good(), "the ledger ", path, ": cannot open it for reading");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  MG_CHECK(!lines.empty(), "the ledger ", path, " is empty");
  return predict_lines(lines, path);
}

std::string report(const Prediction& p) {
  std::string out = "predicted on an H100 SXM (sim/h100.h; docs/cost-model.md): no GPU ran this\n";
  char line[160];
  std::snprintf(line, sizeof line, "%-14s %9s %11s %11s %14s %7s\n", "family", "entries", "GB moved", "GFLOP",
                "predicted ms", "share");
  out += line;
  for (const Family& f : p.families) {
    std::snprintf(line, sizeof line, "%-14s %9lld %11.3f %11.1f %14.3f %6.1f%%\n", f.name.c_str(),
                  static_cast<long long>(f.entries), f.bytes / 1e9, f.flops / 1e9, f.seconds * 1e3,
                  p.seconds > 0 ? 100 * f.seconds / p.seconds : 0.0);
    out += line;
  }
  out += "predicted_step_ms: " + fixed(p.seconds * 1e3, 3) +
         (p.devices > 1 ? " (the slowest of " + std::to_string(p.devices) + " devices)" : "") + "\n";
  out += "launches: " + std::to_string(p.launches) + "\nhost_syncs: " + std::to_string(p.host_syncs) +
         "\nmallocs: " + std::to_string(p.mallocs) + "\nunderfilled_launches: " + std::to_string(p.underfilled) +
         " (kernels moving > 1 MB or doing > 1 GFLOP on fewer than " + std::to_string(kSms) + " blocks)\n";
  out += "gb_moved: " + fixed(p.bytes / 1e9, 3) + "\ngflop: " + fixed(p.flops / 1e9, 1) + "\n";
  if (p.tokens > 0) {
    out += "step: " + std::to_string(p.step) + " (" + std::to_string(p.tokens) + " tokens, " + p.precision +
           (p.record_only ? ", recorded without running kernels" : "") + ")\n";
    out += "predicted_tokens_per_s: " + fixed(p.tokens_per_s(), 0) + "\n";
    if (p.flops_per_token > 0)
      out += "predicted_mfu: " + fixed(p.mfu(), 4) + " (of " + fixed(p.peak_flops() / 1e12, 1) + " TFLOP/s " +
             (p.precision == "fp32" ? "float32 on CUDA cores" : "dense bf16 tensor cores") + ")\n";
  }
  return out;
}

}  // namespace mg::sim::cost

// sim/ledger.cpp — the ledger of sim/ledger.h: one file, one mutex, entries written as they come.
#include "multigrad/sim/ledger.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>

namespace mg::sim::ledger {
namespace {

struct Ledger {
  std::mutex mutex;
  std::FILE* file = nullptr;
  long long entries = 0;
  int next_thread = 0;
  std::map<const void*, int> streams;
};

Ledger& the_ledger() {
  static auto* l = new Ledger;  // leaked: threads may record during static destruction
  return *l;
}

std::atomic<bool> open_flag{false};
std::once_flag environment_read;

// MG_CUDA_SIM_LEDGER=FILE opens the ledger at the first query.
void read_environment() {
  std::call_once(environment_read, [] {
    const char* path = std::getenv("MG_CUDA_SIM_LEDGER");
    if (path == nullptr || *path == '\0') return;
    const std::string error = start(path);
    if (!error.empty()) std::fprintf(stderr, "MG_CUDA_SIM_LEDGER: %s\n", error.c_str());
  });
}

// "kernels/cuda/norm.cu" -> "norm"; a family name stays as it is.
std::string_view stem(std::string_view s) {
  if (const size_t slash = s.find_last_of('/'); slash != std::string_view::npos) s.remove_prefix(slash + 1);
  if (const size_t dot = s.find('.'); dot != std::string_view::npos) s = s.substr(0, dot);
  return s;
}

// A name as a JSON string (the names here are identifiers and paths; quotes and backslashes are
// escaped all the same, control characters dropped).
std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

thread_local int thread_number = -1;

std::string dims(dim3 d) {
  return "[" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + "]";
}

// A count (bytes, FLOPs) as a JSON number: an integer below 2^53 as one, written in full.
std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

}  // namespace

std::string start(const std::string& path) {
  Ledger& l = the_ledger();
  std::lock_guard<std::mutex> lock(l.mutex);
  if (l.file != nullptr) std::fclose(l.file);
  l.file = std::fopen(path.c_str(), "w");
  l.entries = 0;
  l.streams.clear();
  open_flag.store(l.file != nullptr, std::memory_order_release);
  return l.file == nullptr ? path + ": cannot open it for writing" : "";
}

long long stop() {
  Ledger& l = the_ledger();
  std::lock_guard<std::mutex> lock(l.mutex);
  open_flag.store(false, std::memory_order_release);
  if (l.file != nullptr) std::fclose(l.file);
  l.file = nullptr;
  return l.entries;
}

bool on() {
  read_environment();
  return open_flag.load(std::memory_order_acquire);
}

Context& context() {
  thread_local Context c;
  return c;
}

void record(const char* event, const std::string& fields, bool with_family) {
  if (!on()) return;
  const Context& c = context();
  Ledger& l = the_ledger();
  std::lock_guard<std::mutex> lock(l.mutex);
  if (l.file == nullptr) return;
  if (thread_number < 0) thread_number = l.next_thread++;
  std::string line = "{\"seq\": " + std::to_string(l.entries) + ", \"event\": " + quoted(event) +
                     ", \"thread\": " + std::to_string(thread_number) + ", \"phase\": " +
                     (c.phase != nullptr ? quoted(c.phase) : std::string("null"));
  if (with_family) line += ", \"family\": " + (c.family != nullptr ? quoted(stem(c.family)) : std::string("null"));
  if (!fields.empty()) line += ", " + fields;
  line += "}\n";
  std::fputs(line.c_str(), l.file);
  ++l.entries;
}

int stream_number(const void* stream) {
  if (stream == nullptr) return 0;
  Ledger& l = the_ledger();
  std::lock_guard<std::mutex> lock(l.mutex);
  const auto [it, added] = l.streams.emplace(stream, int(l.streams.size()) + 1);
  return it->second;
}

void record_launch(const char* kernel, dim3 grid, dim3 block, int device, const void* stream, double bytes,
                   double flops) {
  record("launch",
         "\"kernel\": " + quoted(kernel) + ", \"grid\": " + dims(grid) + ", \"block\": " + dims(block) +
             ", \"device\": " + std::to_string(device) + ", \"stream\": " + std::to_string(stream_number(stream)) +
             ", \"bytes\": " + number(bytes) + ", \"flops\": " + number(flops),
         true);
}

void record_copy(const char* event, const char* kind, size_t bytes, int device, const void* stream, bool host_waits) {
  record(event, "\"kind\": " + quoted(kind) + ", \"bytes\": " + std::to_string(bytes) + ", \"device\": " +
                    std::to_string(device) + ", \"stream\": " + std::to_string(stream_number(stream)) +
                    ", \"host_waits\": " + (host_waits ? "true" : "false"));
}

void record_step(int64_t step, int64_t tokens, double flops_per_token, const std::string& precision) {
  record("step", "\"step\": " + std::to_string(step) + ", \"tokens\": " + std::to_string(tokens) +
                     ", \"flops_per_token\": " + number(flops_per_token) + ", \"precision\": " + quoted(precision) +
                     ", \"record_only\": " + (record_only() ? "true" : "false"));
}

bool record_only() {
  static const bool value = [] {
    const char* env = std::getenv("MG_CUDA_SIM_EXECUTE");
    if (env == nullptr || std::string_view(env) == "1") return false;
    if (std::string_view(env) == "0") return true;
    std::fprintf(stderr,
                 "multigrad CUDA simulator: MG_CUDA_SIM_EXECUTE='%s' is neither 0 (record only) nor 1 (run "
                 "every call)\n",
                 env);
    std::exit(2);
  }();
  return value;
}

void host_reads_zeros() {
  static std::once_flag said;
  std::call_once(said, [] {
    std::fprintf(stderr,
                 "multigrad CUDA simulator: record only (MG_CUDA_SIM_EXECUTE=0): no kernel runs, and the host reads "
                 "zeros from device memory: losses, norms and checks are not the model's\n");
  });
}

}  // namespace mg::sim::ledger

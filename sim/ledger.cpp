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

}  // namespace mg::sim::ledger

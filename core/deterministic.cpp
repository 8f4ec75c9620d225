// core/deterministic.cpp — the deterministic flag (see deterministic.h).
#include "multigrad/core/deterministic.h"

#include <atomic>

namespace mg {
namespace {
std::atomic<bool> g_deterministic{false};
}  // namespace

void set_deterministic(bool on) { g_deterministic = on; }
bool is_deterministic() { return g_deterministic; }

}  // namespace mg

// cli/flags.cpp — the flag checks of cli/flags.h.
#include "cli/flags.h"

#include <charconv>
#include <cmath>
#include <cstdint>

namespace mg::cli {
namespace {

// text as a finite double, or the reason it is not one.
std::string parse_finite(const std::string& text, double& value) {
  if (!CLI::detail::lexical_cast(text, value)) return "expected a number, got '" + text + "'";
  if (!std::isfinite(value)) return "expected a finite number, got " + text;
  return "";
}

}  // namespace

CLI::Validator sign_check(bool zero_allowed) {
  const std::string need = zero_allowed ? "at least 0" : "greater than 0";
  return CLI::Validator(
      [zero_allowed, need](std::string& text) -> std::string {
        double value = 0;
        if (std::string error = parse_finite(text, value); !error.empty()) return error;
        return value > 0 || (zero_allowed && value == 0) ? "" : "must be " + need + ", got " + text;
      },
      need);
}

CLI::Validator range_check(double lo, double hi, const std::string& need) {
  return CLI::Validator(
      [lo, hi, need](std::string& text) -> std::string {
        double value = 0;
        if (std::string error = parse_finite(text, value); !error.empty()) return error;
        return value >= lo && value <= hi ? "" : "must be " + need + ", got " + text;
      },
      need);
}

CLI::Validator seed_check() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        uint64_t value = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (!text.empty() && ec == std::errc() && end == text.data() + text.size()) return "";
        return "must be a whole number from 0 to 18446744073709551615 (2^64 - 1), got " + text;
      },
      "0 to 2^64 - 1");
}

}  // namespace mg::cli

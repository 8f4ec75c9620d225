// cli/flags.h — checks of numeric flags whose messages say what is needed. (CLI11's own range
// checks print the whole range of a double: "0 not in range 0.000000 to 1797693...".)
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace mg::cli {

// A finite number > 0, or >= 0 with zero_allowed.
CLI::Validator sign_check(bool zero_allowed);
// A finite number in [lo, hi]; `need` says so in words ("between 0.001 and 86400 seconds").
CLI::Validator range_check(double lo, double hi, const std::string& need);
// A seed: a decimal integer from 0 to 2^64 - 1 (no sign, no saturation).
CLI::Validator seed_check();

}  // namespace mg::cli

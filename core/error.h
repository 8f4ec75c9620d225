// core/error.h — the one error type of multigrad and the checks that throw it.
//
// A bad call never crashes and never returns garbage: it throws mg::Error whose
// message carries the offending values, e.g.
//   "matmul: shapes cannot be multiplied ([2, 3] and [2, 3])".
// MG_CHECK is always on (release builds too): the checks guard user input.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace mg {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {

template <class T>
void append(std::ostream& os, const T& value) { os << value; }
// Shapes and strides (std::vector<int64_t>) print as [2, 3].
void append(std::ostream& os, const std::vector<int64_t>& values);

// Concatenates every argument, as operator<< prints it (shapes as [2, 3]).
template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (append(os, args), ...);
  return os.str();
}

[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);

}  // namespace detail
}  // namespace mg

// MG_CHECK(cond, "matmul: shapes cannot be multiplied (", a, " and ", b, ")");
#define MG_CHECK(cond, ...)                                                           \
  do {                                                                                \
    if (!(cond)) ::mg::detail::throw_error(__FILE__, __LINE__, ::mg::detail::str_cat(__VA_ARGS__)); \
  } while (0)

#define MG_ERROR(...) ::mg::detail::throw_error(__FILE__, __LINE__, ::mg::detail::str_cat(__VA_ARGS__))

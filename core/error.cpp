// core/error.cpp — building the messages of mg::Error.
//
// Users read these messages, so they carry the offending values and nothing else. Debug builds
// (NDEBUG undefined) also append the throwing source file and line, for the people working on
// multigrad itself.
#include "multigrad/core/error.h"

#include <cstring>

namespace mg::detail {

void append(std::ostream& os, const std::vector<int64_t>& values) {
  os << '[';
  for (size_t i = 0; i < values.size(); ++i) os << (i ? ", " : "") << values[i];
  os << ']';
}

[[noreturn]] void throw_error(const char* file, int line, const std::string& msg) {
#ifdef NDEBUG
  (void)file;
  (void)line;
  throw Error(msg);
#else
  const char* slash = std::strrchr(file, '/');
  throw Error(str_cat(msg, " [", slash ? slash + 1 : file, ":", line, "]"));
#endif
}

}  // namespace mg::detail

// parallel/agree.cpp — the ranks compare their settings (parallel/agree.h).
#include "parallel/agree.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace mg::parallel {
namespace {

// Unit and record separators: settings are names and values of flags, which do not hold them.
constexpr char kNameEnd = '\x1f', kValueEnd = '\x1e';

std::string encode(const Settings& settings) {
  std::string text;
  for (const auto& [name, value] : settings) text += name + kNameEnd + value + kValueEnd;
  return text;
}

Settings decode(const std::string& text) {
  Settings out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t name_end = text.find(kNameEnd, at), value_end = text.find(kValueEnd, name_end);
    MG_CHECK(name_end != std::string::npos && value_end != std::string::npos,
             "check_ranks_agree: a rank's settings arrived cut short");
    out.emplace_back(text.substr(at, name_end - at), text.substr(name_end + 1, value_end - name_end - 1));
    at = value_end + 1;
  }
  return out;
}

}  // namespace

void check_ranks_agree(Communicator& comm, const Settings& settings) {
  std::vector<Settings> ranks;
  for (const std::string& text : all_gather_text(comm, encode(settings))) ranks.push_back(decode(text));
  // Every name any rank has, in the order the ranks list them, rank 0's first.
  std::vector<std::string> names;
  for (const Settings& s : ranks)
    for (const auto& [name, value] : s)
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  const auto value_of = [](const Settings& s, const std::string& name) -> std::string {
    for (const auto& [n, v] : s)
      if (n == name) return "'" + v + "'";
    return "none";
  };
  for (const std::string& name : names) {
    bool same = true;
    for (const Settings& s : ranks) same = same && value_of(s, name) == value_of(ranks[0], name);
    if (same) continue;
    std::ostringstream message;
    message << "the ranks disagree on " << name << ":";
    for (size_t r = 0; r < ranks.size(); ++r) message << (r ? "," : "") << " rank " << r << " has " << value_of(ranks[r], name);
    message << " (start every rank with the same settings)";
    MG_ERROR(message.str());
  }
}

}  // namespace mg::parallel

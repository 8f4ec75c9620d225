// parallel/comm/agree.cpp — the ranks compare their settings (parallel/comm/agree.h).
#include "multigrad/parallel/comm/agree.h"

#include <algorithm>
#include <sstream>

#include <nlohmann/json.hpp>

#include "multigrad/core/error.h"

namespace mg::parallel {

void check_ranks_agree(Communicator& comm, const Settings& settings) {
  std::vector<Settings> ranks;
  for (const std::string& text : all_gather_text(comm, nlohmann::json(settings).dump()))
    ranks.push_back(nlohmann::json::parse(text).get<Settings>());
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

// parallel/timeline.cpp — the Chrome trace writer (see timeline.h).
#include "multigrad/parallel/timeline.h"

#include <algorithm>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "multigrad/core/error.h"
#include "multigrad/parallel/comm/communicator.h"

namespace mg::parallel {

std::vector<TimelineEvent> all_gather_events(Communicator& comm, const std::vector<TimelineEvent>& mine) {
  using Clock = std::chrono::steady_clock;
  nlohmann::json rows = nlohmann::json::array();  // [lane, name, start ns, end ns] per event
  for (const auto& e : mine)
    rows.push_back({e.lane, e.name, e.start.time_since_epoch().count(), e.end.time_since_epoch().count()});
  std::vector<TimelineEvent> all;
  for (const std::string& text : all_gather_text(comm, rows.dump())) {
    for (const auto& row : nlohmann::json::parse(text)) {
      all.push_back({row[0].get<std::string>(), row[1].get<std::string>(),
                     Clock::time_point(Clock::duration(row[2].get<Clock::rep>())),
                     Clock::time_point(Clock::duration(row[3].get<Clock::rep>()))});
    }
  }
  return all;
}

void write_chrome_trace(const std::string& path, const std::vector<TimelineEvent>& events) {
  nlohmann::json trace = nlohmann::json::array();
  if (!events.empty()) {
    auto origin = events.front().start;
    for (const auto& e : events) origin = std::min(origin, e.start);
    auto us = [&](std::chrono::steady_clock::time_point t) {
      return std::chrono::duration<double, std::micro>(t - origin).count();
    };
    std::map<std::string, int> lanes;  // lane name -> tid, in order of first appearance
    for (const auto& e : events) {
      const auto [it, added] = lanes.emplace(e.lane, int(lanes.size()));
      if (added) {
        trace.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", 0}, {"tid", it->second},
                         {"args", {{"name", e.lane}}}});
      }
      trace.push_back({{"ph", "X"}, {"name", e.name}, {"pid", 0}, {"tid", it->second}, {"ts", us(e.start)},
                       {"dur", us(e.end) - us(e.start)}});
    }
  }
  std::ofstream out(path, std::ios::trunc);
  MG_CHECK(out.good(), "trace: cannot write ", path);
  out << trace.dump() << "\n";
  MG_CHECK(out.good(), "trace: writing ", path, " failed");
}

}  // namespace mg::parallel

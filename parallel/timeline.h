// parallel/timeline.h — what ran where and when, and its Chrome trace (docs/design.md).
//
// A TimelineEvent is one interval on one lane (a pipeline stage, a DDP rank's backward or its
// all-reduces). write_chrome_trace() writes the Trace Event Format's JSON array of complete
// ("ph": "X") events, microseconds from the earliest event, one thread lane per `lane`: it
// opens in Perfetto (ui.perfetto.dev) and chrome://tracing.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace mg::parallel {

struct TimelineEvent {
  std::string lane;  // "stage 0 (cpu:0)", "rank 1 all-reduce"
  std::string name;  // "F3", "B3", "send activation 3", "bucket 2"
  std::chrono::steady_clock::time_point start, end;
};

class Communicator;

// Every rank's events, on every rank (through all_gather_text), so that the trace of a run with a
// process per rank has every rank's lanes. The times are each process's steady clock: comparable
// between processes of one host (CLOCK_MONOTONIC), not between hosts.
std::vector<TimelineEvent> all_gather_events(Communicator& comm, const std::vector<TimelineEvent>& mine);

// Writes the events to `path` (replacing it); throws naming the path when it cannot.
void write_chrome_trace(const std::string& path, const std::vector<TimelineEvent>& events);

}  // namespace mg::parallel

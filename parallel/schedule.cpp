// parallel/schedule.cpp — the two pipeline schedules as action lists, and their run in unit time.
//
// The simulation keeps, per stage, the index of its next action and the slot at which each of
// its forwards, backwards and sends finished. Slot t runs in two phases:
//   1. zero-time actions (receives, sends) of every stage, repeated until none can move, so
//      the result does not depend on the order the stages are visited;
//   2. every stage whose next action is a forward or backward with its inputs ready runs it.
// An input counts only if it finished at or before t, so what a stage runs in slot t never
// feeds another stage in the same slot. A slot in which no stage can run anything, with some
// stage not finished, can never change: that is a deadlock, and its error names every stage
// still waiting and what for.
#include "parallel/schedule.h"

#include <algorithm>
#include <climits>
#include <optional>
#include <sstream>

#include "core/error.h"

namespace mg::parallel {
namespace {

// A timeline's idle slot; the kind means nothing when micro_batch is -1.
constexpr Action kIdle{ActionKind::Forward, -1};
// The finish slot of something that has not happened yet: never "at or before t".
constexpr int kNever = INT_MAX;

void check_counts(const char* who, int stages, int micro_batches) {
  MG_CHECK(stages >= 1 && micro_batches >= 1, who,
           ": a pipeline needs at least 1 stage and 1 micro-batch (got stages=", stages,
           ", micro_batches=", micro_batches, ")");
}

// Stage s's forward of micro-batch k, with the receive of its input before it (not on the first
// stage) and the send of its output after it (not on the last).
void add_forward(std::vector<Action>& actions, int s, int stages, int k) {
  if (s > 0) actions.push_back({ActionKind::RecvActivation, k});
  actions.push_back({ActionKind::Forward, k});
  if (s < stages - 1) actions.push_back({ActionKind::SendActivation, k});
}

// Stage s's backward of micro-batch k, with the receive of its output's gradient before it (not
// on the last stage: its backward starts from the loss) and the send of its input's gradient
// after it (not on the first).
void add_backward(std::vector<Action>& actions, int s, int stages, int k) {
  if (s < stages - 1) actions.push_back({ActionKind::RecvGrad, k});
  actions.push_back({ActionKind::Backward, k});
  if (s > 0) actions.push_back({ActionKind::SendGrad, k});
}

bool takes_a_slot(ActionKind kind) { return kind == ActionKind::Forward || kind == ActionKind::Backward; }

struct StageState {
  size_t next = 0;  // index of the next action in the stage's list
  // Per micro-batch: the first slot from which each counts as done, or kNever.
  std::vector<int> forward_done, backward_done, activation_sent, grad_sent;
  explicit StageState(int micro_batches)
      : forward_done(size_t(micro_batches), kNever), backward_done(size_t(micro_batches), kNever),
        activation_sent(size_t(micro_batches), kNever), grad_sent(size_t(micro_batches), kNever) {}
};

// What an action still waits for: stage `stage`'s action `kind` of the same micro-batch. The
// stage may be -1 or p, one that does not exist (a receive on the first or last stage).
struct Need {
  int stage;
  ActionKind kind;
};

class Simulation {
 public:
  Simulation(const Schedule& schedule, int micro_batches)
      : schedule_(schedule), stages_(int(schedule.size())), state_(schedule.size(), StageState(micro_batches)) {}

  Timeline run() {
    Timeline timeline;
    timeline.slots.resize(size_t(stages_));
    for (int t = 0;; ++t) {
      run_zero_time_actions(t);
      std::vector<bool> runs(size_t(stages_), false);  // the stages that run a forward or backward in slot t
      bool any = false;
      for (int s = 0; s < stages_; ++s) {
        const Action* a = next_action(s);
        runs[size_t(s)] = a != nullptr && takes_a_slot(a->kind) && !missing(s, *a, t);
        any = any || runs[size_t(s)];
      }
      if (!any) {
        if (finished()) return timeline;
        throw_deadlock(t);
      }
      for (int s = 0; s < stages_; ++s) {
        timeline.slots[size_t(s)].push_back(runs[size_t(s)] ? *next_action(s) : kIdle);
        if (runs[size_t(s)]) complete(s, t + 1);
      }
    }
  }

 private:
  const Action* next_action(int s) const {
    const std::vector<Action>& actions = schedule_[size_t(s)];
    const size_t next = state_[size_t(s)].next;
    return next < actions.size() ? &actions[next] : nullptr;
  }

  bool finished() const {
    for (int s = 0; s < stages_; ++s)
      if (next_action(s) != nullptr) return false;
    return true;
  }

  // Whether stage `stage` has done `kind` of micro-batch k at or before slot t.
  bool done(int stage, ActionKind kind, size_t k, int t) const {
    if (stage < 0 || stage >= stages_) return false;
    const StageState& st = state_[size_t(stage)];
    switch (kind) {
      case ActionKind::Forward: return st.forward_done[k] <= t;
      case ActionKind::Backward: return st.backward_done[k] <= t;
      case ActionKind::SendActivation: return st.activation_sent[k] <= t;
      case ActionKind::SendGrad: return st.grad_sent[k] <= t;
      case ActionKind::RecvActivation:
      case ActionKind::RecvGrad: break;
    }
    return false;
  }

  // What stage s still needs before it can start action `a` in slot t, if anything.
  std::optional<Need> missing(int s, const Action& a, int t) const {
    const size_t k = size_t(a.micro_batch);
    const auto need = [&](int stage, ActionKind kind) -> std::optional<Need> {
      if (done(stage, kind, k, t)) return std::nullopt;
      return Need{stage, kind};
    };
    const bool first = s == 0, last = s == stages_ - 1;
    switch (a.kind) {
      case ActionKind::RecvActivation: return need(s - 1, ActionKind::SendActivation);
      case ActionKind::Forward: return first ? std::nullopt : need(s - 1, ActionKind::Forward);
      case ActionKind::SendActivation: return need(s, ActionKind::Forward);
      case ActionKind::RecvGrad: return need(s + 1, ActionKind::SendGrad);
      case ActionKind::Backward:
        if (auto own = need(s, ActionKind::Forward)) return own;
        return last ? std::nullopt : need(s + 1, ActionKind::Backward);
      case ActionKind::SendGrad: return need(s, ActionKind::Backward);
    }
    return std::nullopt;
  }

  // Stage s's next action is done, effective from slot `when`.
  void complete(int s, int when) {
    StageState& self = state_[size_t(s)];
    const Action& a = *next_action(s);
    const size_t k = size_t(a.micro_batch);
    const auto once = [&](std::vector<int>& slot) {
      MG_CHECK(slot[k] == kNever, "simulate: stage ", s, " runs ", action_kind_name(a.kind), " ", a.micro_batch,
               " twice");
      slot[k] = when;
    };
    switch (a.kind) {
      case ActionKind::Forward: once(self.forward_done); break;
      case ActionKind::Backward: once(self.backward_done); break;
      case ActionKind::SendActivation: self.activation_sent[k] = std::min(self.activation_sent[k], when); break;
      case ActionKind::SendGrad: self.grad_sent[k] = std::min(self.grad_sent[k], when); break;
      case ActionKind::RecvActivation:
      case ActionKind::RecvGrad: break;
    }
    ++self.next;
  }

  void run_zero_time_actions(int t) {
    for (bool moved = true; moved;) {
      moved = false;
      for (int s = 0; s < stages_; ++s) {
        for (const Action* a; (a = next_action(s)) != nullptr && !takes_a_slot(a->kind) && !missing(s, *a, t);) {
          complete(s, t);
          moved = true;
        }
      }
    }
  }

  [[noreturn]] void throw_deadlock(int t) const {
    std::ostringstream what;
    what << "simulate: the schedule cannot complete (deadlock at slot " << t << "):";
    const char* separator = " ";
    for (int s = 0; s < stages_; ++s) {
      const Action* a = next_action(s);
      if (a == nullptr) continue;
      const Need need = *missing(s, *a, t);
      what << separator << "stage " << s << " waits forever at " << action_kind_name(a->kind) << " " << a->micro_batch
           << " (for ";
      if (need.stage == s) what << "its own ";
      else what << "stage " << need.stage << "'s ";
      what << action_kind_name(need.kind) << " " << a->micro_batch;
      if (need.stage < 0 || need.stage >= stages_) what << ", but there is no stage " << need.stage;
      what << ")";
      separator = "; ";
    }
    MG_ERROR(what.str());
  }

  const Schedule& schedule_;
  const int stages_;
  std::vector<StageState> state_;
};

// Most micro-batches forwarded and not yet backwarded, along one stage's slots.
int peak_in_flight(const std::vector<Action>& slots) {
  int in_flight = 0, peak = 0;
  for (const Action& a : slots) {
    if (a.micro_batch < 0) continue;
    in_flight += a.kind == ActionKind::Forward ? 1 : -1;
    peak = std::max(peak, in_flight);
  }
  return peak;
}

int decimal_digits(int n) { return int(std::to_string(n).size()); }

}  // namespace

const char* action_kind_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::RecvActivation: return "recv_activation";
    case ActionKind::Forward: return "forward";
    case ActionKind::SendActivation: return "send_activation";
    case ActionKind::RecvGrad: return "recv_grad";
    case ActionKind::Backward: return "backward";
    case ActionKind::SendGrad: return "send_grad";
  }
  MG_ERROR("action_kind_name: not an ActionKind (", int(kind), ")");
}

Schedule gpipe(int stages, int micro_batches) {
  check_counts("gpipe", stages, micro_batches);
  Schedule schedule(static_cast<size_t>(stages));
  for (int s = 0; s < stages; ++s) {
    for (int k = 0; k < micro_batches; ++k) add_forward(schedule[size_t(s)], s, stages, k);
    for (int k = 0; k < micro_batches; ++k) add_backward(schedule[size_t(s)], s, stages, k);
  }
  return schedule;
}

Schedule one_f_one_b(int stages, int micro_batches) {
  check_counts("one_f_one_b", stages, micro_batches);
  Schedule schedule(static_cast<size_t>(stages));
  for (int s = 0; s < stages; ++s) {
    std::vector<Action>& actions = schedule[size_t(s)];
    // Warm-up: forwards while micro-batch 0 goes through the p - s - 1 stages downstream and
    // its gradient comes back; then one forward, one backward; then the backwards left.
    const int warm_up = std::min(stages - s - 1, micro_batches);
    for (int k = 0; k < warm_up; ++k) add_forward(actions, s, stages, k);
    for (int i = 0; i < micro_batches - warm_up; ++i) {
      add_forward(actions, s, stages, warm_up + i);
      add_backward(actions, s, stages, i);
    }
    for (int k = micro_batches - warm_up; k < micro_batches; ++k) add_backward(actions, s, stages, k);
  }
  return schedule;
}

Schedule make_schedule(const std::string& name, int stages, int micro_batches) {
  if (name == "gpipe") return gpipe(stages, micro_batches);
  if (name == "1f1b") return one_f_one_b(stages, micro_batches);
  MG_ERROR("make_schedule: unknown schedule '", name, "' (expected gpipe or 1f1b)");
}

Timeline simulate(const Schedule& schedule) {
  MG_CHECK(!schedule.empty(), "simulate: a schedule needs at least one stage");
  int micro_batches = 0;
  for (size_t s = 0; s < schedule.size(); ++s) {
    for (const Action& a : schedule[s]) {
      MG_CHECK(a.micro_batch >= 0, "simulate: stage ", s, " has ", action_kind_name(a.kind), " ", a.micro_batch,
               " (micro-batches count from 0)");
      micro_batches = std::max(micro_batches, a.micro_batch + 1);
    }
  }
  Timeline timeline = Simulation(schedule, micro_batches).run();
  size_t idle = 0, all = 0;
  for (const std::vector<Action>& row : timeline.slots) {
    all += row.size();
    idle += size_t(std::count(row.begin(), row.end(), kIdle));
  }
  timeline.bubble_fraction = all == 0 ? 0.0 : double(idle) / double(all);
  timeline.peak_activations = peak_in_flight(timeline.slots[0]);
  return timeline;
}

std::string draw(const Timeline& timeline) {
  int largest = 0;  // the largest micro-batch drawn
  for (const std::vector<Action>& row : timeline.slots)
    for (const Action& a : row) largest = std::max(largest, a.micro_batch);
  // Every cell as wide as the widest ("F" and the digits), so columns line up for any m.
  const size_t cell = size_t(1 + decimal_digits(largest));
  const int label = decimal_digits(std::max(0, int(timeline.slots.size()) - 1));
  std::ostringstream out;
  for (size_t s = 0; s < timeline.slots.size(); ++s) {
    std::string row = "stage ";
    row.append(size_t(label - decimal_digits(int(s))), ' ').append(std::to_string(s)).append(" |");
    for (const Action& a : timeline.slots[s]) {
      std::string text = ".";
      if (a.micro_batch >= 0) {
        text = a.kind == ActionKind::Forward ? 'F' : 'B';
        text += std::to_string(a.micro_batch);
      }
      text.resize(cell, ' ');
      row.append(" ").append(text);
    }
    row.erase(row.find_last_not_of(' ') + 1);
    out << row << "\n";
  }
  return out.str();
}

}  // namespace mg::parallel

// parallel/pipeline/schedule.cpp — the pipeline schedules as action lists, and their run in unit time.
//
// The simulation keeps, per stage, the index of its next action and how far its communication
// there has got; per virtual stage, the slot at which each of its forwards and backwards
// finished; and per ordered pair of stages, the sub-messages (headers, data) sent and the
// receives posted, in order. Slot t runs in two phases:
//   1. zero time: every stage's sends, receives and exchanges, each a header phase and a data
//      phase that post their halves and finish once each is matched (a send once its receive is
//      posted, a receive once its message is sent), repeated until none can move, so the result
//      does not depend on the order the stages are visited;
//   2. every stage whose next action is a forward or backward with its inputs ready runs it.
// An input counts only if it finished at or before t, so what a stage runs in slot t never
// feeds another stage in the same slot. A slot in which no stage can run anything, with some
// stage not finished, can never change: that is a deadlock, and its error names every stage
// still waiting and what for.
#include "multigrad/parallel/pipeline/schedule.h"

#include <algorithm>
#include <climits>
#include <map>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "multigrad/core/error.h"

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

// What an action still waits for: virtual stage `on`'s action `kind` of the same micro-batch (a
// forward or backward, or the other end of a message). It may be -1 or p v, one that does not
// exist (a receive on the first or last virtual stage).
struct Need {
  int on;
  ActionKind kind;
};

// Runs a schedule in unit time, with the runtime's communication (see "Messages" in schedule.h).
class Simulation {
 public:
  Simulation(const Schedule& schedule, int micro_batches, int chunks)
      : schedule_(schedule),
        stages_(int(schedule.size())),
        chunks_(chunks),
        exchanges_(find_exchanges(schedule, chunks)),
        state_(schedule.size()),
        forward_done_(size_t(stages_ * chunks), std::vector<int>(size_t(micro_batches), kNever)),
        backward_done_(forward_done_) {}

  Timeline run() {
    Timeline timeline;
    timeline.slots.resize(size_t(stages_));
    for (int t = 0;; ++t) {
      communicate();
      std::vector<bool> runs(size_t(stages_), false);  // the stages that run a forward or backward in slot t
      bool any = false;
      for (int s = 0; s < stages_; ++s) {
        const Action* a = next_action(s);
        runs[size_t(s)] = a != nullptr && takes_a_slot(a->kind) && !compute_needs(s, *a, t);
        any = any || runs[size_t(s)];
      }
      if (!any) {
        if (finished()) return timeline;
        throw_deadlock(t);
      }
      for (int s = 0; s < stages_; ++s) {
        timeline.slots[size_t(s)].push_back(runs[size_t(s)] ? *next_action(s) : kIdle);
        if (runs[size_t(s)]) finish_compute(s, t + 1);
      }
    }
  }

 private:
  // One half of a posted message phase: this stage's send or receive of `action`, with `peer`;
  // seq numbers the sub-message (a header or a data message) on its channel.
  struct Half {
    bool send;
    int peer;
    Action action;
    size_t seq;
  };
  struct StageState {
    size_t next = 0;          // the index of the stage's next action
    int phase = 0;            // of the communication at `next`: 0 its headers, 1 its data
    std::vector<Half> posted;  // that phase's halves once posted, else empty
  };
  // Between an ordered pair of stages: the sub-messages sent (the send action and the phase), and
  // how many receives the receiver has posted.
  struct Channel {
    std::vector<std::pair<Action, int>> sent;
    size_t receives_posted = 0;
  };

  int virtual_stages() const { return stages_ * chunks_; }
  bool exists(int j) const { return j >= 0 && j < virtual_stages(); }

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

  // "stage 2", or with chunks "stage 2 chunk 1"; a virtual stage that does not exist by its number.
  std::string stage_name(int j) const {
    if (chunks_ == 1 || !exists(j)) return detail::str_cat("stage ", j);
    return detail::str_cat("stage ", j % stages_, " chunk ", j / stages_);
  }
  std::string action_name(const Action& a) const {
    if (chunks_ == 1) return detail::str_cat(action_kind_name(a.kind), " ", a.micro_batch);
    return detail::str_cat(action_kind_name(a.kind), " ", a.micro_batch, " of chunk ", a.chunk);
  }

  Channel& channel(int from, int to) { return channels_[{from, to}]; }

  // What stage s's forward or backward `a` still needs in slot t: its input's forward on the
  // virtual stage before, or its own forward and the backward of the virtual stage after. (The
  // runtime has these through messages; a list that lacks the receive still waits for them.)
  std::optional<Need> compute_needs(int s, const Action& a, int t) const {
    const int j = a.chunk * stages_ + s;
    const size_t k = size_t(a.micro_batch);
    const auto finished_on = [&](const std::vector<std::vector<int>>& when, int on,
                                 ActionKind kind) -> std::optional<Need> {
      if (exists(on) && when[size_t(on)][k] <= t) return std::nullopt;
      return Need{on, kind};
    };
    if (a.kind == ActionKind::Forward) {
      return j == 0 ? std::nullopt : finished_on(forward_done_, j - 1, ActionKind::Forward);
    }
    if (auto own = finished_on(forward_done_, j, ActionKind::Forward)) return own;
    return j == virtual_stages() - 1 ? std::nullopt : finished_on(backward_done_, j + 1, ActionKind::Backward);
  }

  void finish_compute(int s, int when) {
    const Action& a = *next_action(s);
    int& slot = (a.kind == ActionKind::Forward ? forward_done_ : backward_done_)[size_t(a.chunk * stages_ + s)]
                                                                               [size_t(a.micro_batch)];
    MG_CHECK(slot == kNever, "simulate: stage ", s, " runs ", action_name(a), " twice");
    slot = when;
    ++state_[size_t(s)].next;
  }

  // The actions that stage s's communication at its next action covers: one, or an exchange's two.
  size_t width(int s) const { return exchanges_[size_t(s)][state_[size_t(s)].next] ? 2 : 1; }

  // Posts the current phase of stage s's communication: each send appends its sub-message to its
  // channel, each receive counts as posted. False when a receive has no stage to come from.
  bool post(int s) {
    StageState& st = state_[size_t(s)];
    std::vector<Half> halves;
    for (size_t i = st.next; i < st.next + width(s); ++i) {
      const Action& a = schedule_[size_t(s)][i];
      const MessageEnd end = other_end(a, s, stages_, chunks_);
      if (!exists(end.virtual_stage)) return false;
      if (is_send(a.kind)) {
        Channel& c = channel(s, end.stage);
        halves.push_back({true, end.stage, a, c.sent.size()});
        c.sent.emplace_back(a, st.phase);
      } else {
        halves.push_back({false, end.stage, a, channel(end.stage, s).receives_posted++});
      }
    }
    st.posted = std::move(halves);
    return true;
  }

  // Whether a posted half is done: a send once its receiver has posted the receive (a
  // rendezvous, as NCCL's), a receive once its sub-message has been sent. A receive whose
  // sub-message is another than its own is an error: the runtime's receive would take it.
  bool done(int s, const Half& h) {
    if (h.send) return channel(s, h.peer).receives_posted > h.seq;
    const Channel& c = channel(h.peer, s);
    if (c.sent.size() <= h.seq) return false;
    const auto& [sent, phase] = c.sent[h.seq];
    const MessageEnd from = other_end(h.action, s, stages_, chunks_);
    MG_CHECK(sent == from.action && phase == state_[size_t(s)].phase, "simulate: stage ", s, "'s ",
             action_name(h.action), " would take ", stage_name(sent.chunk * stages_ + h.peer), "'s ",
             action_name(sent), phase == 0 ? " (its header)" : " (its data)",
             ": between two stages, messages are received in the order they are sent");
    return true;
  }

  // Stage s's communication moves if it can: posts its phase, or finishes it. Whether it moved.
  bool step_communication(int s) {
    StageState& st = state_[size_t(s)];
    if (st.posted.empty()) return post(s);
    for (const Half& h : st.posted)
      if (!done(s, h)) return false;
    st.posted.clear();
    if (st.phase == 0) {
      st.phase = 1;
    } else {
      st.next += width(s);
      st.phase = 0;
    }
    return true;
  }

  // Zero time: every stage's sends and receives, repeated until none can move, so the result
  // does not depend on the order the stages are visited.
  void communicate() {
    for (bool moved = true; moved;) {
      moved = false;
      for (int s = 0; s < stages_; ++s) {
        for (const Action* a; (a = next_action(s)) != nullptr && !takes_a_slot(a->kind) && step_communication(s);)
          moved = true;
      }
    }
  }

  // What stage s waits for at its next action, once nothing moves: the first half not done (or,
  // before posting, a receive with no stage to come from), or a forward's or backward's input.
  std::pair<Action, Need> waiting_for(int s, int t) {
    const StageState& st = state_[size_t(s)];
    const Action& a = *next_action(s);
    if (takes_a_slot(a.kind)) return {a, *compute_needs(s, a, t)};
    for (size_t i = st.next; i < st.next + width(s); ++i) {
      const Action& half = schedule_[size_t(s)][i];
      const bool pending = st.posted.empty() || !done(s, st.posted[i - st.next]);
      const MessageEnd end = other_end(half, s, stages_, chunks_);
      if (pending && (!st.posted.empty() || !exists(end.virtual_stage))) {
        return {half, {end.virtual_stage, end.action.kind}};
      }
    }
    MG_ERROR("simulate: stage ", s, " is stuck at ", action_name(a), " for no reason found");  // not reached
  }

  [[noreturn]] void throw_deadlock(int t) {
    std::ostringstream what;
    what << "simulate: the schedule cannot complete (deadlock at slot " << t << "):";
    const char* separator = " ";
    for (int s = 0; s < stages_; ++s) {
      if (next_action(s) == nullptr) continue;
      const auto [a, need] = waiting_for(s, t);
      what << separator << "stage " << s << " waits forever at " << action_name(a) << " (for ";
      if (need.on == a.chunk * stages_ + s) what << "its own ";
      else what << stage_name(need.on) << "'s ";
      what << action_kind_name(need.kind) << " " << a.micro_batch;
      if (!exists(need.on)) what << ", but there is no stage " << need.on;
      what << ")";
      separator = "; ";
    }
    MG_ERROR(what.str());
  }

  const Schedule& schedule_;
  const int stages_, chunks_;
  const std::vector<std::vector<bool>> exchanges_;  // find_exchanges
  std::vector<StageState> state_;
  // [virtual stage][micro-batch]: the first slot from which it counts as done, or kNever.
  std::vector<std::vector<int>> forward_done_, backward_done_;
  std::map<std::pair<int, int>, Channel> channels_;  // (from stage, to stage)
};

int decimal_digits(int n) { return int(std::to_string(n).size()); }

}  // namespace

int peak_in_flight(const std::vector<Action>& actions) {
  int in_flight = 0, peak = 0;
  for (const Action& a : actions) {
    if (a.micro_batch < 0 || (a.kind != ActionKind::Forward && a.kind != ActionKind::Backward)) continue;
    in_flight += a.kind == ActionKind::Forward ? 1 : -1;
    peak = std::max(peak, in_flight);
  }
  return peak;
}

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

Schedule interleaved_one_f_one_b(int stages, int micro_batches, int chunks) {
  check_counts("interleaved_one_f_one_b", stages, micro_batches);
  MG_CHECK(stages >= 2 && chunks >= 2, "interleaved_one_f_one_b: needs at least 2 stages and 2 chunks per stage (got ",
           "stages=", stages, ", chunks=", chunks, "; with 1 chunk it is one_f_one_b)");
  MG_CHECK(micro_batches % stages == 0, "interleaved_one_f_one_b: micro_batches=", micro_batches,
           " is not a multiple of stages=", stages, " (the forwards go through each chunk in rounds of p)");
  const int p = stages, n = stages * chunks, total = micro_batches * chunks;
  Schedule schedule(static_cast<size_t>(stages));
  for (int s = 0; s < p; ++s) {
    std::vector<Action>& actions = schedule[size_t(s)];
    // The stage's i-th forward and i-th backward (of `total` each): rounds of p v, in which chunk
    // c takes micro-batches round * p .. round * p + p - 1; backwards take the chunks from the last.
    const auto forward_of = [&](int i) { return Action{ActionKind::Forward, i / n * p + i % p, i % n / p}; };
    const auto backward_of = [&](int i) {
      return Action{ActionKind::Backward, i / n * p + i % p, chunks - 1 - i % n / p};
    };
    const auto j = [&](const Action& a) { return a.chunk * p + s; };
    // The messages around forward i and backward i; none past the last, none to or from a
    // virtual stage that does not exist.
    const auto add = [&](ActionKind kind, const Action& a) { actions.push_back({kind, a.micro_batch, a.chunk}); };
    const auto send_activation = [&](int i) {
      if (j(forward_of(i)) < n - 1) add(ActionKind::SendActivation, forward_of(i));
    };
    const auto recv_activation = [&](int i) {
      if (i < total && j(forward_of(i)) > 0) add(ActionKind::RecvActivation, forward_of(i));
    };
    const auto send_grad = [&](int i) {
      if (j(backward_of(i)) > 0) add(ActionKind::SendGrad, backward_of(i));
    };
    const auto recv_grad = [&](int i) {
      if (i < total && j(backward_of(i)) < n - 1) add(ActionKind::RecvGrad, backward_of(i));
    };
    // As in Megatron, each receive comes one step ahead, right after the sends of the step
    // before, so that sends and receives pair into exchanges (find_exchanges). In the steady
    // state a step's four messages are two exchanges, with the next stage (this forward's
    // output, the next backward's gradient) and with the previous one (this backward's input
    // gradient, the next forward's input); even stages take the next stage first and odd ones
    // the previous, so neighbours meet in the same exchange (the even/odd order of a ring).
    const bool next_first = s % 2 == 0;
    const int warm_up = std::min(2 * (p - s - 1) + (chunks - 1) * p, total);
    recv_activation(0);
    for (int i = 0; i < warm_up; ++i) {
      actions.push_back(forward_of(i));
      if (i == warm_up - 1 && warm_up < total) {  // the last warm-up step also receives backward 0's gradient
        if (!next_first) recv_activation(i + 1);
        send_activation(i);
        recv_grad(0);
        if (next_first) recv_activation(i + 1);
      } else {
        send_activation(i);
        recv_activation(i + 1);
      }
    }
    if (warm_up == total) recv_grad(0);
    for (int i = 0; i < total - warm_up; ++i) {
      const int f = warm_up + i;
      actions.push_back(forward_of(f));
      actions.push_back(backward_of(i));
      const auto with_next = [&] {
        send_activation(f);
        recv_grad(i + 1);
      };
      const auto with_previous = [&] {
        send_grad(i);
        recv_activation(f + 1);
      };
      if (next_first) {
        with_next();
        with_previous();
      } else {
        with_previous();
        with_next();
      }
    }
    for (int i = total - warm_up; i < total; ++i) {
      actions.push_back(backward_of(i));
      send_grad(i);
      recv_grad(i + 1);
    }
  }
  return schedule;
}

Schedule make_schedule(const std::string& name, int stages, int micro_batches, int chunks) {
  MG_CHECK(name == "gpipe" || name == "1f1b" || name == "interleaved", "make_schedule: unknown schedule '", name,
           "' (expected gpipe, 1f1b or interleaved)");
  if (name == "interleaved") return interleaved_one_f_one_b(stages, micro_batches, chunks);
  MG_CHECK(chunks == 1, "make_schedule: ", name, " runs 1 chunk per stage (got chunks=", chunks,
           "; interleaved runs several)");
  return name == "gpipe" ? gpipe(stages, micro_batches) : one_f_one_b(stages, micro_batches);
}

double formula_bubble(int stages, int micro_batches, int chunks) {
  return double(stages - 1) / double(chunks * micro_batches + stages - 1);
}

MessageEnd other_end(const Action& a, int stage, int stages, int chunks) {
  const int j = a.chunk * stages + stage;
  const auto at = [&](int peer, ActionKind kind) {
    const int peer_stage = peer < 0 ? -1 : peer >= stages * chunks ? stages : peer % stages;
    return MessageEnd{peer, peer_stage, {kind, a.micro_batch, peer < 0 ? 0 : peer / stages}};
  };
  switch (a.kind) {
    case ActionKind::SendActivation: return at(j + 1, ActionKind::RecvActivation);
    case ActionKind::RecvActivation: return at(j - 1, ActionKind::SendActivation);
    case ActionKind::SendGrad: return at(j - 1, ActionKind::RecvGrad);
    case ActionKind::RecvGrad: return at(j + 1, ActionKind::SendGrad);
    case ActionKind::Forward:
    case ActionKind::Backward: break;
  }
  MG_ERROR("other_end: ", action_kind_name(a.kind), " is no message");
}

std::vector<std::vector<bool>> find_exchanges(const Schedule& schedule, int chunks) {
  const int p = int(schedule.size());
  // Where each action first stands in its stage's list.
  const auto key = [](const Action& a) {
    return uint64_t(a.kind) << 56 | uint64_t(uint32_t(a.chunk)) << 28 | uint64_t(uint32_t(a.micro_batch));
  };
  std::vector<std::unordered_map<uint64_t, size_t>> position(schedule.size());
  for (size_t s = 0; s < schedule.size(); ++s)
    for (size_t i = 0; i < schedule[s].size(); ++i) position[s].emplace(key(schedule[s][i]), i);
  std::vector<std::vector<bool>> exchanges(schedule.size());
  for (int s = 0; s < p; ++s) {
    const std::vector<Action>& mine = schedule[size_t(s)];
    exchanges[size_t(s)].assign(mine.size(), false);
    for (size_t i = 0; i + 1 < mine.size(); ++i) {
      if (!is_send(mine[i].kind) || !is_recv(mine[i + 1].kind)) continue;
      const MessageEnd to = other_end(mine[i], s, p, chunks), from = other_end(mine[i + 1], s, p, chunks);
      if (to.stage < 0 || to.stage >= p || from.stage < 0 || from.stage >= p) continue;
      if (to.stage != from.stage) {
        exchanges[size_t(s)][i] = true;
        continue;
      }
      // Their send of what this stage receives, then their receive of what it sends.
      const std::vector<Action>& theirs = schedule[size_t(to.stage)];
      const auto at = position[size_t(to.stage)].find(key(from.action));
      exchanges[size_t(s)][i] =
          at != position[size_t(to.stage)].end() && at->second + 1 < theirs.size() && theirs[at->second + 1] == to.action;
    }
  }
  return exchanges;
}

Timeline simulate(const Schedule& schedule) {
  MG_CHECK(!schedule.empty(), "simulate: a schedule needs at least one stage");
  const int stages = int(schedule.size());
  int micro_batches = 0, chunks = 1;
  for (size_t s = 0; s < schedule.size(); ++s) {
    for (const Action& a : schedule[s]) {
      MG_CHECK(a.micro_batch >= 0 && a.chunk >= 0, "simulate: stage ", s, " has ", action_kind_name(a.kind), " ",
               a.micro_batch, " of chunk ", a.chunk, " (micro-batches and chunks count from 0)");
      micro_batches = std::max(micro_batches, a.micro_batch + 1);
      chunks = std::max(chunks, a.chunk + 1);
    }
  }
  for (size_t s = 0; s < schedule.size(); ++s) {
    for (const Action& a : schedule[s]) {
      if (!is_send(a.kind)) continue;
      const MessageEnd to = other_end(a, int(s), stages, chunks);
      MG_CHECK(to.stage >= 0 && to.stage < stages, "simulate: stage ", s, " has ", action_kind_name(a.kind), " ",
               a.micro_batch, ", but there is no stage ", to.virtual_stage, " to receive it");
    }
  }
  Timeline timeline = Simulation(schedule, micro_batches, chunks).run();
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
  int largest = 0, chunks = 1;  // the largest micro-batch drawn, and how many chunks
  for (const std::vector<Action>& row : timeline.slots) {
    for (const Action& a : row) largest = std::max(largest, a.micro_batch), chunks = std::max(chunks, a.chunk + 1);
  }
  // Every cell as wide as the widest ("F", the digits, and ".c" with chunks), so columns line
  // up for any m.
  const size_t cell = size_t(1 + decimal_digits(largest) + (chunks > 1 ? 1 + decimal_digits(chunks - 1) : 0));
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
        if (chunks > 1) text.append(".").append(std::to_string(a.chunk));
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

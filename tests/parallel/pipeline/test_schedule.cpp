// tests/parallel/pipeline/test_schedule.cpp — the pipeline schedules (parallel/pipeline/schedule.cpp) as data,
// without a model: hand-written action lists for small cases, the invariants of GPipe and 1F1B
// for p = 1..5 stages and m = 1..12 micro-batches and of interleaved 1F1B for p = 2..5, v = 2..4
// and m = p..3p, their run in unit time under rendezvous sends (dependencies across stages, the
// bubble against (p-1)/(v m+p-1), peak activations), exchanges, the drawing, and the errors.
#include <algorithm>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "multigrad/parallel/pipeline/schedule.h"
#include "test_util.h"

namespace {

using mg::parallel::Action;
using mg::parallel::ActionKind;
using mg::parallel::Schedule;
using mg::parallel::Timeline;
using mg::test::require_error;

constexpr int kMaxStages = 5;
constexpr int kMaxMicroBatches = 12;
const std::vector<std::string> kNames = {"gpipe", "1f1b"};

// Short names for the hand-written lists.
Action RA(int k) { return {ActionKind::RecvActivation, k}; }
Action F(int k) { return {ActionKind::Forward, k}; }
Action SA(int k) { return {ActionKind::SendActivation, k}; }
Action RG(int k) { return {ActionKind::RecvGrad, k}; }
Action B(int k) { return {ActionKind::Backward, k}; }
Action SG(int k) { return {ActionKind::SendGrad, k}; }
// With a chunk: F(3, 1) is micro-batch 3's forward through chunk 1.
Action RA(int k, int c) { return {ActionKind::RecvActivation, k, c}; }
Action F(int k, int c) { return {ActionKind::Forward, k, c}; }
Action SA(int k, int c) { return {ActionKind::SendActivation, k, c}; }
Action RG(int k, int c) { return {ActionKind::RecvGrad, k, c}; }
Action B(int k, int c) { return {ActionKind::Backward, k, c}; }
Action SG(int k, int c) { return {ActionKind::SendGrad, k, c}; }

// The interleaved cases of the invariant tests: p stages, v chunks, m micro-batches.
struct Interleaved {
  int p, v, m;
};
std::vector<Interleaved> interleaved_cases() {
  std::vector<Interleaved> cases;
  for (int p = 2; p <= kMaxStages; ++p)
    for (int v = 2; v <= 4; ++v)
      for (int m = p; m <= 3 * p; m += p) cases.push_back({p, v, m});
  return cases;
}

std::string show(const std::vector<Action>& actions) {
  std::string text;
  for (const Action& a : actions) {
    text += std::string(text.empty() ? "" : " ") + mg::parallel::action_kind_name(a.kind) + " " +
            std::to_string(a.micro_batch);
    if (a.chunk != 0) text += "." + std::to_string(a.chunk);
  }
  return text;
}

void require_actions(const std::vector<Action>& got, const std::vector<Action>& want) {
  INFO("got:  " << show(got) << "\nwant: " << show(want));
  REQUIRE(got == want);
}

bool is_compute(const Action& a) { return a.kind == ActionKind::Forward || a.kind == ActionKind::Backward; }

// The slot of each forward (kind Forward) or backward of stage s, by micro-batch; -1 if absent.
std::vector<int> slot_of(const Timeline& timeline, int s, ActionKind kind, int m) {
  std::vector<int> slots(size_t(m), -1);
  const std::vector<Action>& row = timeline.slots[size_t(s)];
  for (size_t t = 0; t < row.size(); ++t)
    if (row[t].micro_batch >= 0 && row[t].kind == kind) slots[size_t(row[t].micro_batch)] = int(t);
  return slots;
}

// Micro-batches forwarded and not yet backwarded after each action of a stage's list.
std::vector<int> in_flight(const std::vector<Action>& actions) {
  std::vector<int> counts;
  int n = 0;
  for (const Action& a : actions) {
    if (a.kind == ActionKind::Forward) ++n;
    if (a.kind == ActionKind::Backward) --n;
    counts.push_back(n);
  }
  return counts;
}

// How the drawing shows a slot: F3, B3, or . when idle.
std::string cell_text(const Action& a) {
  if (a.micro_batch < 0) return ".";
  std::string text(1, a.kind == ActionKind::Forward ? 'F' : 'B');
  text += std::to_string(a.micro_batch);
  return text;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> rows;
  std::istringstream in(text);
  for (std::string row; std::getline(in, row);) rows.push_back(row);
  return rows;
}

}  // namespace

TEST_CASE("schedule: 1f1b with 2 stages and 3 micro-batches, written out by hand", "[schedule]") {
  const Schedule s = mg::parallel::one_f_one_b(2, 3);
  REQUIRE(s.size() == 2);
  // Stage 0: one warm-up forward, then F/B pairs, then the last backward.
  require_actions(s[0], {F(0), SA(0), F(1), SA(1), RG(0), B(0), F(2), SA(2), RG(1), B(1), RG(2), B(2)});
  // The last stage: no warm-up, each backward right after its forward.
  require_actions(s[1], {RA(0), F(0), B(0), SG(0), RA(1), F(1), B(1), SG(1), RA(2), F(2), B(2), SG(2)});
}

TEST_CASE("schedule: 1f1b with fewer micro-batches than stages warms up with all of them", "[schedule]") {
  const Schedule s = mg::parallel::one_f_one_b(3, 2);
  require_actions(s[0], {F(0), SA(0), F(1), SA(1), RG(0), B(0), RG(1), B(1)});
  require_actions(s[1], {RA(0), F(0), SA(0), RA(1), F(1), SA(1), RG(0), B(0), SG(0), RG(1), B(1), SG(1)});
  require_actions(s[2], {RA(0), F(0), B(0), SG(0), RA(1), F(1), B(1), SG(1)});
}

TEST_CASE("schedule: gpipe with 2 stages and 2 micro-batches, written out by hand", "[schedule]") {
  const Schedule s = mg::parallel::gpipe(2, 2);
  REQUIRE(s.size() == 2);
  require_actions(s[0], {F(0), SA(0), F(1), SA(1), RG(0), B(0), RG(1), B(1)});
  require_actions(s[1], {RA(0), F(0), RA(1), F(1), B(0), SG(0), B(1), SG(1)});
}

TEST_CASE("schedule: one stage has no sends or receives", "[schedule]") {
  require_actions(mg::parallel::gpipe(1, 2)[0], {F(0), F(1), B(0), B(1)});
  require_actions(mg::parallel::one_f_one_b(1, 2)[0], {F(0), B(0), F(1), B(1)});
}

TEST_CASE("schedule: make_schedule picks by name", "[schedule]") {
  CHECK(mg::parallel::make_schedule("gpipe", 3, 4) == mg::parallel::gpipe(3, 4));
  CHECK(mg::parallel::make_schedule("1f1b", 3, 4) == mg::parallel::one_f_one_b(3, 4));
}

TEST_CASE("schedule: action kinds have snake_case names", "[schedule]") {
  CHECK(std::string(mg::parallel::action_kind_name(ActionKind::RecvActivation)) == "recv_activation");
  CHECK(std::string(mg::parallel::action_kind_name(ActionKind::Forward)) == "forward");
  CHECK(std::string(mg::parallel::action_kind_name(ActionKind::SendActivation)) == "send_activation");
  CHECK(std::string(mg::parallel::action_kind_name(ActionKind::RecvGrad)) == "recv_grad");
  CHECK(std::string(mg::parallel::action_kind_name(ActionKind::Backward)) == "backward");
  CHECK(std::string(mg::parallel::action_kind_name(ActionKind::SendGrad)) == "send_grad");
}

TEST_CASE("schedule: every stage forwards and backwards each micro-batch once, forward first, backwards in order",
          "[schedule]") {
  for (const std::string& name : kNames) {
    for (int p = 1; p <= kMaxStages; ++p) {
      for (int m = 1; m <= kMaxMicroBatches; ++m) {
        const Schedule schedule = mg::parallel::make_schedule(name, p, m);
        REQUIRE(int(schedule.size()) == p);
        for (int s = 0; s < p; ++s) {
          INFO(name << " p=" << p << " m=" << m << " stage " << s << ": " << show(schedule[size_t(s)]));
          std::vector<int> forwards(size_t(m), 0), backwards(size_t(m), 0);
          std::vector<int> backward_order;
          for (const Action& a : schedule[size_t(s)]) {
            REQUIRE(a.micro_batch >= 0);
            REQUIRE(a.micro_batch < m);
            if (a.kind == ActionKind::Forward) ++forwards[size_t(a.micro_batch)];
            if (a.kind == ActionKind::Backward) {
              REQUIRE(forwards[size_t(a.micro_batch)] == 1);  // its forward came first
              ++backwards[size_t(a.micro_batch)];
              backward_order.push_back(a.micro_batch);
            }
          }
          CHECK(forwards == std::vector<int>(size_t(m), 1));
          CHECK(backwards == std::vector<int>(size_t(m), 1));
          std::vector<int> in_order(static_cast<size_t>(m));
          std::iota(in_order.begin(), in_order.end(), 0);
          CHECK(backward_order == in_order);
        }
      }
    }
  }
}

TEST_CASE("schedule: a receive directly precedes its forward or backward, a send directly follows", "[schedule]") {
  for (const std::string& name : kNames) {
    for (int p = 1; p <= kMaxStages; ++p) {
      for (int m = 1; m <= kMaxMicroBatches; ++m) {
        const Schedule schedule = mg::parallel::make_schedule(name, p, m);
        for (int s = 0; s < p; ++s) {
          const std::vector<Action>& list = schedule[size_t(s)];
          INFO(name << " p=" << p << " m=" << m << " stage " << s << ": " << show(list));
          const bool first = s == 0, last = s == p - 1;
          // What each stage exchanges: m of each kind it has, none of those it must not have.
          std::map<ActionKind, int> count;
          for (const Action& a : list) ++count[a.kind];
          CHECK(count[ActionKind::RecvActivation] == (first ? 0 : m));
          CHECK(count[ActionKind::SendActivation] == (last ? 0 : m));
          CHECK(count[ActionKind::RecvGrad] == (last ? 0 : m));
          CHECK(count[ActionKind::SendGrad] == (first ? 0 : m));
          for (size_t i = 0; i < list.size(); ++i) {
            const Action& a = list[i];
            const Action* before = i > 0 ? &list[i - 1] : nullptr;
            const Action* after = i + 1 < list.size() ? &list[i + 1] : nullptr;
            switch (a.kind) {
              case ActionKind::RecvActivation:
                REQUIRE(after != nullptr);
                CHECK(*after == F(a.micro_batch));
                break;
              case ActionKind::Forward:
                if (!first) CHECK((before != nullptr && *before == RA(a.micro_batch)));
                if (!last) CHECK((after != nullptr && *after == SA(a.micro_batch)));
                break;
              case ActionKind::SendActivation:
                REQUIRE(before != nullptr);
                CHECK(*before == F(a.micro_batch));
                break;
              case ActionKind::RecvGrad:
                REQUIRE(after != nullptr);
                CHECK(*after == B(a.micro_batch));
                break;
              case ActionKind::Backward:
                if (!last) CHECK((before != nullptr && *before == RG(a.micro_batch)));
                if (!first) CHECK((after != nullptr && *after == SG(a.micro_batch)));
                break;
              case ActionKind::SendGrad:
                REQUIRE(before != nullptr);
                CHECK(*before == B(a.micro_batch));
                break;
            }
          }
        }
      }
    }
  }
}

TEST_CASE("schedule: 1f1b keeps at most p - s micro-batches in flight on stage s, gpipe reaches m on stage 0",
          "[schedule]") {
  for (int p = 1; p <= kMaxStages; ++p) {
    for (int m = 1; m <= kMaxMicroBatches; ++m) {
      INFO("p=" << p << " m=" << m);
      const Schedule one_f_one_b = mg::parallel::one_f_one_b(p, m);
      for (int s = 0; s < p; ++s) {
        const std::vector<int> counts = in_flight(one_f_one_b[size_t(s)]);
        INFO("1f1b stage " << s << ": " << show(one_f_one_b[size_t(s)]));
        for (int n : counts) CHECK(n <= p - s);
        CHECK(*std::max_element(counts.begin(), counts.end()) == std::min(p - s, m));
      }
      const std::vector<int> gpipe_counts = in_flight(mg::parallel::gpipe(p, m)[0]);
      CHECK(*std::max_element(gpipe_counts.begin(), gpipe_counts.end()) == m);
    }
  }
}

TEST_CASE("schedule: simulated, every stage runs its list in order and waits for its neighbours", "[schedule]") {
  for (const std::string& name : kNames) {
    for (int p = 1; p <= kMaxStages; ++p) {
      for (int m = 1; m <= kMaxMicroBatches; ++m) {
        INFO(name << " p=" << p << " m=" << m);
        const Schedule schedule = mg::parallel::make_schedule(name, p, m);
        const Timeline timeline = mg::parallel::simulate(schedule);
        REQUIRE(int(timeline.slots.size()) == p);
        const size_t length = timeline.slots[0].size();
        // Unit time: m forwards and m backwards per stage, p - 1 slots to fill and drain each way.
        CHECK(int(length) == 2 * (m + p - 1));
        for (int s = 0; s < p; ++s) {
          INFO("stage " << s);
          const std::vector<Action>& row = timeline.slots[size_t(s)];
          REQUIRE(row.size() == length);
          // The busy slots, in time order, are the stage's forwards and backwards in list order.
          std::vector<Action> busy, listed;
          for (const Action& a : row)
            if (a.micro_batch >= 0) busy.push_back(a);
          for (const Action& a : schedule[size_t(s)])
            if (is_compute(a)) listed.push_back(a);
          require_actions(busy, listed);

          const std::vector<int> forward = slot_of(timeline, s, ActionKind::Forward, m);
          const std::vector<int> backward = slot_of(timeline, s, ActionKind::Backward, m);
          for (int k = 0; k < m; ++k) {
            INFO("micro-batch " << k);
            CHECK(forward[size_t(k)] < backward[size_t(k)]);
            if (s > 0) CHECK(slot_of(timeline, s - 1, ActionKind::Forward, m)[size_t(k)] < forward[size_t(k)]);
            if (s < p - 1) CHECK(slot_of(timeline, s + 1, ActionKind::Backward, m)[size_t(k)] < backward[size_t(k)]);
          }
        }
      }
    }
  }
}

TEST_CASE("schedule: the simulated bubble is exactly (p-1)/(m+p-1) for both schedules", "[schedule]") {
  for (const std::string& name : kNames) {
    for (int p = 1; p <= kMaxStages; ++p) {
      for (int m = 1; m <= kMaxMicroBatches; ++m) {
        INFO(name << " p=" << p << " m=" << m);
        const Timeline timeline = mg::parallel::simulate(mg::parallel::make_schedule(name, p, m));
        CHECK(timeline.bubble_fraction == double(p - 1) / double(m + p - 1));
      }
    }
  }
}

TEST_CASE("schedule: peak activations on stage 0 are m for gpipe and min(p, m) for 1f1b", "[schedule]") {
  for (int p = 1; p <= kMaxStages; ++p) {
    for (int m = 1; m <= kMaxMicroBatches; ++m) {
      INFO("p=" << p << " m=" << m);
      CHECK(mg::parallel::simulate(mg::parallel::gpipe(p, m)).peak_activations == m);
      CHECK(mg::parallel::simulate(mg::parallel::one_f_one_b(p, m)).peak_activations == std::min(p, m));
    }
  }
}

TEST_CASE("schedule: the drawing of 1f1b with 2 stages and 3 micro-batches", "[schedule]") {
  CHECK(mg::parallel::draw(mg::parallel::simulate(mg::parallel::one_f_one_b(2, 3))) ==
        "stage 0 | F0 F1 .  B0 F2 B1 .  B2\n"
        "stage 1 | .  F0 B0 F1 B1 F2 B2 .\n");
  CHECK(mg::parallel::draw(mg::parallel::simulate(mg::parallel::gpipe(2, 2))) ==
        "stage 0 | F0 F1 .  .  B0 B1\n"
        "stage 1 | .  F0 F1 B0 B1 .\n");
}

TEST_CASE("schedule: drawn cells line up when micro-batch numbers have two digits", "[schedule]") {
  const int p = 3, m = 12;
  const Timeline timeline = mg::parallel::simulate(mg::parallel::gpipe(p, m));
  const std::vector<std::string> rows = split_lines(mg::parallel::draw(timeline));
  REQUIRE(rows.size() == size_t(p));
  const size_t start = std::string("stage 0 | ").size(), width = 3;  // "F11"
  for (int s = 0; s < p; ++s) {
    const std::string& row = rows[size_t(s)];
    INFO(row);
    std::string label = "stage ";
    label += std::to_string(s);
    CHECK(row.rfind(label + " | ", 0) == 0);
    for (size_t t = 0; t < timeline.slots[size_t(s)].size(); ++t) {
      std::string cell = row.substr(start + t * (width + 1), width);
      cell.erase(cell.find_last_not_of(' ') + 1);
      CHECK(cell == cell_text(timeline.slots[size_t(s)][t]));
    }
  }
}

TEST_CASE("schedule: interleaved with 2 stages, 2 micro-batches and 2 chunks, written out by hand", "[schedule]") {
  const Schedule s = mg::parallel::interleaved_one_f_one_b(2, 2, 2);
  REQUIRE(s.size() == 2);
  // Virtual stages 0..3: chunk c of stage s is c * 2 + s. Stage 0 warms up with every forward
  // (2 (p - 1) + (v - 1) p = 4), receiving each input one step ahead, right after its last send.
  require_actions(s[0], {F(0, 0), SA(0, 0), F(1, 0), SA(1, 0), RA(0, 1), F(0, 1), SA(0, 1), RA(1, 1), F(1, 1),
                         SA(1, 1), RG(0, 1), B(0, 1), SG(0, 1), RG(1, 1), B(1, 1), SG(1, 1), RG(0, 0), B(0, 0),
                         RG(1, 0), B(1, 0)});
  // Stage 1 (odd: the previous stage's exchange first) warms up with 2 forwards; its chunk 1 is
  // the last virtual stage, which starts backward from the loss.
  require_actions(s[1], {RA(0, 0), F(0, 0), SA(0, 0), RA(1, 0), F(1, 0), RA(0, 1), SA(1, 0), F(0, 1), B(0, 1),
                         SG(0, 1), RA(1, 1), F(1, 1), B(1, 1), SG(1, 1), RG(0, 0), B(0, 0), SG(0, 0), RG(1, 0),
                         B(1, 0), SG(1, 0)});
  CHECK(mg::parallel::make_schedule("interleaved", 2, 2, 2) == s);
}

TEST_CASE("schedule: interleaved forwards and backwards each micro-batch once per chunk, backwards in order",
          "[schedule]") {
  for (const Interleaved& c : interleaved_cases()) {
    const Schedule schedule = mg::parallel::interleaved_one_f_one_b(c.p, c.m, c.v);
    REQUIRE(int(schedule.size()) == c.p);
    for (int s = 0; s < c.p; ++s) {
      const std::vector<Action>& list = schedule[size_t(s)];
      INFO("p=" << c.p << " v=" << c.v << " m=" << c.m << " stage " << s << ": " << show(list));
      // Per chunk: each micro-batch's forward once, its backward once after it, backwards in
      // micro-batch order; each message once, a receive before the forward or backward that
      // uses it and a send after the one that makes it.
      for (int chunk = 0; chunk < c.v; ++chunk) {
        const int j = chunk * c.p + s, last = c.p * c.v - 1;
        std::map<ActionKind, std::vector<int>> order;  // micro-batches, in list order, per kind
        std::map<std::pair<ActionKind, int>, size_t> at;
        for (size_t i = 0; i < list.size(); ++i) {
          if (list[i].chunk != chunk) continue;
          order[list[i].kind].push_back(list[i].micro_batch);
          REQUIRE(at.emplace(std::make_pair(list[i].kind, list[i].micro_batch), i).second);
        }
        std::vector<int> in_order(static_cast<size_t>(c.m));
        std::iota(in_order.begin(), in_order.end(), 0);
        CHECK(order[ActionKind::Forward] == in_order);
        CHECK(order[ActionKind::Backward] == in_order);
        CHECK(order[ActionKind::RecvActivation].size() == (j == 0 ? 0 : size_t(c.m)));
        CHECK(order[ActionKind::SendActivation].size() == (j == last ? 0 : size_t(c.m)));
        CHECK(order[ActionKind::RecvGrad].size() == (j == last ? 0 : size_t(c.m)));
        CHECK(order[ActionKind::SendGrad].size() == (j == 0 ? 0 : size_t(c.m)));
        for (int k = 0; k < c.m; ++k) {
          const size_t forward = at.at({ActionKind::Forward, k}), backward = at.at({ActionKind::Backward, k});
          CHECK(forward < backward);
          if (j > 0) CHECK(at.at({ActionKind::RecvActivation, k}) < forward);
          if (j < last) CHECK(at.at({ActionKind::SendActivation, k}) > forward);
          if (j < last) CHECK(at.at({ActionKind::RecvGrad, k}) < backward);
          if (j > 0) CHECK(at.at({ActionKind::SendGrad, k}) > backward);
        }
      }
    }
  }
}

TEST_CASE("schedule: interleaved, simulated under rendezvous, has the bubble (p-1)/(v m+p-1)", "[schedule]") {
  for (const Interleaved& c : interleaved_cases()) {
    INFO("p=" << c.p << " v=" << c.v << " m=" << c.m);
    const Schedule schedule = mg::parallel::interleaved_one_f_one_b(c.p, c.m, c.v);
    const Timeline timeline = mg::parallel::simulate(schedule);
    // v m chunk-forwards and as many backwards per stage, p - 1 slots to fill and drain each way.
    CHECK(int(timeline.slots[0].size()) == 2 * (c.v * c.m + c.p - 1));
    CHECK(timeline.bubble_fraction == mg::parallel::formula_bubble(c.p, c.m, c.v));
    CHECK(timeline.bubble_fraction == double(c.p - 1) / double(c.v * c.m + c.p - 1));
    // Stage 0 warms up with 2 (p - 1) + (v - 1) p chunk-forwards and takes one more before its
    // first backward, or holds all v m.
    CHECK(timeline.peak_activations == std::min(c.v * c.p + c.p - 1, c.v * c.m));
    // Every virtual stage's forward after the one before it, its backward after the one after.
    std::map<std::tuple<ActionKind, int, int>, int> slot;  // (kind, virtual stage, micro-batch)
    for (int s = 0; s < c.p; ++s) {
      const std::vector<Action>& row = timeline.slots[size_t(s)];
      for (size_t t = 0; t < row.size(); ++t)
        if (row[t].micro_batch >= 0) slot[{row[t].kind, row[t].chunk * c.p + s, row[t].micro_batch}] = int(t);
    }
    const int n = c.p * c.v;
    REQUIRE(slot.size() == size_t(2 * n * c.m));
    for (int j = 0; j < n; ++j) {
      for (int k = 0; k < c.m; ++k) {
        INFO("virtual stage " << j << ", micro-batch " << k);
        if (j > 0) CHECK(slot.at({ActionKind::Forward, j - 1, k}) < slot.at({ActionKind::Forward, j, k}));
        if (j < n - 1) CHECK(slot.at({ActionKind::Backward, j + 1, k}) < slot.at({ActionKind::Backward, j, k}));
        CHECK(slot.at({ActionKind::Forward, j, k}) < slot.at({ActionKind::Backward, j, k}));
      }
    }
  }
}

TEST_CASE("schedule: the drawing of interleaved with 2 stages, 2 micro-batches and 2 chunks", "[schedule]") {
  CHECK(mg::parallel::draw(mg::parallel::simulate(mg::parallel::interleaved_one_f_one_b(2, 2, 2))) ==
        "stage 0 | F0.0 F1.0 F0.1 F1.1 .    B0.1 .    B1.1 B0.0 B1.0\n"
        "stage 1 | .    F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 B0.0 B1.0 .\n");
}

TEST_CASE("schedule: a send and a receive run as one exchange with two stages, or with one that pairs them too",
          "[schedule]") {
  const auto runs_as_exchange = [](const Schedule& schedule, int s, size_t i) {
    return bool(mg::parallel::find_exchanges(schedule)[size_t(s)][i]);
  };
  // 1F1B, 2 stages: stage 0's send of activation 1 and receive of gradient 0 (both with stage
  // 1) against stage 1's send of gradient 0 and receive of activation 1, adjacent too.
  const Schedule one_f_one_b = mg::parallel::one_f_one_b(2, 3);
  REQUIRE(one_f_one_b[0][3] == SA(1));
  CHECK(runs_as_exchange(one_f_one_b, 0, 3));
  CHECK_FALSE(runs_as_exchange(one_f_one_b, 0, 2));  // a forward and a send
  // GPipe, 2 stages: stage 0's last send and first receive, both with stage 1, which received
  // activation 1 before its backwards (its send of gradient 0 is followed by backward 1): alone.
  const Schedule gpipe = mg::parallel::gpipe(2, 2);
  REQUIRE(gpipe[0][3] == SA(1));
  REQUIRE(gpipe[0][4] == RG(0));
  CHECK_FALSE(runs_as_exchange(gpipe, 0, 3));
  // GPipe, 3 stages: the middle stage sends activation 0 on and receives activation 1 from
  // behind, a ring step.
  const Schedule three = mg::parallel::gpipe(3, 2);
  REQUIRE(three[1][2] == SA(0));
  REQUIRE(three[1][3] == RA(1));
  CHECK(runs_as_exchange(three, 1, 2));
}

TEST_CASE("schedule: a receive that would take another message than its own is an error naming both",
          "[schedule]") {
  // Stage 0 sends activation 1 before activation 0, while stage 1 receives 0 first.
  const Schedule swapped = {
      {F(0), F(1), SA(1), SA(0), RG(0), B(0), RG(1), B(1)},
      {RA(0), F(0), RA(1), F(1), B(0), SG(0), B(1), SG(1)},
  };
  require_error([&] { mg::parallel::simulate(swapped); },
                {"stage 1's recv_activation 0 would take stage 0's send_activation 1 (its header)",
                 "received in the order they are sent"});
}

TEST_CASE("schedule: interleaved needs 2 stages, 2 chunks and whole rounds of micro-batches", "[schedule]") {
  require_error([] { mg::parallel::interleaved_one_f_one_b(1, 2, 2); }, {"stages=1", "chunks=2"});
  require_error([] { mg::parallel::interleaved_one_f_one_b(2, 2, 1); }, {"chunks=1", "one_f_one_b"});
  require_error([] { mg::parallel::interleaved_one_f_one_b(3, 4, 2); },
                {"micro_batches=4 is not a multiple of stages=3"});
  require_error([] { mg::parallel::interleaved_one_f_one_b(2, 0, 2); }, {"micro_batches=0"});
  require_error([] { mg::parallel::make_schedule("gpipe", 2, 2, 2); }, {"gpipe runs 1 chunk per stage", "chunks=2"});
  require_error([] { mg::parallel::make_schedule("interleaved", 2, 2); }, {"chunks=1"});
}

TEST_CASE("schedule: bad stage or micro-batch counts and unknown names are errors naming the values",
          "[schedule]") {
  require_error([] { mg::parallel::gpipe(0, 4); }, {"gpipe", "stages=0", "micro_batches=4"});
  require_error([] { mg::parallel::gpipe(2, 0); }, {"gpipe", "stages=2", "micro_batches=0"});
  require_error([] { mg::parallel::one_f_one_b(-1, 3); }, {"one_f_one_b", "stages=-1"});
  require_error([] { mg::parallel::one_f_one_b(3, -2); }, {"one_f_one_b", "micro_batches=-2"});
  require_error([] { mg::parallel::make_schedule("zero-bubble", 2, 2); },
                {"'zero-bubble'", "gpipe, 1f1b or interleaved"});
  require_error([] { mg::parallel::make_schedule("1f1b", 0, 2); }, {"stages=0"});
}

TEST_CASE("schedule: a stage whose backwards are reversed cannot complete, and the error names it", "[schedule]") {
  // 1f1b, 2 stages, 3 micro-batches, stage 1's backwards (and their sends) in the order 2, 1, 0:
  // stage 1 now wants backward 2 before its own forward 2, and stage 0 waits for it to receive.
  Schedule broken = mg::parallel::one_f_one_b(2, 3);
  for (Action& a : broken[1])
    if (a.kind == ActionKind::Backward || a.kind == ActionKind::SendGrad) a.micro_batch = 2 - a.micro_batch;
  require_actions(broken[1], {RA(0), F(0), B(2), SG(2), RA(1), F(1), B(1), SG(1), RA(2), F(2), B(0), SG(0)});
  // Under rendezvous stage 0's send of activation 1 waits for stage 1 to post its receive.
  require_error([&] { mg::parallel::simulate(broken); },
                {"cannot complete", "stage 1 waits forever at backward 2", "its own forward 2",
                 "stage 0 waits forever at send_activation 1 (for stage 1's recv_activation 1)"});
}

TEST_CASE("schedule: a dependency cycle across stages is reported with both stages", "[schedule]") {
  // Stage 0 wants micro-batch 0's gradient before it forwards micro-batch 1; stage 1 wants
  // micro-batch 1's activation before it backwards micro-batch 0.
  const Schedule cycle = {
      {F(0), SA(0), RG(0), B(0), F(1), SA(1), RG(1), B(1)},
      {RA(0), F(0), RA(1), F(1), B(1), SG(1), B(0), SG(0)},
  };
  require_error([&] { mg::parallel::simulate(cycle); },
                {"stage 0 waits forever at recv_grad 0 (for stage 1's send_grad 0)",
                 "stage 1 waits forever at recv_activation 1 (for stage 0's send_activation 1)"});
}

TEST_CASE("schedule: malformed lists are errors naming the stage", "[schedule]") {
  require_error([] { mg::parallel::simulate({}); }, {"at least one stage"});
  require_error([] { mg::parallel::simulate({{RA(0), F(0), B(0)}}); },
                {"stage 0 waits forever at recv_activation 0 (for stage -1's send_activation 0, but there is no stage -1)"});
  require_error([] { mg::parallel::simulate({{F(0), F(0), B(0)}}); }, {"stage 0 runs forward 0 twice"});
  require_error([] { mg::parallel::simulate({{F(0), B(-1)}}); }, {"stage 0", "backward -1"});
  // A forward on stage 1 whose input stage 0 never computes.
  require_error([] { mg::parallel::simulate({{F(0), B(0)}, {F(1), B(1)}}); },
                {"stage 1 waits forever at forward 1 (for stage 0's forward 1)"});
}

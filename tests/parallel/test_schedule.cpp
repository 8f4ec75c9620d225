// tests/parallel/test_schedule.cpp — the pipeline schedules (parallel/schedule.cpp) as data,
// without a model: hand-written action lists for small cases, the invariants of both schedules
// for p = 1..5 stages and m = 1..12 micro-batches, their run in unit time (dependencies across
// stages, the bubble against (p-1)/(m+p-1), peak activations), the drawing, and the errors.
#include <algorithm>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "parallel/schedule.h"
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

std::string show(const std::vector<Action>& actions) {
  std::string text;
  for (const Action& a : actions) text += std::string(text.empty() ? "" : " ") + mg::parallel::action_kind_name(a.kind) + " " + std::to_string(a.micro_batch);
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

TEST_CASE("schedule: bad stage or micro-batch counts and unknown names are errors naming the values",
          "[schedule]") {
  require_error([] { mg::parallel::gpipe(0, 4); }, {"gpipe", "stages=0", "micro_batches=4"});
  require_error([] { mg::parallel::gpipe(2, 0); }, {"gpipe", "stages=2", "micro_batches=0"});
  require_error([] { mg::parallel::one_f_one_b(-1, 3); }, {"one_f_one_b", "stages=-1"});
  require_error([] { mg::parallel::one_f_one_b(3, -2); }, {"one_f_one_b", "micro_batches=-2"});
  require_error([] { mg::parallel::make_schedule("zero-bubble", 2, 2); }, {"'zero-bubble'", "gpipe", "1f1b"});
  require_error([] { mg::parallel::make_schedule("1f1b", 0, 2); }, {"stages=0"});
}

TEST_CASE("schedule: a stage whose backwards are reversed cannot complete, and the error names it", "[schedule]") {
  // 1f1b, 2 stages, 3 micro-batches, stage 1's backwards (and their sends) in the order 2, 1, 0:
  // stage 1 now wants backward 2 before its own forward 2, and stage 0 waits for gradient 0.
  Schedule broken = mg::parallel::one_f_one_b(2, 3);
  for (Action& a : broken[1])
    if (a.kind == ActionKind::Backward || a.kind == ActionKind::SendGrad) a.micro_batch = 2 - a.micro_batch;
  require_actions(broken[1], {RA(0), F(0), B(2), SG(2), RA(1), F(1), B(1), SG(1), RA(2), F(2), B(0), SG(0)});
  require_error([&] { mg::parallel::simulate(broken); },
                {"cannot complete", "stage 1 waits forever at backward 2", "its own forward 2",
                 "stage 0 waits forever at recv_grad 0"});
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

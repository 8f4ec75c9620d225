// parallel/schedule.h — pipeline schedules as data (DESIGN.md §8).
//
// A pipeline of p stages runs m micro-batches. A schedule says, for every stage, the ordered list
// of what it does: receive micro-batch k's activation from the previous stage, run its forward,
// send the result on; receive the gradient of its output from the next stage, run its backward,
// send the gradient of its input back. The first stage receives no activation (it reads the
// batch) and sends no gradient; the last sends no activation (it computes the loss) and receives
// no gradient (its backward starts from the loss).
//
//   gpipe(p, m):        every stage runs all m forwards, then all m backwards (in micro-batch
//                       order): simple, but stage s holds m micro-batches' activations at once.
//   one_f_one_b(p, m):  PipeDream-flush. Stage s runs min(p - s - 1, m) warm-up forwards, then
//                       alternates one forward and one backward, then the remaining backwards:
//                       at most p - s micro-batches in flight on stage s, whatever m is.
// Both run the backwards of a stage in micro-batch order 0, 1, ..., m - 1, so gradients
// accumulate in the order of `--grad-accum m` on one device.
//
// simulate() runs a schedule in unit time (a forward or a backward takes one slot; sends and
// receives take none) to draw it and to give the bubble: the fraction of stage-slots idle,
// (p - 1) / (m + p - 1) for both schedules.
#pragma once

#include <string>
#include <vector>

namespace mg::parallel {

enum class ActionKind { RecvActivation, Forward, SendActivation, RecvGrad, Backward, SendGrad };
const char* action_kind_name(ActionKind kind);  // "recv_activation", "forward", ...

struct Action {
  ActionKind kind;
  int micro_batch;
  bool operator==(const Action&) const = default;
};

// schedule[s] = stage s's actions, in order.
using Schedule = std::vector<std::vector<Action>>;

// Throw naming the values when p < 1 or m < 1.
Schedule gpipe(int stages, int micro_batches);
Schedule one_f_one_b(int stages, int micro_batches);
// "gpipe" or "1f1b"; throws naming the name otherwise.
Schedule make_schedule(const std::string& name, int stages, int micro_batches);

// The schedule run in unit time.
struct Timeline {
  // slots[s][t]: the forward or backward stage s runs in slot t, or micro_batch -1 when idle.
  std::vector<std::vector<Action>> slots;
  double bubble_fraction = 0;   // idle stage-slots / all stage-slots
  int peak_activations = 0;     // most micro-batches forwarded but not yet backwarded, on stage 0
};
// Throws when the schedule cannot complete (a stage waits forever), naming the stage and action.
Timeline simulate(const Schedule& schedule);
// The timeline as text: one row per stage, one column per slot, "F3" / "B3" / "." cells.
std::string draw(const Timeline& timeline);

}  // namespace mg::parallel

// parallel/pipeline/schedule.h — pipeline schedules as data (docs/design.md).
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
//   interleaved_one_f_one_b(p, m, v):
//                       Megatron-LM's interleaved 1F1B. The model is cut into p v pieces, the
//                       virtual stages; stage s runs v of them, its chunks: chunk c is virtual
//                       stage j = c p + s, so a micro-batch goes round the stages v times (the
//                       last stage sends chunk c's output to the first stage's chunk c + 1).
//                       Stage s takes its forwards in rounds of p micro-batches through chunks
//                       0..v-1 (chunk 0 for micro-batches 0..p-1, chunk 1 for the same ones,
//                       ..., then the next p), its backwards the same way with the chunks in
//                       reverse, warms up with 2 (p - s - 1) + (v - 1) p forwards and then
//                       alternates (its messages: "Messages" below). A forward or backward of
//                       a chunk is 1/v of the stage's work, so the fill and drain shrink v
//                       times: the bubble is (p - 1) / (v m + p - 1), while stage 0 holds
//                       2 p - 1 + (v - 1) p chunks' activations, p + (p - 1) / v micro-batches'
//                       worth (1F1B: p). Needs p >= 2 and m a multiple of p.
// All three run the backwards of each chunk in micro-batch order 0, 1, ..., m - 1, so every
// parameter's gradients accumulate in the order of `--grad-accum m` on one device.
//
// Messages. Stages talk through Communicator send/recv (the runtime: pipeline.h), which carry no
// tag: between two stages the messages arrive in the order they were sent, each taken by the
// next receive posted, so one stage's sends to another must come in the order of the other's
// receives from it. A tensor goes as two messages, a header (dtype, shape) and then the data.
// Over NCCL a send completes only once its receiver has posted the matching receive (a
// rendezvous), so the order of sends and receives can deadlock where buffered sends would not.
// find_exchanges() says which send and receive, adjacent in a list, the runtime issues
// together as one Communicator::send_recv (headers, then data): both halves in flight at once,
// as Megatron batches its isend/irecv. GPipe and 1F1B receive right before the forward or
// backward that needs the message and send right after the one that made it; the interleaved
// schedule receives one step ahead, as Megatron does, so that its sends pair with receives
// (otherwise its ring of stages deadlocks under rendezvous: every stage blocked in a send to the
// next, the first one's receive from the last not yet posted).
//
// simulate() runs a schedule in unit time (a forward or a backward of a chunk takes one slot;
// sends and receives take none) to draw it and to give the bubble: the fraction of stage-slots
// idle, (p - 1) / (v m + p - 1) for the three schedules (v = 1 for GPipe and 1F1B). It runs the
// messages as the runtime does under rendezvous (headers and data, exchanges, a send done once
// its receive is posted), the strictest of the backends (the buffered ones only wait less), so
// a schedule that completes here neither deadlocks nor mixes up messages on any of them: the
// tests run it for every schedule over a range of p, m and v.
#pragma once

#include <string>
#include <vector>

namespace mg::parallel {

enum class ActionKind { RecvActivation, Forward, SendActivation, RecvGrad, Backward, SendGrad };
const char* action_kind_name(ActionKind kind);  // "recv_activation", "forward", ...
inline bool is_send(ActionKind kind) { return kind == ActionKind::SendActivation || kind == ActionKind::SendGrad; }
inline bool is_recv(ActionKind kind) { return kind == ActionKind::RecvActivation || kind == ActionKind::RecvGrad; }

struct Action {
  ActionKind kind;
  int micro_batch;
  int chunk = 0;  // which of the stage's model chunks: virtual stage chunk * p + stage
  bool operator==(const Action&) const = default;
};

// schedule[s] = stage s's actions, in order.
using Schedule = std::vector<std::vector<Action>>;

// Throw naming the values when p < 1 or m < 1.
Schedule gpipe(int stages, int micro_batches);
Schedule one_f_one_b(int stages, int micro_batches);
// Also throws unless stages >= 2, chunks >= 2 and micro_batches is a multiple of stages.
Schedule interleaved_one_f_one_b(int stages, int micro_batches, int chunks);
// "gpipe" or "1f1b" (chunks 1), or "interleaved" (chunks >= 2); throws naming the name or
// the chunks otherwise.
Schedule make_schedule(const std::string& name, int stages, int micro_batches, int chunks = 1);

// Most forwards not yet backwarded along one stage's actions (or a timeline's slots): the
// micro-batches (or micro-batch and chunk pairs) whose activations it holds at once. GPipe: m;
// 1F1B: min(p - s, m) on stage s.
int peak_in_flight(const std::vector<Action>& actions);

// The formula's bubble: (p - 1) / (v m + p - 1).
double formula_bubble(int stages, int micro_batches, int chunks = 1);

// The other end of stage s's send or receive `a`: activations go from virtual stage j to
// j + 1, gradients from j + 1 to j. `virtual_stage` may be -1 or p v, one that does not exist
// (stage is then -1 or p); `action` is the peer's receive of what `a` sends, or its send of
// what `a` receives.
struct MessageEnd {
  int virtual_stage;
  int stage;
  Action action;
};
MessageEnd other_end(const Action& a, int stage, int stages, int chunks);

// exchanges[s][i]: whether the runtime runs stage s's actions i and i + 1 as one exchange: a send
// and then a receive, either with two different stages (a ring step: send on, receive from
// behind) or with the same one whose list has the counterparts adjacent too (its send of what
// this stage receives, then its receive of what this stage sends). Not against a peer that
// receives and sends one after the other: the exchange's headers would wait for the peer's
// send, which waits for the data the exchange has yet to send.
std::vector<std::vector<bool>> find_exchanges(const Schedule& schedule, int chunks = 1);

// The schedule run in unit time.
struct Timeline {
  // slots[s][t]: the forward or backward stage s runs in slot t, or micro_batch -1 when idle.
  std::vector<std::vector<Action>> slots;
  double bubble_fraction = 0;   // idle stage-slots / all stage-slots
  // Most forwards not yet backwarded on stage 0: micro-batches, or (micro-batch, chunk) pairs.
  int peak_activations = 0;
};
// Throws when the schedule cannot complete (a stage waits forever), naming the stage and action,
// and when a receive would take another message than its own (see "Messages").
Timeline simulate(const Schedule& schedule);
// The timeline as text: one row per stage, one column per slot, "F3" / "B3" / "." cells; with
// chunks, "F3.1" is micro-batch 3's forward through chunk 1.
std::string draw(const Timeline& timeline);
// The timeline as an SVG picture (schedule_svg.cpp): stages as rows, slots as columns, a box per
// forward (blue) and backward (orange), lighter for later chunks, idle slots (the bubble) grey;
// `title` above, a legend below. Each box carries data-stage, data-slot, data-kind
// ("forward", "backward", "idle"), data-micro-batch and data-chunk, so a reader (and the test)
// can check it against the schedule.
std::string draw_svg(const Timeline& timeline, const std::string& title);

}  // namespace mg::parallel

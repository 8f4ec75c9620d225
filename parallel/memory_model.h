// parallel/memory_model.h — what one rank of data parallelism holds of the training state between
// steps, and at its peak during one, per mode: the accounts of data/ddp.h and data/zero.h as formulas, in
// the terms of ZeRO's paper (Psi parameters, K optimizer state values per parameter: 1 for SGD
// with momentum, 2 for Adam), for float32 values unless told. tests/parallel/test_memory_model.cpp
// holds them against mg::memory_stats; bench_ddp prints the state beside its formula
// (docs/memory-model.md).
//
//            parameters        gradients                    optimizer state
//   ddp      Psi               Psi (the buckets)            K Psi
//   zero1    Psi               Psi + Psi/N (flat buffers,    K Psi/N
//                                the reduced shard)
//   zero2    Psi               Psi/N + U                    K Psi/N
//   zero3    Psi/N             Psi/N + U                    K Psi/N
//   tp       Psi_r             Psi_r                        K Psi_r
//
// Psi_r: a tensor-parallel rank's parameters, its shards of the split layers and the layers that
// stay whole (for an MLP, tensor_parallel_mlp_params). U: stages 2 and 3 keep the gradient buffer
// of their first unit (in reduction order: the last layers) ready for the next backward. Each
// term is in values; times the bytes of a value. Not counted: padding (each unit rounds up to a
// multiple of N values), the allocator's rounding and Adam's step counts.
//
// During a step a rank holds more: peak_bytes adds the larger of two phases to the state.
//   Backward at its peak: the activations autograd keeps (for an MLP, mlp_activation_bytes), and
//     for zero3 the units around the widest layer: that unit gathered with its gradient buffer, and
//     the unit reduced before it, gathered or with its gradients in flight (kUnitsInFlight): at
//     most 2 (W + W') values, W the widest unit's and W' its predecessor's; which of the two the
//     neighbour holds at the peak depends on the batch, so the bound can exceed the peak by W'.
//   The gradients' communication: ddp's ring all-reduce receives a chunk of the largest bucket
//     (bucket / N + 1 values, N > 1) while backward still holds its input batch; zero1's step()
//     reduce-scatters into and all-gathers from a chunk of Psi / N values, after backward; zero2's
//     reduce-scatter (Psi / N) may run before backward returns, with the input, or after it: a
//     bound again (the progress thread's timing decides), by up to the input.
//   tp: backward's activations (for an MLP, mlp_activation_bytes of tp_mlp_widths; every rank runs the whole
//     batch), or backward adding its largest gradient into the parameter's .grad: the gradient
//     made apart first, while its layer's output gradient and the input are held. The all-reduces
//     (g's in forward; f's in backward only where the input needs a gradient, which a first
//     layer's does not) move one layer's output while fewer activations are held (measured).
// The gradients are counted whole through the step, as DDP's buckets hold them, or zero_grad(false);
// with zero_grad's default (set_to_none) a rank without buckets makes them as backward reaches
// their layers and stores them without adding, so its peak is lower, by at most the gradients
// backward has not reached at its peak.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mg::parallel {

struct StateBytes {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer = 0;
  int64_t total() const { return parameters + gradients + optimizer; }
};

// mode: "ddp", "zero1", "zero2", "zero3" or "tp"; first_unit: U above, in values. params: Psi, or
// for tp Psi_r, the rank's.
StateBytes state_bytes(const std::string& mode, int64_t params, int ranks, int state_per_param,
                       int64_t first_unit = 0, int64_t value_bytes = 4);

// What a step of one rank handles besides the state, for peak_bytes.
struct StepShape {
  int64_t activations = 0;     // bytes autograd keeps at backward's peak (mlp_activation_bytes)
  int64_t input = 0;           // bytes of the rank's input batch and its labels
  int64_t largest_bucket = 0;  // ddp: values of its largest gradient bucket
  int64_t widest_unit = 0;     // zero3: values of its widest unit (W above)
  int64_t unit_before = 0;     // zero3: values of the unit reduced just before it (W'; 0 if none)
  int64_t accumulating = 0;    // tp: values of the largest gradient and of its layer's output gradient
};

// The most one rank holds during a step, in bytes: the state plus the larger phase above.
int64_t peak_bytes(const std::string& mode, int64_t params, int ranks, int state_per_param, int64_t first_unit,
                   const StepShape& step, int64_t value_bytes = 4);

// The bytes autograd keeps at backward's peak for nn::mlp(widths) (Linear and ReLU, no ReLU after
// the last layer) on `rows` rows, with cross-entropy against Int64 labels, and the input and the
// logits held by the caller. Autograd keeps what backward reads (tape.h): a Linear its input, a
// ReLU its output, so a hidden layer keeps its ReLU's output (its Linear's is gone once the ReLU
// ran). Backward frees each layer's tensors as it passes them; its peak is at the ReLU of some
// hidden layer l, where it holds the input (w_0 per row), the ReLU outputs of layers 1..l (w_j
// each), the two gradients of layer l in flight (2 w_l), the logits (w_L) and the label:
// rows (w_0 + (w_1 + ... + w_l) + 2 w_l + w_L) values and rows Int64s, l the layer that makes it
// largest.
int64_t mlp_activation_bytes(const std::vector<int64_t>& widths, int64_t rows, int64_t value_bytes = 4);

// A lower bound on the bytes autograd keeps for backward at the end of a GPT's forward (nn/gpt.h,
// dropout 0) over `rows` sequences of `context` tokens: all of it is alive then, so a step's peak
// is at least this. Per position, each of the n_layer blocks keeps 16 C values (C = n_embd): its
// input and ln_1's output (C each), q, k and v (3 C, views of c_attn's output), the attention's
// output and the residual sum (C each), ln_2's output (C), c_fc's output and gelu's (4 C each);
// with `recompute` only its input (C). Then ln_f's input and output (2 C) and the logits (vocab).
// value_bytes: 4 in float32; 2 under bf16 or fp16 autocast, a lower bound (some stay float32).
// Saturates at INT64_MAX instead of overflowing (a preflight meets absurd sizes).
int64_t gpt_activation_bytes(int64_t rows, int64_t context, int64_t n_layer, int64_t n_embd, int64_t vocab,
                             bool recompute, int64_t value_bytes = 4);

// nn::mlp(widths) under tensor_parallel_mlp on `ranks` ranks (widths' split features divisible by
// them): the parameters one rank holds (Psi_r: each Linear pair's column shard, its row shard and
// the row layer's whole bias, a last odd Linear whole), and the widths the rank's layers compute
// (each column-parallel layer's output width / ranks; the others whole). mlp_activation_bytes of
// those widths counts what a rank keeps for backward on the whole batch: the row-parallel layer's
// partial products and their all-reduced sum are inputs of nodes that read no values (the
// all-reduce's, the bias add's), which keep only their shells, so a rank keeps per layer what one
// device does.
int64_t tensor_parallel_mlp_params(const std::vector<int64_t>& widths, int ranks);
std::vector<int64_t> tp_mlp_widths(const std::vector<int64_t>& widths, int ranks);

// A pipeline stage (parallel/pipeline/pipeline.h, GPipe or 1F1B) of nn::mlp(widths) holding its Linear
// layers [first, last) (layer l maps widths[l] to widths[l + 1], a ReLU after each but the
// model's last), on micro-batches of `rows`: a bound on what a step adds to the stage's state (the
// gradients kept between steps), at most two of its widest activations above the peak (tests/
// parallel/test_memory_model.cpp). In values, times rows unless told:
//   in_flight micro-batches' activations (pipeline/schedule.h's peak_in_flight of the stage's actions:
//     GPipe m, 1F1B min(p - s, m)), each the stage's input (a received leaf; stage 0's is a view
//     of the batch), its ReLU outputs (w each) and the last stage's logits;
//   plus backward's peak, where it adds a layer l's weight gradient into .grad: that gradient
//     made apart (w_l w_{l+1}, not times rows), the gradients of the ReLU's and the Linear's
//     outputs (w_{l+1} each; the logits' alone after the model's last layer) and of the input
//     (w_l, none for the model's first layer), counted as alive together (the first may go before
//     the last is made); less, on the last stage, whose backward starts from
//     the loss and frees as it goes, that micro-batch's outputs of layers l on (a stage before it
//     keeps its output for backward until the stage's backward ends); the largest over its l;
//   plus, where the schedule runs sends and receives as exchanges (1F1B's steady state), the
//     messages received early: an activation (w_first) and a gradient (w_last).
// Whether they are there at the peak depends on the timing (and GPipe's exchanges, a send on and
// a receive from behind, may hold none at backward's peak): with them, a bound.
int64_t pipeline_stage_step_bytes(const std::vector<int64_t>& widths, size_t first, size_t last, int64_t rows,
                                  int in_flight, bool exchanges, int64_t value_bytes = 4);

}  // namespace mg::parallel

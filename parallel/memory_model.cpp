// parallel/memory_model.cpp — the table of parallel/memory_model.h.
#include "multigrad/parallel/memory_model.h"

#include <algorithm>
#include <limits>

#include "multigrad/core/error.h"

namespace mg::parallel {

int64_t gpt_activation_bytes(int64_t rows, int64_t context, int64_t n_layer, int64_t n_embd, int64_t vocab,
                             bool recompute, int64_t value_bytes) {
  const long double per_block = recompute ? 1.0L : 16.0L;
  const long double per_position =
      per_block * (long double)n_layer * (long double)n_embd + 2.0L * (long double)n_embd + (long double)vocab;
  const long double bytes = (long double)rows * (long double)context * per_position * (long double)value_bytes;
  return bytes >= (long double)std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::max()
                                                                    : int64_t(bytes);
}

StateBytes state_bytes(const std::string& mode, int64_t params, int ranks, int state_per_param, int64_t first_unit,
                       int64_t value_bytes) {
  MG_CHECK(ranks >= 1 && params >= 0 && state_per_param >= 0, "state_bytes: ", params, " parameters on ", ranks,
           " ranks with ", state_per_param, " state values each");
  const int64_t shard = (params + ranks - 1) / ranks;
  const int64_t k = state_per_param;
  StateBytes v;
  if (mode == "ddp") {
    v = {params, params, k * params};
  } else if (mode == "zero1") {
    v = {params, params + shard, k * shard};
  } else if (mode == "zero2") {
    v = {params, shard + first_unit, k * shard};
  } else if (mode == "zero3") {
    v = {shard, shard + first_unit, k * shard};
  } else {
    MG_CHECK(mode == "tp", "state_bytes: no mode '", mode, "' (ddp, zero1, zero2, zero3, tp)");
    v = {params, params, k * params};  // the rank's own parameters
  }
  return {v.parameters * value_bytes, v.gradients * value_bytes, v.optimizer * value_bytes};
}

int64_t peak_bytes(const std::string& mode, int64_t params, int ranks, int state_per_param, int64_t first_unit,
                   const StepShape& step, int64_t value_bytes) {
  const int64_t state = state_bytes(mode, params, ranks, state_per_param, first_unit, value_bytes).total();
  const int64_t chunk = (params + ranks - 1) / ranks * value_bytes;
  // Backward's peak, and the other phase: the gradients' communication (tp: one added into .grad).
  int64_t backward = step.activations, other = 0;
  if (mode == "ddp") {
    other = ranks > 1 ? step.input + (step.largest_bucket / ranks + 1) * value_bytes : 0;
  } else if (mode == "zero1") {
    other = chunk;
  } else if (mode == "zero2") {
    other = step.input + chunk;
  } else if (mode == "zero3") {
    backward += 2 * (step.widest_unit + step.unit_before) * value_bytes;
  } else {  // tp (state_bytes checked the name)
    other = step.input + step.accumulating * value_bytes;
  }
  return state + std::max(backward, other);
}

int64_t mlp_activation_bytes(const std::vector<int64_t>& widths, int64_t rows, int64_t value_bytes) {
  MG_CHECK(widths.size() >= 2 && rows >= 0, "mlp_activation_bytes: expected at least 2 widths and rows >= 0, got ",
           widths.size(), " widths and ", rows, " rows");
  constexpr int64_t kLabelBytes = 8;  // Int64
  int64_t held = 0, most = 0;        // per row: the outputs of layers 1..l, and the largest total
  for (size_t l = 1; l + 1 < widths.size(); ++l) {
    held += widths[l];
    most = std::max(most, held + 2 * widths[l]);
  }
  return rows * ((widths.front() + most + widths.back()) * value_bytes + kLabelBytes);
}

namespace {

// Calls fn(l, column, whole) for each Linear of nn::mlp(widths) as tensor_parallel_mlp splits it:
// layer l maps widths[l] to widths[l + 1]; column: it opens a pair (else it closes one); whole: it
// is a last odd layer, not split.
template <class Fn>
void for_each_tp_linear(const std::vector<int64_t>& widths, int ranks, Fn fn) {
  MG_CHECK(widths.size() >= 2 && ranks >= 1, "tensor-parallel MLP: expected at least 2 widths and a rank, got ",
           widths.size(), " widths and ", ranks, " ranks");
  const size_t layers = widths.size() - 1;
  for (size_t l = 0; l < layers; ++l) {
    const bool column = l % 2 == 0, whole = column && l + 1 == layers;
    MG_CHECK(whole || widths[column ? l + 1 : l] % ranks == 0, "tensor-parallel MLP: ",
             widths[column ? l + 1 : l], " features do not split among ", ranks, " ranks");
    fn(l, column, whole);
  }
}

}  // namespace

int64_t tensor_parallel_mlp_params(const std::vector<int64_t>& widths, int ranks) {
  int64_t params = 0;
  for_each_tp_linear(widths, ranks, [&](size_t l, bool column, bool whole) {
    const int64_t weight = widths[l] * widths[l + 1], bias = widths[l + 1];
    params += whole ? weight + bias : column ? (weight + bias) / ranks : weight / ranks + bias;
  });
  return params;
}

std::vector<int64_t> tp_mlp_widths(const std::vector<int64_t>& widths, int ranks) {
  std::vector<int64_t> out = widths;
  for_each_tp_linear(widths, ranks, [&](size_t l, bool column, bool whole) {
    if (column && !whole) out[l + 1] /= ranks;
  });
  return out;
}

int64_t pipeline_stage_step_bytes(const std::vector<int64_t>& widths, size_t first, size_t last, int64_t rows,
                                  int in_flight, bool exchanges, int64_t value_bytes) {
  MG_CHECK(first < last && last < widths.size() && rows >= 0 && in_flight >= 0, "pipeline_stage_step_bytes: ",
           "layers [", first, ", ", last, ") of an MLP of ", widths.size() - 1, " layers, ", rows, " rows, ",
           in_flight, " micro-batches in flight");
  const size_t layers = widths.size() - 1;
  const bool last_stage = last == layers;
  // Per row: what layer l keeps of a micro-batch (its ReLU's output, or the logits), and the
  // gradients its backward may hold at once, counted as if all were alive together: its ReLU's two
  // (or the logits') and its input's.
  const auto kept = [&](size_t l) { return widths[l + 1]; };
  const auto gradients = [&](size_t l) {
    return (l + 1 == layers ? widths[l + 1] : 2 * widths[l + 1]) + (l > 0 ? widths[l] : 0);
  };
  int64_t per_micro_batch = first > 0 ? widths[first] : 0;
  for (size_t l = first; l < last; ++l) per_micro_batch += kept(l);
  int64_t backward = 0, freed = 0;  // freed: the last stage's outputs of layers l on, per row
  for (size_t l = last; l-- > first;) {
    if (last_stage) freed += kept(l);
    backward = std::max(backward, widths[l] * widths[l + 1] + rows * (gradients(l) - freed));
  }
  const int64_t message = exchanges ? (first > 0 ? widths[first] : 0) + (last_stage ? 0 : widths[last]) : 0;
  return (in_flight * rows * per_micro_batch + backward + rows * message) * value_bytes;
}

}  // namespace mg::parallel

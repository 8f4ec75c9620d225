// parallel/memory_model.cpp — the table of parallel/memory_model.h.
#include "parallel/memory_model.h"

#include <algorithm>

#include "core/error.h"

namespace mg::parallel {

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
  } else {
    MG_CHECK(mode == "zero3", "state_bytes: no mode '", mode, "' (ddp, zero1, zero2, zero3)");
    v = {shard, shard + first_unit, k * shard};
  }
  return {v.parameters * value_bytes, v.gradients * value_bytes, v.optimizer * value_bytes};
}

int64_t peak_bytes(const std::string& mode, int64_t params, int ranks, int state_per_param, int64_t first_unit,
                   const StepShape& step, int64_t value_bytes) {
  const int64_t state = state_bytes(mode, params, ranks, state_per_param, first_unit, value_bytes).total();
  const int64_t chunk = (params + ranks - 1) / ranks * value_bytes;
  int64_t backward = step.activations, communication = 0;
  if (mode == "ddp") {
    communication = ranks > 1 ? step.input + (step.largest_bucket / ranks + 1) * value_bytes : 0;
  } else if (mode == "zero1") {
    communication = chunk;
  } else if (mode == "zero2") {
    communication = step.input + chunk;
  } else {  // zero3 (state_bytes checked the name)
    backward += 2 * (step.widest_unit + step.unit_before) * value_bytes;
  }
  return state + std::max(backward, communication);
}

int64_t mlp_activation_bytes(const std::vector<int64_t>& widths, int64_t rows, int64_t value_bytes) {
  MG_CHECK(widths.size() >= 2 && rows >= 0, "mlp_activation_bytes: expected at least 2 widths and rows >= 0, got ",
           widths.size(), " widths and ", rows, " rows");
  constexpr int64_t kLabelBytes = 8;  // Int64
  int64_t held = 0, most = 0;        // per row: the outputs of layers 1..l, and the largest total
  for (size_t l = 1; l + 1 < widths.size(); ++l) {
    held += 2 * widths[l];
    most = std::max(most, held + 2 * widths[l]);
  }
  return rows * ((widths.front() + most + widths.back()) * value_bytes + kLabelBytes);
}

}  // namespace mg::parallel

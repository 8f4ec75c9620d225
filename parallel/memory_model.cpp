// parallel/memory_model.cpp — the table of parallel/memory_model.h.
#include "parallel/memory_model.h"

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

}  // namespace mg::parallel

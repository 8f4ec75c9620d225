// parallel/data/buckets.h — how DDP's buckets and ZeRO's units are cut from the parameters.
#pragma once

#include <cstddef>
#include <vector>

#include "multigrad/core/tensor.h"

namespace mg::parallel {

// The parameters' indices in reverse registration order (backward produces the last layers'
// gradients first), in consecutive groups: a group closes when the next parameter would take it
// past its cap in bytes (first_cap_mb for the first group, so that communication can start
// early; cap_mb after) or has another dtype. A parameter larger than the cap has a group of its
// own.
std::vector<std::vector<size_t>> reverse_buckets(const std::vector<Tensor>& params, double first_cap_mb,
                                                 double cap_mb);

}  // namespace mg::parallel

// parallel/data/buckets.h — the flat buffers of DDP and ZeRO: which parameters share one, and
// where each one's elements lie in it. DDP's buckets and ZeRO's units are one layout: ZeRO-1/2
// cut the parameters as DDP does (reverse_buckets) and reduce-scatter each buffer where DDP
// all-reduces it; ZeRO-3 takes a buffer per layer.
#pragma once

#include <cstddef>
#include <cstdint>
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

// One flat buffer's layout: its parameters (indices, in the order they fill it), each one's
// first element, and its length in elements, padding included.
struct FlatLayout {
  std::vector<size_t> params;
  std::vector<int64_t> offsets;
  int64_t numel = 0;

  // Member j's elements (as a 1-D view) of `flat`, a buffer laid out so; `param` is that member.
  Tensor slot(const Tensor& flat, size_t j, const Tensor& param) const {
    return flat.slice(0, offsets[j], offsets[j] + param.numel());
  }
};

// Lays each group of `params` out as one flat buffer: every member starting at a multiple of
// align_bytes (DDP aligns its slots; ZeRO packs them, 1), the whole padded with zeros to a
// multiple of `multiple` elements (ZeRO: the ranks, so that it reduce-scatters into equal shards).
FlatLayout flat_layout(const std::vector<Tensor>& params, const std::vector<size_t>& group, int64_t align_bytes,
                       int64_t multiple);

}  // namespace mg::parallel

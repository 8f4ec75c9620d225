// core/cuda_allocator.h — internal: the caching allocator of each CUDA device
// (core/cuda_allocator.cpp); reach it through allocator_for(device).
#pragma once

#include "multigrad/core/allocator.h"
#include "multigrad/core/device.h"

namespace mg::detail {

// The caching allocator of an existing logical CUDA device; created on first use, never destroyed.
Allocator& cuda_caching_allocator(const Device& device);

}  // namespace mg::detail

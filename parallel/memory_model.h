// parallel/memory_model.h — what one rank of data parallelism holds of the training state between
// steps, per mode: the accounts of ddp.h and zero.h as formulas, in the terms of ZeRO's paper
// (Psi parameters, K optimizer state values per parameter: 1 for SGD with momentum, 2 for Adam),
// for float32 values unless told. tests/parallel/test_memory_model.cpp holds them against
// mg::memory_stats; bench_ddp prints both for README's table.
//
//            parameters        gradients                    optimizer state
//   ddp      Psi               Psi (the buckets)            K Psi
//   zero1    Psi               Psi + Psi/N (flat buffers,    K Psi/N
//                                the reduced shard)
//   zero2    Psi               Psi/N + U                    K Psi/N
//   zero3    Psi/N             Psi/N + U                    K Psi/N
//
// U: stages 2 and 3 keep the gradient buffer of their first unit (in reduction order: the last
// layers) ready for the next backward. Each term is in values; times the bytes of a value. Not
// counted: padding (each unit rounds up to a multiple of N values), the allocator's rounding,
// Adam's step counts, and what a step holds only while it runs (activations, gradients in
// flight, stage 3's gathered layers, the chunk stages 1 and 2 all-gather from).
#pragma once

#include <cstdint>
#include <string>

namespace mg::parallel {

struct StateBytes {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer = 0;
  int64_t total() const { return parameters + gradients + optimizer; }
};

// mode: "ddp", "zero1", "zero2" or "zero3"; first_unit: U above, in values.
StateBytes state_bytes(const std::string& mode, int64_t params, int ranks, int state_per_param,
                       int64_t first_unit = 0, int64_t value_bytes = 4);

}  // namespace mg::parallel

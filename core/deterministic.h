// core/deterministic.h — the process-wide deterministic mode (docs/design.md).
//
// With set_deterministic(true) (CLI --deterministic), every result depends on the inputs and
// shapes only, never on thread counts or timing: collectives reduce in rank order
// (parallel/comm/local.h), and CPU GEMMs are cut into fixed blocks (kernels/cpu/blas.h), so training
// on N devices reproduces one device running the same micro-batches bit for bit. It costs speed.
#pragma once

namespace mg {

void set_deterministic(bool on);
bool is_deterministic();

}  // namespace mg

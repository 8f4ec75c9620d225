#!/usr/bin/env bash
# ThreadSanitizer over the host threads of the CUDA code: the simulated CUDA configuration
# (sim/README.md) built with -fsanitize=thread into build-sim-tsan/, then the cuda tests whose
# work crosses threads: streams and events (each simulated stream is its own thread), copies
# between devices, the DataLoader's copy stream and workers, the local backend and NCCL ranks on
# threads, DDP and pipelines. A data race is a report, and every report fails its test.
#
# Not in `make test`: a second sanitized build of the whole library (about 15 minutes on 2
# cores) for tests that build-sim already runs under ASan. Run it after changing core/stream*,
# core/*allocator*, data/dataloader.cpp, parallel/ or sim/.
#
# usage: scripts/tsan-sim.sh [ctest arguments, e.g. -R DataLoader]
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
dir=${TSAN_DIR:-build-sim-tsan}

cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMG_CUDA_SIM=ON \
  -DMG_SANITIZE=thread -DMG_BUILD_BENCHMARKS=OFF
cmake --build "$dir" -j "$(nproc)" --target mg_cuda_tests

# libgomp is not built with ThreadSanitizer, so the synchronisation inside OpenMP's parallel
# regions (the CPU reference ops) is invisible to it and would be reported as races: one thread
# for all CPU devices (MG_CPU_THREADS, core/device.cpp), so no region starts a second one. The
# threads under test (streams, workers, ranks) are std::threads.
export MG_CPU_THREADS=1 OMP_NUM_THREADS=1
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
threads='stream|event|pinned|copies|threads|DataLoader|logical|local|ddp|1f1b|nccl'
if [[ $# -eq 0 ]]; then set -- -R "$threads"; fi
ctest --test-dir "$dir" -L cuda --output-on-failure -j "$(nproc)" "$@"

#!/usr/bin/env bash
# multigrad against PyTorch on the CPU (issue 7): the workloads of benchmarks/bench_workloads.cpp
# beside their twin benchmarks/torch/workloads.py, run alternately (multigrad, torch, multigrad,
# torch, ... for `rounds` rounds per workload) so that load from elsewhere on a shared machine
# falls on both sides alike. Each side's ms is the median of its rounds' medians. Prints
#   <workload> multigrad_ms=<x> torch_ms=<y> ratio=<x/y>
# and writes a markdown table to benchmarks/results/cpu-<UTC date>.md with the machine (nproc,
# CPU model), the PyTorch version and its BLAS/oneDNN configuration, and the commit.
#
# Both sides get the same threads: nproc, through OMP_NUM_THREADS (multigrad's OpenMP and
# OpenBLAS) and torch.set_num_threads; multigrad's own budget (hardware threads / CPU devices) is
# checked against it. ddp2_mlp_step splits them over its 2 ranks (multigrad: 2 CPU devices with
# hardware threads / 2 each; torch: 2 gloo processes with threads // 2 each).
# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are left as the environment has them
# and recorded in the report, as is OMP_WAIT_POLICY: on a machine with other work running,
# OpenMP's default spin-wait let PyTorch's 2-thread matmul_256 take 16 ms instead of 0.46 ms,
# so set OMP_WAIT_POLICY=PASSIVE there (it applies to both sides).
#
# usage: scripts/bench-vs-torch.sh [--quick]
#   --quick  one warm-up call and 3 samples per run instead of 2 and 10
# BUILD_DIR (default build): the Release build to use; built with `make build` when missing.
# Not part of `make test`.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

quick_flag=()
case "${1:-}" in
  "") ;;
  --quick) quick_flag=(--quick) ;;
  *) echo "usage: scripts/bench-vs-torch.sh [--quick]" >&2; exit 2 ;;
esac

build_dir=${BUILD_DIR:-build}
rounds=3
workloads=(matmul_256 matmul_1024 add_16m gelu_16m softmax_ce mlp_train_step cnn_train_step
  conv2d dataloader ddp2_mlp_step)

if [[ -d "$build_dir" ]]; then
  cmake --build "$build_dir" --target bench_workloads
else
  make build BUILD_DIR="$build_dir"
fi
bench="$build_dir/benchmarks/bench_workloads"

# The PyTorch wheel from PyPI, in the git-ignored .venv: created only when torch is missing.
python=.venv/bin/python
if ! [[ -x "$python" ]] || ! "$python" -c "import torch" 2>/dev/null; then
  [[ -x "$python" ]] || python3 -m venv .venv
  .venv/bin/pip install torch numpy
fi

threads=$(nproc)
export OMP_NUM_THREADS=$threads

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
runs="$work/runs.txt"
: >"$runs"
for w in "${workloads[@]}"; do
  for ((r = 1; r <= rounds; ++r)); do
    line=$("$bench" "${quick_flag[@]}" --only "$w")
    echo "multigrad $r $line" >>"$runs"
    line=$("$python" benchmarks/torch/workloads.py "${quick_flag[@]}" --only "$w" --threads "$threads")
    echo "torch $r $line" >>"$runs"
    echo "$w round $r/$rounds done" >&2
  done
done

mg_threads=$(grep -m1 '^multigrad ' "$runs" | sed -E 's/.*"threads": ([0-9]+).*/\1/')
if [[ "$mg_threads" != "$threads" ]]; then
  echo "warning: multigrad used $mg_threads threads (hardware threads / CPU devices), torch $threads" >&2
fi

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n "$(GIT_OPTIONAL_LOCKS=0 git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  commit="$commit (with uncommitted changes)"
fi
cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
date_utc=$(date -u +%Y-%m-%d)
# torch.__config__.show(): the lines naming the BLAS, oneDNN (MKL-DNN), OpenMP and CPU capability.
torch_version=$("$python" -c "import torch; print(torch.__version__)")
torch_config=$("$python" -c "import torch; print(torch.__config__.show())" |
  grep -E 'Math Kernel|MKL-DNN|oneDNN|OpenBLAS|OpenMP|CPU capability' | sed -E 's/^ *- */- /')
blas_info=$("$python" -c "import torch; print(torch.__config__.show())" | grep -oE 'BLAS_INFO=[^,]*' || true)

out="benchmarks/results/cpu-$date_utc.md"
mkdir -p benchmarks/results
cat >"$work/header.md" <<EOF
# multigrad vs PyTorch on the CPU, $date_utc

Written by \`scripts/bench-vs-torch.sh ${quick_flag[*]:-}\`. Each side's ms is the median over $rounds
alternating rounds (multigrad, torch, multigrad, ...) of each run's median per iteration;
ratio = multigrad ms / torch ms (below 1: multigrad is faster). float32, batch 128, the same
threads on both sides.

- machine: $threads cores (nproc), $cpu_model
- threads: $threads (OMP_NUM_THREADS, torch.set_num_threads; multigrad's budget: $mg_threads)
- OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-(unset)}, OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE-(unset)} (left as the environment had them)
- OMP_WAIT_POLICY=${OMP_WAIT_POLICY-(unset)} (PASSIVE keeps an OpenMP team from spinning against a busy neighbour)
- PyTorch $torch_version ($blas_info), built with:
$(sed 's/^/  /' <<<"$torch_config")
- multigrad: commit $commit, $build_dir ($(grep -m1 '^CMAKE_BUILD_TYPE' "$build_dir/CMakeCache.txt" | cut -d= -f2))
EOF
"$python" benchmarks/torch/summarize.py --runs "$runs" --header "$work/header.md" --out "$out"
echo "wrote $out"

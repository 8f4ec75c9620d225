#!/usr/bin/env bash
# multigrad against PyTorch (issue 7), on the CPU or on cuda:0: the workloads of
# benchmarks/bench_workloads.cpp beside their twin benchmarks/torch/workloads.py, run
# alternately so that load from elsewhere falls on both sides alike. Each side's ms is the
# median of its rounds' medians. Prints
#   <workload> multigrad_ms=<x> torch_ms=<y> ratio=<x/y>
# and writes a markdown table to benchmarks/results/<device>-<UTC date>.md ($OUT/... when OUT is
# set, as on the GPU machine; --out FILE says where instead) with the machine (nproc, CPU model;
# for cuda the GPU, its driver and CUDA version), the PyTorch version and its BLAS/oneDNN or
# CUDA/cuDNN build, and the commit.
#
# The workloads are those `bench_workloads --device <device> --list` names: on cuda a few more
# sizes, and no dataloader or ddp2_mlp_step (bench_workloads.cpp's header says why).
# Alternation: on the CPU, per workload (multigrad, torch, multigrad, torch, ... for `rounds`
# rounds). On CUDA a round is one run of each side over all its workloads: every process start
# there costs seconds (the CUDA context, cuBLAS and cuDNN handles, importing torch), and what is
# timed is the GPU, which other work on the host barely touches.
#
# Both sides get the same threads: nproc, through OMP_NUM_THREADS (multigrad's OpenMP and
# OpenBLAS) and torch.set_num_threads; on the CPU multigrad's own budget (hardware threads / CPU
# devices) is checked against it. ddp2_mlp_step splits them over its 2 ranks (multigrad: 2 CPU
# devices with hardware threads / 2 each; torch: 2 gloo processes with threads // 2 each).
# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are left as the environment has them
# and recorded in the report, with the CPU's AVX flags and the kernels `multigrad devices` says
# multigrad's GEMMs and convolutions run, as is OMP_WAIT_POLICY: on a machine with other work running,
# OpenMP's default spin-wait let PyTorch's 2-thread matmul_256 take 16 ms instead of 0.46 ms,
# so set OMP_WAIT_POLICY=PASSIVE there (it applies to both sides).
#
# usage: scripts/bench-vs-torch.sh [--quick] [--device cpu|cuda] [--out FILE]
#   --quick   one warm-up call and 3 samples per run instead of 2 and 10
#   --device  cpu (the default) or cuda (cuda:0 on both sides)
#   --out     the report's path
# BUILD_DIR (default build): the Release build to use; built with `make build` when missing.
# PYTHON: the Python with torch to use. Without it: .venv/bin/python when it imports torch, else
# python3 when it does (the GPU machine: torch installed system-wide, no package registry), else
# .venv is created and torch installed from PyPI.
# Not part of `make test`.
set -euo pipefail

usage() {
  echo "usage: scripts/bench-vs-torch.sh [--quick] [--device cpu|cuda] [--out FILE]" >&2
  exit 2
}
quick_flag=()
device=cpu
out=
while (($#)); do
  case "$1" in
    --quick) quick_flag=(--quick) ;;
    --device) (($# >= 2)) || usage; device=$2; shift ;;
    --out) (($# >= 2)) || usage; out=$(realpath -m -- "$2"); shift ;;
    *) usage ;;
  esac
  shift
done
[[ $device == cpu || $device == cuda ]] || usage

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

build_dir=${BUILD_DIR:-build}
rounds=3

if [[ -d "$build_dir" ]]; then
  cmake --build "$build_dir" --target bench_workloads multigrad_cli
else
  make build BUILD_DIR="$build_dir"
fi
bench="$build_dir/benchmarks/bench_workloads"
workloads=$("$bench" --device "$device" --list)

if [[ -n "${PYTHON:-}" ]]; then
  python=$PYTHON
  if ! "$python" -c "import torch"; then
    echo "bench-vs-torch: PYTHON=$PYTHON cannot import torch" >&2
    exit 1
  fi
elif [[ -x .venv/bin/python ]] && .venv/bin/python -c "import torch" 2>/dev/null; then
  python=.venv/bin/python
elif python3 -c "import torch" 2>/dev/null; then
  python=python3
else
  # The PyTorch wheel from PyPI, in the git-ignored .venv.
  [[ -x .venv/bin/python ]] || python3 -m venv .venv
  .venv/bin/pip install torch numpy
  python=.venv/bin/python
fi

threads=$(nproc)
export OMP_NUM_THREADS=$threads

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
runs="$work/runs.txt"
: >"$runs"
# run_round ROUND [--only NAME]: one run of each side, their JSON lines appended to $runs.
run_round() {
  local round=$1
  shift
  "$bench" "${quick_flag[@]}" --device "$device" "$@" | sed "s/^/multigrad $round /" >>"$runs"
  "$python" benchmarks/torch/workloads.py "${quick_flag[@]}" --device "$device" --threads "$threads" "$@" |
    sed "s/^/torch $round /" >>"$runs"
}
if [[ $device == cpu ]]; then
  for w in $workloads; do
    for ((r = 1; r <= rounds; ++r)); do
      run_round "$r" --only "$w"
      echo "$w round $r/$rounds done" >&2
    done
  done
else
  for ((r = 1; r <= rounds; ++r)); do
    run_round "$r"
    echo "round $r/$rounds done" >&2
  done
fi

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n "$(GIT_OPTIONAL_LOCKS=0 git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  commit="$commit (with uncommitted changes)"
fi
cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
date_utc=$(date -u +%Y-%m-%d)
build_type=$(grep -m1 '^CMAKE_BUILD_TYPE' "$build_dir/CMakeCache.txt" | cut -d= -f2)
torch_version=$("$python" -c "import torch; print(torch.__version__)")

if [[ -n "$out" ]]; then
  report=$out
elif [[ -n "${OUT:-}" ]]; then
  report="$OUT/$device-$date_utc.md"
else
  report="benchmarks/results/$device-$date_utc.md"
fi
mkdir -p "$(dirname "$report")"

if [[ $device == cpu ]]; then
  mg_threads=$(grep -m1 '^multigrad ' "$runs" | sed -E 's/.*"threads": ([0-9]+).*/\1/')
  if [[ "$mg_threads" != "$threads" ]]; then
    echo "warning: multigrad used $mg_threads threads (hardware threads / CPU devices), torch $threads" >&2
  fi
  # torch.__config__.show(): the lines naming the BLAS, oneDNN (MKL-DNN), OpenMP and CPU capability.
  torch_config=$("$python" -c "import torch; print(torch.__config__.show())" |
    grep -E 'Math Kernel|MKL-DNN|oneDNN|OpenBLAS|OpenMP|CPU capability' | sed -E 's/^ *- */- /')
  blas_info=$("$python" -c "import torch; print(torch.__config__.show())" | grep -oE 'BLAS_INFO=[^,]*' || true)
  # What `multigrad devices` says of its GEMMs (OpenBLAS's kernels, how chosen, the CPU's level)
  # and of its convolutions.
  mg_gemm=$("$build_dir/multigrad" devices 2>/dev/null | sed -n 's/^CPU GEMM: //p' || true)
  mg_conv=$("$build_dir/multigrad" devices 2>/dev/null | sed -n 's/^CPU conv2d: //p' || true)
  cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo | grep -oE '\b(avx2|fma|avx512f|avx512_bf16|avx512_fp16|amx_tile)\b' | paste -sd' ' - || true)
  cat >"$work/header.md" <<EOF
# multigrad vs PyTorch on the CPU, $date_utc

Written by \`scripts/bench-vs-torch.sh ${quick_flag[*]:-}\`. Each side's ms is the median over $rounds
alternating rounds (multigrad, torch, multigrad, ...) of each run's median per iteration;
ratio = multigrad ms / torch ms (below 1: multigrad is faster). float32, batch 128, the same
threads on both sides.

- machine: $threads cores (nproc), $cpu_model (${cpu_flags:-no AVX2})
- multigrad's GEMMs: $mg_gemm
- multigrad's conv2d: $mg_conv
- threads: $threads (OMP_NUM_THREADS, torch.set_num_threads; multigrad's budget: $mg_threads)
- OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-(unset)}, OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE-(unset)} (left as the environment had them)
- OMP_WAIT_POLICY=${OMP_WAIT_POLICY-(unset)} (PASSIVE keeps an OpenMP team from spinning against a busy neighbour)
- PyTorch $torch_version ($blas_info), built with:
$(sed 's/^/  /' <<<"$torch_config")
- multigrad: commit $commit, $build_dir ($build_type)
EOF
else
  gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1 ||
    echo "(nvidia-smi failed)")
  cuda_driver=$(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | cut -d' ' -f3 || echo unknown)
  torch_cuda=$("$python" -c "import torch
print(f'{torch.cuda.get_device_name(0)}; built for CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}')")
  nvcc_version=$(grep -h 'CMAKE_CUDA_COMPILER_VERSION' "$build_dir"/CMakeFiles/*/CMakeCUDACompiler.cmake 2>/dev/null |
    grep -oE '[0-9][0-9.]*' | head -1 || echo unknown)
  cuda_libs=$(ldd "$build_dir/libmultigrad.so" | grep -oE 'lib(cublas|cudnn)\.so[^ ]* => [^ ]+' | paste -sd';' - | sed 's/;/; /g' || true)
  cat >"$work/header.md" <<EOF
# multigrad vs PyTorch on the GPU (cuda:0), $date_utc

Written by \`scripts/bench-vs-torch.sh ${quick_flag[*]:-} --device cuda\`. A round is one run of
multigrad over all workloads, then one of PyTorch; each side's ms is the median over $rounds
rounds of each run's median per iteration, every sample ending with a device synchronisation;
ratio = multigrad ms / torch ms (below 1: multigrad is faster). float32 without TF32 on both
sides (multigrad: cuBLAS's default math, cuDNN's CUDNN_FMA_MATH; PyTorch: allow_tf32 turned
off for matmul and cuDNN by workloads.py). PyTorch's cudnn.benchmark and cudnn.deterministic
are left at their defaults (off); multigrad takes cuDNN's first deterministic algorithm.

- GPU: $gpu (name, memory, driver); CUDA (driver): $cuda_driver
- host: $threads cores (nproc), $cpu_model; OMP_NUM_THREADS=$threads
- PyTorch $torch_version: $torch_cuda
- multigrad: commit $commit, $build_dir ($build_type), nvcc $nvcc_version, ${cuda_libs:-(no cuBLAS/cuDNN found by ldd)}
EOF
fi
"$python" benchmarks/torch/summarize.py --runs "$runs" --header "$work/header.md" --out "$report"
echo "wrote $report"

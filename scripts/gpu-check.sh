#!/usr/bin/env bash
# scripts/gpu-check.sh — the one command for a lent GPU machine, and its rehearsal here.
# scripts/README.md says how to run it there (the carried paths, the timeout) and how to read
# what comes back.
#
# Runs the steps below in order of value. Each gets a timeout out of what is left of the budget
# (GPU_CHECK_BUDGET_S, default 480 s for the whole run), and the report is rewritten after every
# step and again on exit, so that a run cut anywhere still returns what it measured. Three files
# go to $OUT (else to benchmarks/results/gpu-check-<time>/):
#   gpu-report.md       the report (scripts/gpu_report.py writes it)
#   gpu-results.jsonl   the JSON lines it was made from: the machine, every step, every measurement
#   gpu-logs.tar.gz     every step's full log
# It reads the GPU's settings and never changes them.
#
# usage: scripts/gpu-check.sh [--quick] [--rehearse] [--dry-run SECONDS]
#   --quick      build only what the steps run, and skip the full test suite and the whole
#                PyTorch comparison at the end (the GPU shot runs with it)
#   --rehearse   run here, with the simulated CUDA build (sim/) in place of a GPU: the tiny GPT
#                layout in place of GPT-2's, no compute-sanitizer or PyTorch-on-CUDA steps, CMake
#                kept out of /usr so that only .deps/ and the toolkit serve, and no network
#                (unshare -n) where this machine allows it
#   --dry-run S  every step sleeps S seconds instead of running: the budget and the report alone
# Exit status: 0 when every step ran and passed, 1 when one failed or was cut, 2 on bad usage.
set -uo pipefail

usage() { echo "usage: scripts/gpu-check.sh [--quick] [--rehearse] [--dry-run SECONDS]" >&2; exit 2; }
args=("$@")
quick=0 rehearse=0 dry_run=""
while (($#)); do
  case "$1" in
    --quick) quick=1 ;;
    --rehearse) rehearse=1 ;;
    --dry-run)
      [[ $# -ge 2 && $2 =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "gpu-check: --dry-run needs seconds, e.g. --dry-run 1" >&2; usage; }
      dry_run=$2
      shift ;;
    *) echo "gpu-check: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done
budget_s=${GPU_CHECK_BUDGET_S:-480}
[[ $budget_s =~ ^[0-9]+$ && $budget_s -ge 1 ]] ||
  { echo "gpu-check: GPU_CHECK_BUDGET_S must be a whole number of seconds >= 1, got '$budget_s'" >&2; exit 2; }

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo" || exit 1

# A rehearsal runs without network where a new network namespace is allowed (root here).
if ((rehearse)) && [[ -z ${GPU_CHECK_NETNS:-} && -z $dry_run ]]; then
  if unshare -n true 2>/dev/null; then
    GPU_CHECK_NETNS="none (unshare -n)" exec unshare -n -- "$0" "${args[@]}"
  fi
  export GPU_CHECK_NETNS="reachable (unshare -n is not permitted here)"
fi

SECONDS=0
# What the end needs after the last step: the report and the log archive (about a second).
reserve_s=$((budget_s >= 60 ? 5 : 1))
stamp=$(date -u +%Y%m%d-%H%M%S)
out=${OUT:-$repo/benchmarks/results/gpu-check-$stamp}
mkdir -p "$out" || exit 1
work=$(mktemp -d)
logs="$work/logs"
mkdir -p "$logs"
results="$out/gpu-results.jsonl"
: >"$results"
report_py="$repo/scripts/gpu_report.py"
build="$repo/$( ((rehearse)) && echo build-rehearse || echo build-gpu)"
deps="$repo/.deps"
deps_root="$deps/root"
blas_dir="$deps_root/usr/lib/x86_64-linux-gnu/openblas-pthread"
failed=0

# ---- the record: JSON lines, the report made from them, the logs archived ----

# emit KIND KEY VALUE ...: one JSON line (values that read as numbers are numbers).
emit() {
  python3 - "$@" >>"$results" <<'EOF'
import json, sys
kind, args = sys.argv[1], sys.argv[2:]
def value(v):
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v
print(json.dumps({"kind": kind, **{k: value(v) for k, v in zip(args[::2], args[1::2])}}))
EOF
}

write_report() {
  python3 "$report_py" report "$results" "$out/gpu-report.md" 2>"$logs/report-writer.log" ||
    { echo "# multigrad GPU check: the report writer failed (gpu-logs.tar.gz: report-writer.log)"; echo; echo '```';
      cat "$results"; echo '```'; } >"$out/gpu-report.md"
  tar -czf "$out/gpu-logs.tar.gz" -C "$work" logs 2>/dev/null
}

finish() {
  write_report
  rm -rf "$work"
  echo "gpu-check: report written to $out/gpu-report.md"
}
trap finish EXIT
trap 'exit 1' INT TERM

# ---- steps ----

# step NAME CAP NEED COMMAND...: runs COMMAND with its output in logs/NAME.log and a timeout of
# CAP seconds or what the budget has left, whichever is less; a step that would get less than
# NEED seconds is cut without starting. Records the step and rewrites the report. Returns
# COMMAND's status (1 when cut).
step() {
  local name=$1 cap=$2 need=$3
  shift 3
  local log="$logs/${name// /-}.log"
  if [[ -n $dry_run ]]; then
    cap=$(( ${dry_run%.*} + 2 )) need=$(( ${dry_run%.*} + 1 ))
    set -- sleep "$dry_run"
  fi
  local left=$((budget_s - SECONDS - reserve_s))
  ((left > 0)) || left=0
  if ((left < need)); then
    # Recorded, but the report waits for the exit: what is left of the budget is the end's.
    echo "gpu-check: $name: cut (${left} s of the budget left, it needs ${need} s)"
    emit step name "$name" status cut seconds 0 note "not started: ${left} s of the budget left, it needs ${need} s"
    failed=1
    return 1
  fi
  local limit=$((cap < left ? cap : left))
  echo "gpu-check: $name (at most ${limit} s)"
  local t0=$SECONDS rc
  if declare -F "$1" >/dev/null; then  # a function of this script: run it in a child bash
    timeout --kill-after=5 "$limit" bash -c '"$@"' _ "$@" >"$log" 2>&1
  else
    timeout --kill-after=5 "$limit" "$@" >"$log" 2>&1
  fi
  rc=$?
  local took=$((SECONDS - t0)) status note=""
  if ((rc == 0)); then
    status=ok
  elif ((rc == 124 || rc == 137)); then
    status=cut note="stopped at its ${limit} s limit (log: ${name// /-}.log)"
    failed=1
  else
    status=failed note="exit $rc (log: ${name// /-}.log): $(grep -v '^\s*$' "$log" | tail -1 | cut -c1-160)"
    failed=1
  fi
  emit step name "$name" status "$status" seconds "$took" note "$note"
  write_report
  return $rc
}

# ingest PARSER ARGS... LOG: gpu_report.py's JSON lines from a step's log, when the step wrote one
# (a step cut before it started did not; a dry run's logs hold nothing to parse).
ingest() {
  [[ -z $dry_run && -f ${!#} ]] || return 0
  python3 "$report_py" "$@" >>"$results"
  write_report
}

# A step that cannot run on this machine, recorded as such.
not_here() {
  emit step name "$1" status "not on this machine" seconds 0 note "$2"
  write_report
}

# The root of a library shipped in a PyTorch wheel under python3's `nvidia` package: the folder
# holding include/HEADER (nvidia/cudnn, nvidia/nccl). Empty when there is none.
wheel_root() {
  timeout 30 python3 - "$1" 2>/dev/null <<'EOF'
import glob, os, sys
try:
    import nvidia
except ImportError:
    raise SystemExit
for base in nvidia.__path__:
    for header in glob.glob(os.path.join(base, "**", "include", sys.argv[1]), recursive=True):
        print(os.path.dirname(os.path.dirname(header)))
        raise SystemExit
EOF
}

# "9.10.2" from a header's MAJOR/MINOR/PATCH defines (cudnn_version.h, nccl.h).
header_version() {
  local file=$1 prefix=$2
  [[ -f $file ]] || return 0
  awk -v p="$prefix" '$1 == "#define" && ($2 == p "MAJOR" || $2 == p "MINOR" || $2 == p "PATCHLEVEL" || $2 == p "PATCH") \
    { v = v (v == "" ? "" : ".") $3 } END { print v }' "$file"
}

export PATH="$PATH:/usr/local/cuda/bin"
cuda_home=/usr/local/cuda
cudnn_root="" nccl_root=""
if ((!rehearse)) && [[ -z $dry_run ]]; then
  [[ -e $cuda_home/include/cudnn.h ]] || cudnn_root=$(wheel_root cudnn.h)
  [[ -e $cuda_home/include/nccl.h ]] || nccl_root=$(wheel_root nccl.h)
fi

preflight() {
  echo "== GPU"
  nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.limit,persistence_mode --format=csv
  nvidia-smi
  echo "== toolkit and host"
  nvcc --version
  ls -l "$cuda_home"/lib64/libcublas.so* "$cuda_home"/lib64/libcudnn.so* 2>&1
  echo "cudnn root: ${cudnn_root:-$cuda_home}; nccl root: ${nccl_root:-$cuda_home}"
  command -v compute-sanitizer && compute-sanitizer --version
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
  g++ --version | head -1; cmake --version | head -1; ninja --version; nproc; free -g; ldd --version | head -1
  command -v nvidia-smi >/dev/null  # the step fails on a machine with no driver tools
}

# The machine as preflight read it, as one "machine" line (read here, in the script, so that it
# is recorded even when the preflight step itself is cut).
record_machine() {
  local q
  q() { nvidia-smi --query-gpu="$1" --format=csv,noheader 2>/dev/null | head -1; }
  local cudnn_h="${cudnn_root:-$cuda_home}/include/cudnn_version.h"
  local nccl_h="${nccl_root:-$cuda_home}/include/nccl.h"
  local cudnn_v nccl_v
  cudnn_v=$(header_version "$cudnn_h" CUDNN_)
  nccl_v=$(header_version "$nccl_h" NCCL_)
  if ((rehearse)); then
    emit machine gpu "none: the CUDA simulator (sim/), 2 simulated sm_90 devices" \
      host "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" \
      nvcc "$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | cut -d' ' -f2) (headers only)" \
      cublas "simulated (sim/cublas.cpp)" cudnn "simulated (sim/cudnn.cpp)" nccl "simulated (sim/nccl.cpp)" \
      torch "not used in a rehearsal" sanitizer "not used in a rehearsal" network "${GPU_CHECK_NETNS:-}"
    return
  fi
  local gpu="none found (no nvidia-smi)"
  command -v nvidia-smi >/dev/null && gpu="$(q name), $(q memory.total) ($(q memory.free) free)"
  emit machine gpu "$gpu" \
    clocks "SM $(q clocks.sm) of $(q clocks.max.sm), memory $(q clocks.mem) of $(q clocks.max.mem); power limit $(q power.limit); persistence $(q persistence_mode)" \
    driver "$(q driver_version) / CUDA $(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | cut -d' ' -f3)" \
    nvcc "$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | cut -d' ' -f2)" \
    host "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), glibc $(ldd --version 2>/dev/null | head -1 | grep -o '[0-9.]*$')" \
    cublas "$(ls "$cuda_home"/lib64/libcublas.so.* 2>/dev/null | head -1 || echo 'not found')" \
    cudnn "${cudnn_v:-not found} ($( [[ -n $cudnn_v ]] && echo "${cudnn_root:-$cuda_home}" || echo 'conv2d tests skip'))" \
    nccl "${nccl_v:-not found} ($( [[ -n $nccl_v ]] && echo "${nccl_root:-$cuda_home}" || echo 'nccl tests skip'))" \
    torch "$(timeout 30 python3 -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "available" if torch.cuda.is_available() else "NOT available")' 2>/dev/null || echo 'not importable')" \
    sanitizer "$(compute-sanitizer --version 2>/dev/null | grep -o 'Version [0-9.]*' | head -1 || echo 'not found')"
}

# .deps/ travels as one archive (scripts/prepare-gpu-deps.sh); unpacked here into .deps/root.
unpack_deps() {
  local archive="$deps/gpu-deps.tar.gz"
  if [[ -f $archive ]]; then
    rm -rf "$deps_root" && tar -xzf "$archive" -C "$deps" || return 1
    echo "unpacked $archive: $(du -sm "$deps_root" | cut -f1) MiB"
  elif [[ -d $deps_root ]]; then
    echo "no $archive: using the unpacked $deps_root as it is"
  else
    echo "neither $archive nor $deps_root: run scripts/prepare-gpu-deps.sh where apt works, and carry $archive"
    return 1
  fi
  [[ $(uname -m) == x86_64 ]] || { echo ".deps/ holds x86_64 packages; this machine is $(uname -m)"; return 1; }
  [[ -e $blas_dir/libopenblas.so ]] || { echo "libopenblas.so is missing from $blas_dir"; return 1; }
  cat "$deps_root/MANIFEST" 2>/dev/null
}

configure() {
  local args=(-S "$repo" -B "$build" -G Ninja -DMG_MPI=OFF -DMG_ONEDNN=OFF
    -DCMAKE_PREFIX_PATH="$deps_root/usr" -DCMAKE_LIBRARY_PATH="$blas_dir")
  if ((rehearse)); then
    # Only .deps/ and the toolkit serve, as on the GPU machine: CMake looks nowhere under /usr but
    # for Boost.Context, which only the simulator needs.
    local boost_dir
    boost_dir=$(ls -d /usr/lib/x86_64-linux-gnu/cmake/Boost-* 2>/dev/null | head -1)
    args+=(-DCMAKE_BUILD_TYPE=Release -DMG_CUDA_SIM=ON -DCMAKE_IGNORE_PREFIX_PATH=/usr -DBoost_DIR="$boost_dir")
  else
    args+=(-DCMAKE_BUILD_TYPE=Release -DMG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
    [[ -n $cudnn_root ]] && args+=(-DCUDNN_ROOT="$cudnn_root")
    [[ -n $nccl_root ]] && args+=(-DNCCL_ROOT="$nccl_root")
  fi
  cmake "${args[@]}"
}

build_targets() {
  local targets=()
  ((quick)) && targets=(--target mg_cuda_tests multigrad_cli bench_ops bench_workloads)
  cmake --build "$build" -j "$(nproc)" "${targets[@]}"
}

# The kernels' test files (not NCCL, not the runtime's) for memcheck, and those whose kernels use
# shared memory or warp shuffles for racecheck and synccheck; one sanitizer run per file, so that
# a run cut short keeps the summaries of the files before it.
memcheck_files=(test_cuda_elementwise test_cuda_reduce test_cuda_nn_ops test_cuda_norm test_cuda_optim
  test_cuda_matmul test_cuda_conv test_cuda_random test_cuda_kernel_times)
shared_memory_files=(test_cuda_nn_ops test_cuda_norm test_cuda_reduce)
sanitize() {
  local tool=$1 file
  shift
  for file in "$@"; do
    echo "== sanitizer run: $file"
    compute-sanitizer --tool "$tool" --print-limit 20 --error-exitcode 1 \
      "$build/tests/mg_cuda_tests" -# "[#$file]"
  done
}

# multigrad's GPT-2 step (bench_workloads' gpt2 workloads): gpt2_step WORKLOAD [ARGS...], ARGS
# after the rehearsal's layout and batch, so that a --batch among them wins.
gpt2_step() {
  local workload=$1 layout=()
  shift
  ((rehearse)) && layout=(--gpt2-config tiny --batch 2)
  "$build/benchmarks/bench_workloads" --device cuda --quick --only "$workload" "${layout[@]}" "$@"
}

# `multigrad train` end to end on GPT-2's layout, on text the repository holds (bytes).
train_gpt2() {
  local text="$work/text.txt" config=gpt2 batch=8
  ((rehearse)) && config=tiny batch=4
  cat "$repo"/*.md "$repo"/*/*.md "$repo"/*/*.cpp "$repo"/*/*.h >"$text"
  "$build/multigrad" train --model gpt --config "$config" --data "$text" --precision bf16 --batch-size "$batch" \
    --max-steps 6 --test-limit 16 --devices cuda:0
}
export -f preflight unpack_deps configure build_targets sanitize gpt2_step train_gpt2 header_version
export repo build deps deps_root blas_dir cuda_home cudnn_root nccl_root quick rehearse work

# ---- the run ----

plan="preflight,deps,configure,build,devices,cuda tests,gpt2 bf16,gpt2 fp32,bench_ops,torch gpt2 bf16,torch gpt2 fp32"
plan+=",memcheck,racecheck,synccheck,gpt2 bf16 largest batch,torch gpt2 bf16 largest batch,multigrad train gpt2"
((quick)) || plan+=",all tests,bench-vs-torch"
commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo "${GPU_CHECK_COMMIT:-unknown (no .git; set GPU_CHECK_COMMIT)}")
git -C "$repo" diff --quiet HEAD 2>/dev/null || [[ ! -d $repo/.git ]] || commit+=" (with local changes)"
mode=$( ((quick)) && echo quick || echo full)$( ((rehearse)) && echo ", rehearsal")$([[ -n $dry_run ]] && echo ", dry run of ${dry_run} s a step")
emit run date "$(date -u '+%Y-%m-%d %H:%M UTC')" commit "$commit" mode "$mode" budget_s "$budget_s" \
  rehearse "$rehearse" plan "$plan"
[[ -z $dry_run ]] && record_machine
write_report

if ((rehearse)); then
  not_here preflight "no GPU here: the machine line above is this machine's"
else
  step preflight 30 5 preflight
fi
step deps 60 5 unpack_deps
# The build tree's RPATH finds libopenblas, an installed copy does not; the Fortran runtime from
# .deps/ only where the machine has none.
lib_path="$blas_dir"
ldconfig -p 2>/dev/null | grep -q 'libgfortran\.so\.5 ' || lib_path+=":$deps_root/usr/lib/x86_64-linux-gnu"
[[ -n $cudnn_root ]] && lib_path+=":$cudnn_root/lib"
export LD_LIBRARY_PATH="$lib_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

built=1
if step configure 120 20 configure; then
  step build 300 20 build_targets && built=0
else
  emit step name build status skipped seconds 0 note "configure did not succeed"
fi
if ((built != 0)) && [[ -z $dry_run ]]; then
  echo "gpu-check: no build: the steps that run it are not started"
  exit 1  # the trap writes the report: the plan's remaining steps show as not reached
fi

step devices 30 5 "$build/multigrad" devices
ingest devices "$logs/devices.log"
step "cuda tests" 200 30 ctest --test-dir "$build" -L cuda --timeout 90 -j "$(nproc)" --output-on-failure
ingest ctest "ctest -L cuda" "$logs/cuda-tests.log"
for precision in bf16 fp32; do
  workload=gpt2_train_step$([[ $precision == bf16 ]] && echo _bf16)
  step "gpt2 $precision" 120 20 gpt2_step "$workload" --kernel-times
  ingest rows multigrad "$logs/gpt2-$precision.log"
done
if ((rehearse)); then
  not_here bench_ops "the simulator's timings are not a GPU's (its bench_ops rows run in build-sim if wanted)"
else
  step bench_ops 90 15 "$build/benchmarks/bench_ops" --device cuda --quick
  ingest rows bench_ops "$logs/bench_ops.log"
fi
for precision in bf16 fp32; do
  workload=gpt2_train_step$([[ $precision == bf16 ]] && echo _bf16)
  if ((rehearse)); then
    not_here "torch gpt2 $precision" "no PyTorch with CUDA here"
  else
    step "torch gpt2 $precision" 120 30 python3 "$repo/benchmarks/torch/workloads.py" --device cuda --quick --only "$workload"
    ingest rows torch "$logs/torch-gpt2-$precision.log"
  fi
done
for tool in memcheck racecheck synccheck; do
  if ((rehearse)); then
    not_here "$tool" "compute-sanitizer needs a GPU (the simulator checks barriers and shuffles itself)"
    continue
  elif [[ -z $dry_run ]] && ! command -v compute-sanitizer >/dev/null; then
    not_here "$tool" "no compute-sanitizer on PATH or in $cuda_home/bin"
    continue
  fi
  files=("${memcheck_files[@]}")
  [[ $tool != memcheck ]] && files=("${shared_memory_files[@]}")
  step "$tool" 120 20 sanitize "$tool" "${files[@]}"
  ingest sanitizer "$tool" "$logs/$tool.log"
done
# The bf16 step again at the largest batch cuda:0's memory holds, scaled from the first run's peak
# (in a rehearsal at most 4: the simulator's 16 GiB would take the tiny layout past 200).
largest=$([[ -z $dry_run ]] && python3 "$report_py" largest-batch "$results" gpt2_train_step_bf16 \
  "$( ((rehearse)) && echo 4 || echo 256)")
if [[ -z $dry_run && -z $largest ]]; then
  emit step name "gpt2 bf16 largest batch" status skipped seconds 0 \
    note "no larger batch fits, or the first bf16 step measured no peak"
else
  step "gpt2 bf16 largest batch" 120 20 gpt2_step gpt2_train_step_bf16 --batch "${largest:-0}"
  ingest rows multigrad "$logs/gpt2-bf16-largest-batch.log"
fi
if ((rehearse)); then
  not_here "torch gpt2 bf16 largest batch" "no PyTorch with CUDA here"
elif [[ -z $dry_run && -z $largest ]]; then
  emit step name "torch gpt2 bf16 largest batch" status skipped seconds 0 note "as multigrad's"
else
  step "torch gpt2 bf16 largest batch" 120 30 python3 "$repo/benchmarks/torch/workloads.py" --device cuda --quick \
    --only gpt2_train_step_bf16 --batch "${largest:-0}"
  ingest rows torch "$logs/torch-gpt2-bf16-largest-batch.log"
fi
step "multigrad train gpt2" 120 30 train_gpt2
ingest train "$logs/multigrad-train-gpt2.log"
if ((!quick)); then
  step "all tests" 600 60 ctest --test-dir "$build" --timeout 300 -j "$(nproc)" --output-on-failure
  ingest ctest "ctest (all)" "$logs/all-tests.log"
  if ((rehearse)); then
    not_here bench-vs-torch "no PyTorch with CUDA here"
  else
    step bench-vs-torch 600 60 env BUILD_DIR="$build" "$repo/scripts/bench-vs-torch.sh" --device cuda --out "$work/vs-torch.md"
  fi
fi
exit $failed

#!/usr/bin/env bash
# tests/numerics/run.sh — runs a test command again with the CPU libraries' kernels of another
# instruction set, or another CPU thread budget (issue 16). The numerics-sensitive tests (golden
# values, gradcheck, every op against its reference, DP/DDP/pipeline bit-identity, the
# --grad-accum equivalences of the CLI and over MPI) must hold whichever kernels OpenBLAS and
# oneDNN pick on whichever CPU, and however many threads a device has: tests/CMakeLists.txt runs
# them under each variant.
#
# usage: run.sh VARIANT MULTIGRAD COMMAND [ARGS...]
#   VARIANT    sse3, avx2, avx512 or avx512_bf16: OPENBLAS_CORETYPE and ONEDNN_MAX_CPU_ISA of that
#              level (Prescott and SSE41: what OpenBLAS falls back to on a CPU it does not know;
#              Haswell and AVX2; SkylakeX and AVX512_CORE; Cooperlake and AVX512_CORE_BF16), or
#              threads_x2: MG_CPU_THREADS twice the hardware threads; exported to COMMAND
#   MULTIGRAD  the multigrad binary; `multigrad devices` says which kernels the libraries run and
#              which instruction sets this CPU has
# Exits 77, ctest's skip, when this CPU cannot run the level's kernels: OpenBLAS runs what
# OPENBLAS_CORETYPE names whatever the CPU (SkylakeX's AVX-512 kernels die of SIGILL on an AVX2
# CPU) or quietly runs others (Cooperlake without BF16), so the run would not test what its name
# says. Fails when a library does not run the kernels asked for.
set -euo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: $0 sse3|avx2|avx512|avx512_bf16|threads_x2 MULTIGRAD COMMAND [ARGS...]" >&2
  exit 2
fi
variant=$1 multigrad=$2
shift 2

# level name as `multigrad devices` prints it, OpenBLAS core, oneDNN's name of its kernels and
# the ONEDNN_MAX_CPU_ISA value.
case $variant in
  sse3) level=SSE3 core=Prescott onednn=SSE4.1 cap=SSE41 ;;
  avx2) level=AVX2 core=Haswell onednn=AVX2 cap=AVX2 ;;
  avx512) level=AVX-512 core=SkylakeX onednn=AVX-512 cap=AVX512_CORE ;;
  avx512_bf16) level="AVX-512 BF16" core=Cooperlake onednn="AVX-512 BF16" cap=AVX512_CORE_BF16 ;;
  threads_x2)
    MG_CPU_THREADS=$((2 * $(nproc)))
    echo "run.sh: MG_CPU_THREADS=$MG_CPU_THREADS threads shared by the CPU devices (twice the hardware's)"
    export MG_CPU_THREADS
    exec "$@"
    ;;
  *) echo "run.sh: unknown variant '$variant'" >&2; exit 2 ;;
esac

levels=("SSE3" "AVX" "AVX2" "AVX-512" "AVX-512 BF16")  # lowest first
# The index of a level in `levels`, or nothing when it is not one of them.
level_index() {
  local i
  for i in "${!levels[@]}"; do [[ ${levels[$i]} == "$1" ]] && echo "$i"; done
  return 0
}
# The lines of `multigrad devices` about the CPU's GEMM and conv2d kernels, run under `env ARGS`.
probe() {
  local listing
  listing=$(env "$@" "$multigrad" devices) || return 1
  grep -E '^CPU (GEMM|conv2d): ' <<<"$listing" || true
}
failed_probe() {
  echo "run.sh: '$multigrad devices' failed" >&2
  exit 1
}

# What this CPU runs, asked without the variant's settings: forcing kernels the CPU cannot run
# must not be what decides it.
base=$(probe -u OPENBLAS_CORETYPE -u ONEDNN_MAX_CPU_ISA -u DNNL_MAX_CPU_ISA) || failed_probe
cpu=$(sed -n 's/^CPU GEMM: .*; this CPU has \(.*\))$/\1/p' <<<"$base")
have=$(level_index "$cpu") need=$(level_index "$level")
if [[ -z $have ]]; then
  echo "run.sh: skipped: this CPU's instruction set is not one of ${levels[*]} ('$cpu')"
  exit 77
fi
if ((have < need)); then
  echo "run.sh: skipped: the $level kernels (OpenBLAS's $core) need a CPU with $level; this one has $cpu"
  exit 77
fi

kernels=$(probe -u DNNL_MAX_CPU_ISA OPENBLAS_CORETYPE="$core" ONEDNN_MAX_CPU_ISA="$cap") || failed_probe
gemm=$(grep '^CPU GEMM: ' <<<"$kernels" || true) conv=$(grep '^CPU conv2d: ' <<<"$kernels" || true)
if [[ $gemm != *" $core kernels ("* ]]; then
  echo "run.sh: OPENBLAS_CORETYPE=$core, but OpenBLAS runs other kernels: ${gemm:-(no CPU GEMM line)}" >&2
  exit 1
fi
if [[ $conv == *"oneDNN"* && $conv != *"(its $onednn kernels)"* ]]; then
  echo "run.sh: ONEDNN_MAX_CPU_ISA=$cap, but oneDNN runs other kernels: $conv" >&2
  exit 1
fi
echo "run.sh: $gemm"
echo "run.sh: $conv"
export OPENBLAS_CORETYPE=$core ONEDNN_MAX_CPU_ISA=$cap
unset DNNL_MAX_CPU_ISA
exec "$@"

#!/usr/bin/env bash
# tests/numerics/run.sh — runs a test command again under another OpenBLAS kernel or another CPU
# thread budget (issue 16). The numerics-sensitive tests (golden values, gradcheck, every op
# against its reference, DP/DDP/pipeline bit-identity, the --grad-accum equivalences of the CLI
# and over MPI) must hold whichever kernels OpenBLAS picks on whichever CPU, and however many
# threads a device has: tests/CMakeLists.txt runs them under each variant.
#
# usage: run.sh VARIANT MULTIGRAD COMMAND [ARGS...]
#   VARIANT    OPENBLAS_CORETYPE=<core> or MG_CPU_THREADS=<n>, exported to COMMAND
#   MULTIGRAD  the multigrad binary; `multigrad devices` says which kernels OpenBLAS runs and
#              which instruction sets this CPU has
# Exits 77, ctest's skip, when this CPU cannot run the core's kernels: OpenBLAS runs what
# OPENBLAS_CORETYPE names whatever the CPU (SkylakeX's AVX-512 kernels die of SIGILL on an AVX2
# CPU) or quietly runs others (Cooperlake without BF16), so the run would not test what its name
# says. Fails when OpenBLAS does not run the core asked for.
set -euo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: $0 OPENBLAS_CORETYPE=<core>|MG_CPU_THREADS=<n> MULTIGRAD COMMAND [ARGS...]" >&2
  exit 2
fi
variant=$1 multigrad=$2
shift 2
name=${variant%%=*} value=${variant#*=}

# The instruction sets `multigrad devices` names (kernels/cpu/gemm_kernel.cpp), lowest first.
levels=("SSE3" "AVX" "AVX2" "AVX-512" "AVX-512 BF16")
level_index() {
  local i
  for i in "${!levels[@]}"; do [[ ${levels[$i]} == "$1" ]] && { echo "$i"; return; }; done
  echo "run.sh: unknown instruction set '$1'" >&2
  exit 2
}

case $name in
  OPENBLAS_CORETYPE)
    case $value in
      Prescott) needs=SSE3 ;;
      Haswell) needs=AVX2 ;;
      SkylakeX) needs=AVX-512 ;;
      Cooperlake) needs="AVX-512 BF16" ;;
      *) echo "run.sh: no instruction set known for the OpenBLAS core '$value'" >&2; exit 2 ;;
    esac
    gemm=$(OPENBLAS_CORETYPE=$value "$multigrad" devices 2>/dev/null | grep '^CPU GEMM: ')
    cpu=$(sed -n 's/.*; this CPU has \(.*\))$/\1/p' <<<"$gemm")
    if (($(level_index "$cpu") < $(level_index "$needs"))); then
      echo "run.sh: skipped: OpenBLAS's $value kernels need $needs; this CPU has $cpu"
      exit 77
    fi
    if [[ $gemm != *" $value kernels ("* ]]; then
      echo "run.sh: OPENBLAS_CORETYPE=$value, but OpenBLAS runs other kernels: $gemm" >&2
      exit 1
    fi
    echo "run.sh: $gemm"
    ;;
  MG_CPU_THREADS) echo "run.sh: MG_CPU_THREADS=$value threads shared by the CPU devices" ;;
  *) echo "run.sh: unknown variant '$variant'" >&2; exit 2 ;;
esac
export "$variant"
exec "$@"

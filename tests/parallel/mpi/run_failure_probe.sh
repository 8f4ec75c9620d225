#!/usr/bin/env bash
# tests/parallel/mpi/run_failure_probe.sh — runs mpi_failure_probe MODE on 2 ranks and checks what
# the issue asks of a failed rank: mpiexec exits with STATUS (non-zero), within BOUND seconds
# (well under the communicator's 300 s default timeout), its output contains every PATTERN (the
# failed rank, the operation), and no process of the job is left afterwards.
#
# usage: run_failure_probe.sh MPIEXEC PROBE MODE BOUND STATUS PATTERN...
set -uo pipefail

if [[ $# -lt 5 ]]; then
  echo "usage: $0 MPIEXEC PROBE MODE BOUND STATUS PATTERN..." >&2
  exit 2
fi
mpiexec=$1 probe=$2 mode=$3 bound=$4 want_status=$5
shift 5
tag="mg-failure-probe-$mode-$$"  # on the probes' command lines: how their processes are found
fail() {
  echo "run_failure_probe ($mode): $*" >&2
  exit 1
}

start=$(date +%s%N)
# A hard stop at 3 x BOUND, so that a job that never ends fails this test instead of hanging it.
output=$(timeout --kill-after=5 $((3 * bound)) "$mpiexec" --allow-run-as-root --oversubscribe -np 2 \
  "$probe" "$mode" "$tag" 2>&1)
status=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "$output"
echo "run_failure_probe ($mode): mpiexec exited $status after $elapsed_ms ms"

# Live processes (zombies excluded: they are already dead) whose command line carries the tag.
left_behind() { ps -eo pid=,stat=,args= | awk -v tag="$tag" 'index($0, tag) && $2 !~ /^Z/ && $3 != "awk"'; }
left=""
for _ in $(seq 50); do  # mpiexec has returned; give the killed ranks up to 5 s to be gone
  left=$(left_behind)
  [[ -z $left ]] && break
  sleep 0.1
done
if [[ -n $left ]]; then
  kill -9 $(awk '{print $1}' <<<"$left") 2>/dev/null
  fail "processes left behind: $left"
fi

(( elapsed_ms < bound * 1000 )) || fail "the job took $elapsed_ms ms to end; the bound is $bound s"
[[ $status -eq $want_status ]] || fail "mpiexec exited $status; expected $want_status"
for pattern in "$@"; do
  grep -qF -- "$pattern" <<<"$output" || fail "the output does not contain '$pattern'"
done
echo "run_failure_probe ($mode): ok"

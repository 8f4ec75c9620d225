#!/usr/bin/env bash
# tests/parallel/multihost/run_multihost.sh — `multigrad train --backend mpi` across hosts over
# real sockets, on one machine: two hosts made of network namespaces joined by veth pairs and a
# bridge (the machine's own side of the bridge is where mpirun runs), mpirun starting a rank in
# each through a launch agent (`ip netns exec`) in place of ssh, OpenMPI's TCP transport between
# them (btl tcp,self: no shared memory). Checks:
#   1. DDP and a 1F1B pipeline across the hosts end bit-identical to --grad-accum on one process;
#   2. a link cut mid-training: every rank exits non-zero within --timeout (plus mpi_abort's
#      grace), the one that can still report naming the operation and its peer; the last
#      checkpoint reads; --resume finishes bit-identical to an uninterrupted run;
#   3. a host whose processes are killed: the same.
# Exits 77 (ctest's skip) with the reason where namespaces cannot be made (not root, no `ip`).
#
# usage: run_multihost.sh MPIEXEC MULTIGRAD
set -uo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 MPIEXEC MULTIGRAD" >&2
  exit 2
fi
mpiexec=$1 multigrad=$2
say() { echo "run_multihost: $*"; }
fail() {
  echo "run_multihost: $*" >&2
  exit 1
}
skip() {
  say "skipped: $*"
  exit 77
}
digests() { grep -o 'params_sha256: [0-9a-f]*' | cut -d' ' -f2; }

[[ $(id -u) -eq 0 ]] || skip "making network namespaces needs root"
command -v ip >/dev/null || skip "no ip command (iproute2)"

# Names unique to this run (interface names have at most 15 characters).
tag="mg$(($$ % 100000))"
subnet="10.$((200 + $$ % 50)).$(($$ % 250)).0"
prefix=${subnet%.0}
hosts=("$prefix.2" "$prefix.3")
work=$(mktemp -d)

cleanup() {
  for h in 1 2; do
    for pid in $(ip netns pids "${tag}h$h" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    ip netns del "${tag}h$h" 2>/dev/null
  done
  ip link del "${tag}br" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

make_hosts() {
  ip link add "${tag}br" type bridge && ip addr add "$prefix.1/24" dev "${tag}br" && ip link set "${tag}br" up || return 1
  for h in 1 2; do
    ip netns add "${tag}h$h" &&
      ip link add "${tag}v$h" type veth peer name eth0 netns "${tag}h$h" &&
      ip link set "${tag}v$h" master "${tag}br" && ip link set "${tag}v$h" up &&
      ip -n "${tag}h$h" addr add "$prefix.$((h + 1))/24" dev eth0 &&
      ip -n "${tag}h$h" link set eth0 up && ip -n "${tag}h$h" link set lo up || return 1
  done
}
err=$(make_hosts 2>&1) || skip "cannot make network namespaces here: $err"

# mpirun's launch agent: "agent HOST COMMAND..." runs COMMAND in HOST's namespace, as ssh would.
cat >"$work/agent" <<AGENT
#!/bin/sh
host=\$1; shift
exec ip netns exec ${tag}h\$((\${host##*.} - 1)) sh -c "\$*"
AGENT
chmod +x "$work/agent"

# rtc_hwloc_vmhole none: the daemons of both "hosts" share one /tmp and /dev/shm, and OpenMPI 4.1's
# shared topology (written into a hole of the address space) crashed a daemon now and then;
# PMIX_MCA_gds=hash: the same for PMIx's shared-memory store, which otherwise prints errors.
export PMIX_MCA_gds=hash
mpi=("$mpiexec" --allow-run-as-root --host "${hosts[0]},${hosts[1]}" -np 2
     --mca plm_rsh_agent "$work/agent" --mca btl tcp,self --mca rtc_hwloc_vmhole none
     --mca btl_tcp_if_include "$subnet/24" --mca oob_tcp_if_include "$subnet/24")

# ---- 1. across hosts == --grad-accum on one process ----
common=(--model mlp --limit 2048 --batch-size 32 --epochs 1 --test-limit 200 --deterministic)
want=$("$multigrad" train "${common[@]}" --grad-accum 2 2>/dev/null | digests) || fail "one process failed"
out=$(timeout 300 "${mpi[@]}" "$multigrad" train "${common[@]}" --parallel ddp --backend mpi 2>&1) ||
  fail "ddp across hosts failed: $out"
[[ $(digests <<<"$out" | sort -u) == "$want" && $(digests <<<"$out" | wc -l) -eq 2 ]] ||
  fail "ddp across hosts ended with $(digests <<<"$out" | tr '\n' ' '), --grad-accum 2 with $want"
say "ddp across 2 hosts == --grad-accum 2 ($want)"

want=$("$multigrad" train "${common[@]}" --grad-accum 4 2>/dev/null | digests) || fail "one process failed"
out=$(timeout 300 "${mpi[@]}" "$multigrad" train "${common[@]}" --parallel pipeline --backend mpi \
      --micro-batches 4 --schedule 1f1b 2>&1) || fail "a pipeline across hosts failed: $out"
[[ $(digests <<<"$out" | sort -u) == "$want" && $(digests <<<"$out" | wc -l) -eq 2 ]] ||
  fail "the pipeline across hosts ended with $(digests <<<"$out" | tr '\n' ' '), --grad-accum 4 with $want"
say "1f1b pipeline across 2 hosts == --grad-accum 4 ($want)"

# ---- 2 and 3. faults mid-training ----
timeout_s=5
grace_s=20  # mpi_abort's own (5 s) and mpirun's, on a loaded machine
long=(--model mlp --limit 8192 --batch-size 32 --epochs 1 --test-limit 200 --deterministic --timeout $timeout_s)
want=$("$multigrad" train "${long[@]}" --grad-accum 2 2>/dev/null | digests) || fail "one process failed"

# Runs the long job with checkpoints every 20 steps, applies `fault` (a command) once a checkpoint
# exists, then checks that no rank outlives --timeout + grace, that the job's output has `names`
# (the line that names the failed operation or peer), that the newest checkpoint reads, and that
# --resume with the hosts whole again ends with the uninterrupted run's digest.
fault_case() {
  local name=$1 fault=$2 names=$3 ck="$work/ck-$1"
  local run=("$multigrad" train "${long[@]}" --parallel ddp --backend mpi --checkpoint-dir "$ck" --checkpoint-every 20)
  "${mpi[@]}" "${run[@]}" >"$work/$name.log" 2>&1 &
  local job=$!
  for _ in $(seq 600); do
    compgen -G "$ck/step-*.safetensors" >/dev/null && break
    sleep 0.1
  done
  compgen -G "$ck/step-*.safetensors" >/dev/null || fail "$name: no checkpoint after 60 s: $(cat "$work/$name.log")"
  eval "$fault"
  local cut=$SECONDS
  while (( SECONDS - cut < timeout_s + grace_s )); do
    [[ -z $(ip netns pids "${tag}h1"; ip netns pids "${tag}h2") ]] && break
    [[ -z $(for h in 1 2; do ip netns pids "${tag}h$h" | xargs -r ps -o comm= -p | grep multigrad; done) ]] && break
    sleep 0.2
  done
  local left
  left=$(for h in 1 2; do ip netns pids "${tag}h$h" | xargs -r ps -o comm= -p | grep multigrad; done)
  [[ -z $left ]] || fail "$name: ranks still running $((SECONDS - cut)) s after the fault: $left"
  say "$name: every rank ended within $((SECONDS - cut)) s (--timeout $timeout_s)"
  grep -qF "$names" "$work/$name.log" || fail "$name: no line with '$names': $(grep -v '^\[' "$work/$name.log" | head -30)"
  # mpirun may wait on for a daemon it cannot reach (a cut link): past the ranks, it is ended, and
  # OpenMPI 4.1's mpirun then dies in PMIx_Finalize (bash reports the segmentation fault).
  kill "$job" 2>/dev/null
  wait "$job"
  for h in 1 2; do for pid in $(ip netns pids "${tag}h$h"); do kill -9 "$pid" 2>/dev/null; done; done
  ip link set "${tag}v1" up
  ip link set "${tag}v2" up

  local newest
  newest=$(ls -v "$ck"/step-*.safetensors | tail -1)
  "$multigrad" eval --checkpoint "$newest" --test-limit 10 >/dev/null 2>&1 || fail "$name: $newest does not read"
  out=$(timeout 300 "${mpi[@]}" "${run[@]}" --resume 2>&1) || fail "$name: the resumed run failed: $out"
  [[ $(digests <<<"$out" | sort -u) == "$want" ]] ||
    fail "$name: resumed from $newest, the ranks ended with $(digests <<<"$out" | tr '\n' ' '), an uninterrupted run with $want"
  say "$name: resumed from $(basename "$newest"), ends bit-identical to the uninterrupted run"
}

# The rank on host 1 times out, names the operation and its peer, and ends the job (mpi_abort).
fault_case "link cut" "ip link set ${tag}v2 down" \
  "multigrad train: rank 0 of 2: all_reduce #"
grep -q "timed out after $((timeout_s * 1000)) ms (waiting for rank 1)" "$work/link cut.log" ||
  fail "link cut: the timeout does not name the peer: $(grep 'timed out' "$work/link cut.log")"
# The daemon on host 1 sees its peer host vanish and ends its rank; OpenMPI names that host.
fault_case "host killed" 'for pid in $(ip netns pids "${tag}h2"); do kill -9 "$pid"; done' \
  "Peer host:  ${hosts[1]}"

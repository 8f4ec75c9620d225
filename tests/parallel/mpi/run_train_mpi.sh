#!/usr/bin/env bash
# tests/parallel/mpi/run_train_mpi.sh — `multigrad train --backend mpi` with one rank per
# process: with --deterministic, DDP and ZeRO-1, -2 and -3 on 2 processes end with the params_sha256 of one
# process running --grad-accum 2, and a pipeline on 2 or 3 processes (a stage each; interleaved: two
# chunks each) with that of --grad-accum 4 (the MLP, the CNN with batch norm, and a GPT whose tied
# head and embedding sit on different ranks, evaluated between steps and resumed from a step
# checkpoint to the same digest); tensor parallelism (the MLP, the GPT) over processes
# equals it over threads (the GPT also with sequence parallelism), and so do the meshes tp x pp
# and dp x tp with ZeRO-2; fp16 ZeRO-2 with
# skipped steps equals --grad-accum 2; a rank's error
# ends the job at once, non-zero, naming the rank.
#
# usage: run_train_mpi.sh MPIEXEC MULTIGRAD
set -uo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 MPIEXEC MULTIGRAD" >&2
  exit 2
fi
mpiexec=$1 multigrad=$2
fail() {
  echo "run_train_mpi: $*" >&2
  exit 1
}
digests() { grep -o 'params_sha256: [0-9a-f]*' | cut -d' ' -f2; }

for model in "mlp --limit 3200 --batch-size 32" "cnn --limit 400 --batch-size 8"; do
  common="--model $model --epochs 1 --test-limit 1000 --deterministic --optimizer adam"
  # shellcheck disable=SC2086
  one=$("$multigrad" train $common --grad-accum 2) || fail "one process ($model) failed"
  # shellcheck disable=SC2086
  two=$("$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$multigrad" train $common \
        --parallel ddp --backend mpi 2>&1) || fail "mpiexec ($model) failed: $two"
  want=$(echo "$one" | digests)
  got=$(echo "$two" | digests | sort -u)
  [[ $(echo "$two" | digests | wc -l) -eq 2 ]] || fail "expected a digest from each of 2 ranks ($model): $two"
  [[ "$got" == "$want" ]] || fail "($model) ranks ended with $got, one process with --grad-accum 2 with $want"
  echo "run_train_mpi: $model: 2 ranks == --grad-accum 2 ($want)"
  # shellcheck disable=SC2086
  for stage in zero1 zero2 zero3; do
    # shellcheck disable=SC2086
    zero=$("$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$multigrad" train $common \
           --parallel $stage --backend mpi 2>&1) || fail "mpiexec $stage ($model) failed: $zero"
    [[ $(echo "$zero" | digests | sort -u) == "$want" && $(echo "$zero" | digests | wc -l) -eq 2 ]] ||
      fail "($model) $stage ranks ended with $(echo "$zero" | digests | tr '\n' ' '), --grad-accum 2 with $want"
    echo "run_train_mpi: $model: $stage on 2 ranks == --grad-accum 2"
  done
done

# --parallel tp: not bit-identical to one device (parallel/tensor/tensor_parallel.h), but the same sums
# in the same order over MPI as over threads. usage: tp_processes_equal_threads NAME FLAGS...
tp_processes_equal_threads() {
  local name=$1 threads procs want
  shift
  threads=$("$multigrad" train "$@" --parallel tp --devices cpu:0,cpu:1 2>&1) || fail "$name tp on threads failed: $threads"
  procs=$("$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$multigrad" train "$@" --parallel tp --backend mpi 2>&1) ||
    fail "$name tp on 2 processes failed: $procs"
  want=$(echo "$threads" | digests | sort -u)
  [[ $(echo "$procs" | digests | sort -u) == "$want" && $(echo "$procs" | digests | wc -l) -eq 2 ]] ||
    fail "$name tp on 2 processes ended with $(echo "$procs" | digests | tr '\n' ' '), on 2 threads with $want"
  echo "run_train_mpi: $name tp on 2 processes == tp on 2 threads ($want)"
}
# shellcheck disable=SC2086
tp_processes_equal_threads mlp --model mlp --limit 1600 --batch-size 32 --epochs 1 --test-limit 500 --deterministic \
  --optimizer adam

# Meshes of 4 processes, tp pairs within them: a 2-stage pipeline (tp x pp), and ZeRO-2 across the
# dp pairs (dp x tp) each end with tp's --grad-accum 2 on 2 threads; then dp x pp.
common="--model mlp --limit 512 --batch-size 32 --epochs 1 --test-limit 200 --deterministic --optimizer adam"
# shellcheck disable=SC2086
want=$("$multigrad" train $common --parallel tp --grad-accum 2 --devices cpu:0,cpu:1 2>&1 | digests | sort -u) ||
  fail "tp --grad-accum 2 on threads failed"
for mesh in "--mesh tp=2,pp=2 --micro-batches 2" "--mesh dp=2,tp=2 --parallel zero2"; do
  # shellcheck disable=SC2086
  procs=$("$mpiexec" --allow-run-as-root --oversubscribe -np 4 "$multigrad" train $common $mesh --backend mpi 2>&1) ||
    fail "$mesh on 4 processes failed: $procs"
  [[ $(echo "$procs" | digests | sort -u) == "$want" && $(echo "$procs" | digests | wc -l) -eq 4 ]] ||
    fail "$mesh on 4 processes ended with $(echo "$procs" | digests | tr '\n' ' '), tp --grad-accum 2 with $want"
  echo "run_train_mpi: $mesh on 4 processes == tp --grad-accum 2 on 2 threads ($want)"
done
# dp x pp: DDP across two 2-stage pipelines of processes ends with ddp's --grad-accum 2 on 2 threads.
# shellcheck disable=SC2086
want=$("$multigrad" train $common --parallel ddp --grad-accum 2 --devices cpu:0,cpu:1 2>&1 | digests | sort -u) ||
  fail "ddp --grad-accum 2 on threads failed"
# shellcheck disable=SC2086
procs=$("$mpiexec" --allow-run-as-root --oversubscribe -np 4 "$multigrad" train $common --mesh dp=2,pp=2 \
        --micro-batches 2 --backend mpi 2>&1) || fail "--mesh dp=2,pp=2 on 4 processes failed: $procs"
[[ $(echo "$procs" | digests | sort -u) == "$want" && $(echo "$procs" | digests | wc -l) -eq 4 ]] ||
  fail "--mesh dp=2,pp=2 on 4 processes ended with $(echo "$procs" | digests | tr '\n' ' '), ddp with $want"
echo "run_train_mpi: --mesh dp=2,pp=2 on 4 processes == ddp --grad-accum 2 on 2 threads ($want)"

# --parallel pipeline --backend mpi: one process per stage, against --grad-accum m (clipping: the
# stages sum their parts of the norm).
for run in "3 gpipe mlp --limit 1600 --batch-size 32" "2 1f1b cnn --limit 320 --batch-size 16" \
           "2 interleaved mlp --limit 1600 --batch-size 32" "3 1f1b mlp --limit 800 --batch-size 32 --clip-grad-norm 0.05"; do
  read -r np schedule rest <<<"$run"
  common="--model $rest --epochs 1 --test-limit 1000 --deterministic"
  # shellcheck disable=SC2086
  one=$("$multigrad" train $common --grad-accum 4) || fail "one process ($rest) failed"
  # shellcheck disable=SC2086
  many=$("$mpiexec" --allow-run-as-root --oversubscribe -np "$np" "$multigrad" train $common \
         --parallel pipeline --backend mpi --micro-batches 4 --schedule "$schedule" 2>&1) ||
    fail "a $schedule pipeline over $np processes ($rest) failed: $many"
  want=$(echo "$one" | digests)
  got=$(echo "$many" | digests | sort -u)
  [[ $(echo "$many" | digests | wc -l) -eq $np ]] || fail "expected a digest from each of $np ranks ($rest): $many"
  [[ "$got" == "$want" ]] || fail "($schedule, $rest) the pipeline's ranks ended with $got, --grad-accum 4 with $want"
  echo "run_train_mpi: $schedule pipeline on $np processes, $rest == --grad-accum 4 ($want)"
done

# A GPT on 2 processes: the head on rank 1 is tied to the token embedding on rank 0. Its
# evaluation at step 3 sees both stages' parameters of that step (the one process's figures), and
# its step-3 checkpoint both stages' AdamW state (each from the process that trains it): resumed,
# it ends with the uninterrupted run's digest.
text=$(mktemp)
ckdir=$(mktemp -d)
trap 'rm -rf "$text" "$ckdir"' EXIT
for i in $(seq 400); do echo "line $i: the quick brown fox jumps over the lazy dog $((i % 7))"; done >"$text"
common="--model gpt --config tiny --data $text --max-steps 6 --batch-size 8 --test-limit 8 --deterministic \
  --eval-every 3"
# shellcheck disable=SC2086
one=$("$multigrad" train $common --grad-accum 4) || fail "one process (gpt) failed"
# shellcheck disable=SC2086
pipeline="--parallel pipeline --backend mpi --micro-batches 4 --checkpoint-every 3 --checkpoint-dir $ckdir"
# shellcheck disable=SC2086
many=$("$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$multigrad" train $common $pipeline 2>&1) ||
  fail "a gpt pipeline over 2 processes failed: $many"
want=$(echo "$one" | digests)
[[ $(echo "$many" | digests | sort -u) == "$want" && $(echo "$many" | digests | wc -l) -eq 2 ]] ||
  fail "the gpt pipeline's ranks ended with $(echo "$many" | digests | tr '\n' ' '), --grad-accum 4 with $want"
echo "run_train_mpi: gpt 1f1b pipeline on 2 processes == --grad-accum 4 ($want)"
# Its MFU's peak: the two processes share this host's threads (unknown where no clock rate is found).
share=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))
grep -q "^mfu: unknown\|peak: 2 devices of $share threads x" <<<"$many" ||
  fail "the MFU of 2 processes on one host does not count $share threads each: $(grep '^mfu' <<<"$many")"
[[ $(echo "$many" | grep '^step 3:') == $(echo "$one" | grep '^step 3:') ]] ||
  fail "the gpt pipeline's evaluation at step 3 ($(echo "$many" | grep '^step 3:')) is not one process's" \
       "($(echo "$one" | grep '^step 3:'))"
rm -f "$ckdir/step-6.safetensors"
# shellcheck disable=SC2086
resumed=$("$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$multigrad" train $common $pipeline --resume 2>&1) ||
  fail "the gpt pipeline resumed from step 3 failed: $resumed"
[[ $(echo "$resumed" | digests | sort -u) == "$want" ]] ||
  fail "the gpt pipeline resumed from step 3 ended with $(echo "$resumed" | digests | tr '\n' ' '), not $want"
echo "run_train_mpi: gpt pipeline resumed from its step-3 checkpoint == uninterrupted ($want)"

# The GPT split by heads; fp16 whose first steps overflow: ZeRO-2's processes skip together and
# equal one process with --grad-accum 2.
# shellcheck disable=SC2086
tp_processes_equal_threads gpt $common
# shellcheck disable=SC2086
tp_processes_equal_threads "gpt (sequence parallel)" $common --sequence-parallel
fp16="--precision fp16 --init-loss-scale 1048576"
# shellcheck disable=SC2086
one=$("$multigrad" train $common $fp16 --grad-accum 2) || fail "one process (gpt fp16) failed"
# shellcheck disable=SC2086
procs=$("$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$multigrad" train $common $fp16 --parallel zero2 \
        --backend mpi 2>&1) || fail "gpt fp16 zero2 on 2 processes failed: $procs"
want=$(echo "$one" | digests)
grep -q "steps skipped" <<<"$one" && ! grep -q "(0 steps skipped" <<<"$one" || fail "no fp16 step was skipped: $one"
[[ $(echo "$procs" | digests | sort -u) == "$want" && $(echo "$procs" | digests | wc -l) -eq 2 ]] ||
  fail "gpt fp16 zero2 on 2 processes ended with $(echo "$procs" | digests | tr '\n' ' '), --grad-accum 2 with $want"
echo "run_train_mpi: gpt fp16 zero2 on 2 processes == --grad-accum 2 ($want)"

# Rank 1 of 2 gets a device list of the wrong length: both ranks fail the same check; the job
# ends non-zero at once with the message.
start=$(date +%s)
out=$(timeout 120 "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$multigrad" train --limit 256 --epochs 1 \
      --parallel ddp --backend mpi --devices cpu:0,cpu:0,cpu:0 2>&1)
status=$?
[[ $status -ne 0 && $status -ne 124 ]] || fail "a bad --devices under mpirun exited $status: $out"
[[ $(($(date +%s) - start)) -lt 60 ]] || fail "the failed job took more than 60 s"
grep -q "multigrad train: rank [01] of 2: --devices 'cpu:0,cpu:0,cpu:0' lists 3 devices for 2 MPI ranks" <<<"$out" ||
  fail "no clear error naming the rank and the devices: $out"
echo "run_train_mpi: a bad --devices ends the job (exit $status)"

# Ranks started with different settings (mpirun's MPMD form): every rank stops before any work,
# naming the setting and each rank's value, instead of crashing in a collective (--batch-size)
# or silently training apart (--lr, --seed, --deterministic).
run=(--limit 256 --epochs 1 --test-limit 100 --parallel ddp --backend mpi)
for pair in "--batch-size 64|--batch-size 32|--batch-size: rank 0 has '64', rank 1 has '32'" \
            "--lr 0.1|--lr 0.05|--lr: rank 0 has '0.1', rank 1 has '0.05'" \
            "--seed 1|--seed 2|--seed: rank 0 has '1', rank 1 has '2'" \
            "--optimizer sgd|--optimizer adam|--optimizer: rank 0 has 'sgd', rank 1 has 'adam'" \
            "--deterministic|--workers 1|--deterministic: rank 0 has '1', rank 1 has '0'" \
            "--trace $ckdir/trace.json|--workers 1|--trace: rank 0 has 'a file', rank 1 has 'none'" \
            "--detect-anomaly|--workers 1|--detect-anomaly: rank 0 has '1', rank 1 has '0'"; do
  IFS='|' read -r zero one message <<<"$pair"
  # shellcheck disable=SC2086
  out=$(timeout 120 "$mpiexec" --allow-run-as-root --oversubscribe -np 1 "$multigrad" train "${run[@]}" $zero \
        : -np 1 "$multigrad" train "${run[@]}" $one 2>&1)
  status=$?
  [[ $status -ne 0 && $status -ne 124 ]] || fail "ranks with $zero and $one exited $status: $out"
  grep -qF "the ranks disagree on $message" <<<"$out" || fail "no line naming $zero and $one: $out"
  ! grep -q "params_sha256" <<<"$out" || fail "ranks with $zero and $one trained: $out"
  echo "run_train_mpi: ranks with $zero and $one are refused (exit $status)"
done

# --devices cpu:0,cpu:1 names one device per rank (no MG_CPU_DEVICES needed); --trace has every
# rank's lanes; the ranks' output is plain lines (mpirun gives them a pseudo-terminal).
trace=$(mktemp --suffix .json)
out=$(timeout 300 "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$multigrad" train "${run[@]}" \
      --devices cpu:0,cpu:1 --trace "$trace" 2>&1) || fail "--devices cpu:0,cpu:1 --trace under mpirun failed: $out"
for lane in '"name":"rank 0"' '"name":"rank 1"' '"name":"rank 0 all-reduce"' '"name":"rank 1 all-reduce"'; do
  grep -qF "$lane" "$trace" || fail "the trace has no lane $lane: $(head -c 300 "$trace")"
done
rm -f "$trace"
! grep -q $'\r' <<<"$out" || fail "carriage returns in the output of ranks whose stdout is not a terminal"
echo "run_train_mpi: --devices cpu:0,cpu:1 and --trace with every rank's lanes under mpirun"

# Started by mpirun without --backend mpi: a warning on every rank that each process trains alone.
out=$(timeout 300 "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$multigrad" train --limit 256 --epochs 1 \
      --test-limit 100 2>&1) || fail "mpirun without --backend mpi failed: $out"
[[ $(grep -c "was started by mpirun as one of 2 processes, but with --backend local" <<<"$out") -eq 2 ]] ||
  fail "no warning on each rank for mpirun without --backend mpi: $out"
echo "run_train_mpi: mpirun without --backend mpi warns"

#!/usr/bin/env bash
# tests/scripts/test_gpu_check.sh — the parts of scripts/gpu-check.sh that run anywhere: its
# arguments, the budget (steps cut when it runs out, a report either way), the files it returns,
# and scripts/transfer-size.sh. The steps themselves are rehearsed by `gpu-check.sh --rehearse`.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check WHAT CONDITION...
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; fails=$((fails + 1)); fi
}
run() {  # run NAME [ENV=VALUE...] -- ARGS...: gpu-check.sh's exit status in $rc, its output in $tmp/NAME.out
  local name=$1
  shift
  local env=()
  while [[ $1 != -- ]]; do env+=("$1"); shift; done
  shift
  mkdir -p "$tmp/$name"
  env OUT="$tmp/$name" "${env[@]}" bash "$repo/scripts/gpu-check.sh" "$@" >"$tmp/$name.out" 2>&1
  rc=$?
}

run bad-flag -- --bogus
check "an unknown flag is a usage error" test "$rc" -eq 2
check "it names the flag" grep -q "unknown argument '--bogus'" "$tmp/bad-flag.out"
run bad-dry -- --dry-run soon
check "--dry-run needs seconds" test "$rc" -eq 2
run bad-budget GPU_CHECK_BUDGET_S=ten -- --dry-run 0
check "a budget that is not a number is refused" test "$rc" -eq 2
check "naming the value" grep -q "got 'ten'" "$tmp/bad-budget.out"

# Ample budget: every step of the plan runs (a sleep) and passes.
run ample GPU_CHECK_BUDGET_S=120 -- --quick --dry-run 0
report="$tmp/ample/gpu-report.md"
check "a dry run within its budget exits 0" test "$rc" -eq 0
check "it returns the report, the results and the logs, and nothing else" \
  test "$(ls "$tmp/ample" | tr '\n' ' ')" = "gpu-logs.tar.gz gpu-report.md gpu-results.jsonl "
check "every step of the plan is in the report as ok" test "$(grep -cE '^\| [0-9]+ \| .* \| ok \|' "$report")" -eq 17
check "nothing is left unrun" bash -c "! grep -q 'Not run' '$report'"
check "the logs archive holds each step's log" bash -c "tar tzf '$tmp/ample/gpu-logs.tar.gz' | grep -q 'logs/cuda-tests.log'"

# A budget too small for the plan: the first steps run, the rest are cut, and the report says so.
run tiny GPU_CHECK_BUDGET_S=4 -- --quick --dry-run 1
report="$tmp/tiny/gpu-report.md"
check "a run out of budget exits 1" test "$rc" -eq 1
check "it still writes the report" test -s "$report"
check "some steps ran" grep -qE '^\| 1 \| preflight \| ok \|' "$report"
check "the others are cut, saying why" grep -qE '\| CUT \| 0 \| not started: [0-9]+ s of the budget left' "$report"
check "every step of the plan is listed" test "$(grep -cE '^\| [0-9]+ \| ' "$report")" -eq 17

# The transfer: the tree alone fits the 60 MiB this project allows itself; a limit it exceeds
# lists the largest files and fails.
"$repo/scripts/transfer-size.sh" >"$tmp/size.out" 2>&1
check "the tree fits a device call" test $? -eq 0
"$repo/scripts/transfer-size.sh" --limit 1 >"$tmp/size-over.out" 2>&1
check "over a limit, transfer-size fails" test $? -eq 1
check "and lists the largest files" grep -q 'tests/golden/cnn.safetensors' "$tmp/size-over.out"
"$repo/scripts/transfer-size.sh" no-such-path >"$tmp/size-missing.out" 2>&1
check "a carried path that does not exist is an error" test $? -eq 2

((fails == 0)) || { echo "$fails check(s) failed"; exit 1; }

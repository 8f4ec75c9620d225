#!/usr/bin/env bash
# scripts/transfer-size.sh — what a call of the GPU machine would send, against its limit.
#
# The device tool sends the working tree's tracked files, the untracked files git does not
# ignore, and the paths named in `carry`, 64 MiB in all. This adds them up the same way (the
# files as they are on disk now) and compares the sum with LIMIT MiB (default 60, leaving room).
#
# usage: scripts/transfer-size.sh [--limit MIB] [CARRIED_PATH...]
# Prints the total; over the limit it lists the largest files and what can be left out, and
# exits 1.
set -euo pipefail

limit_mib=60
if [[ ${1:-} == --limit ]]; then
  [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "transfer-size: --limit needs a whole number of MiB" >&2; exit 2; }
  limit_mib=$2
  shift 2
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

sizes=$(mktemp)
trap 'rm -f "$sizes"' EXIT
# "<bytes> <path>" for every file that travels; a tracked file deleted here travels as nothing.
git ls-files -z --cached --others --exclude-standard | sort -zu |
  xargs -0 -r stat -c '%s %n' 2>/dev/null >"$sizes" || true
for carried in "$@"; do
  [[ -e $carried ]] || { echo "transfer-size: the carried path '$carried' does not exist" >&2; exit 2; }
  find "$carried" -type f -printf '%s %p\n' >>"$sizes"
done

total=$(awk '{ s += $1 } END { print s + 0 }' "$sizes")
mib=$(awk -v b="$total" 'BEGIN { printf "%.1f", b / 1048576 }')
echo "transfer-size: ${mib} MiB would travel (the tree and ${#} carried path(s)); the limit here is ${limit_mib} MiB, the tool's 64"
if awk -v b="$total" -v l="$limit_mib" 'BEGIN { exit !(b > l * 1048576) }'; then
  echo "transfer-size: over the limit; the largest files:"
  # awk reads all of sort's output: with `head`, sort could die of SIGPIPE and, under pipefail,
  # turn this exit 1 into 141.
  sort -rn "$sizes" | awk 'NR <= 10 { printf "  %7.1f MiB  %s\n", $1 / 1048576, $2 }'
  echo "transfer-size: carried paths are the first to leave out (gpu-check.sh needs only .deps/gpu-deps.tar.gz);"
  echo "  untracked files that git does not ignore travel too: ignore or remove those the run does not read."
  echo "  tests/golden/*.safetensors (about 20 MiB) are read by the CPU tests only: gpu-check.sh needs none of"
  echo "  them, and a checkout without them (git sparse-checkout) leaves them behind."
  exit 1
fi

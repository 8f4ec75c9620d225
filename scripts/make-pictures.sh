#!/usr/bin/env bash
# The docs' pictures (docs/pictures/), each made from the project's own runs; rerun it after a
# change that moves one. Not part of `make test`.
#   schedule-1f1b.svg, schedule-interleaved.svg   `multigrad schedule --svg` (the C++ writes them)
#   ddp-timeline.svg    a DDP step's --trace on 2 ranks: backward beside each bucket's all-reduce
#   memory-per-mode.svg bench_ddp --quick: what a rank holds per mode and rank count, beside
#                       parallel/memory_model.h's formula, and the step's peak
#   gpt-loss.svg        the small GPT's validation loss every 25 of 300 steps, beside its PyTorch
#                       twin (benchmarks/torch/gpt_convergence.py), seed 0
# The last three are drawn by scripts/plot_pictures.py with matplotlib, from the git-ignored .venv
# (PYTHON overrides; it also needs torch, as scripts/bench-vs-torch.sh sets up). BUILD_DIR
# (default build): the Release build, made with `make build` when missing.
#
# usage: scripts/make-pictures.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
build_dir=${BUILD_DIR:-build}
python=${PYTHON:-.venv/bin/python}
out=docs/pictures
[[ -x "$build_dir/multigrad" && -x "$build_dir/benchmarks/bench_ddp" ]] || make build BUILD_DIR="$build_dir"
"$python" -c "import matplotlib, torch" 2>/dev/null || {
  echo "make-pictures: $python needs matplotlib and torch (.venv/bin/pip install matplotlib torch)" >&2
  exit 1
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

"$build_dir/multigrad" schedule --stages 4 --micro-batches 8 --schedule 1f1b --svg "$out/schedule-1f1b.svg" >/dev/null
"$build_dir/multigrad" schedule --stages 4 --micro-batches 8 --schedule interleaved --chunks 2 \
  --svg "$out/schedule-interleaved.svg" >/dev/null

# Small buckets, so that the MLP's gradients go in several all-reduces.
"$build_dir/multigrad" train --parallel ddp --devices cpu:0,cpu:1 --max-steps 20 --bucket-cap-mb 0.1 \
  --trace "$work/ddp-trace.json" >"$work/ddp.txt"
"$build_dir/benchmarks/bench_ddp" --quick >"$work/bench_ddp.jsonl"
"$build_dir/multigrad" train --model gpt --max-steps 300 --eval-every 25 --seed 0 >"$work/gpt-multigrad.txt"
"$python" benchmarks/torch/gpt_convergence.py --steps 300 --eval-every 25 --seed 0 --threads "$(nproc)" \
  >"$work/gpt-pytorch.txt"

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
"$python" scripts/plot_pictures.py --work "$work" --out "$out" --cpu "$cpu" --date "$(date +%F)"
ls -l "$out"

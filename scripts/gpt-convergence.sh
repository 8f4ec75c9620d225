#!/usr/bin/env bash
# The GPT's convergence against PyTorch (issue 18): `multigrad train --model gpt` with its
# defaults (the small config on the fortunes' bytes, 1000 steps of 32 windows, AdamW, cosine)
# beside its PyTorch twin benchmarks/torch/gpt_convergence.py (the same text, split, model,
# optimizer, schedule and evaluation; its own random numbers), for each seed, one after the
# other, then a sample that `multigrad generate` writes from the first seed's checkpoint. Prints
#   <side> seed <s>: val_loss <x> val_bpb <y> tokens_per_s <z>
# and the sample. A benchmark, not a test: not part of `make test`.
#
# usage: scripts/gpt-convergence.sh [SEED ...]   (default: 0 1)
# BUILD_DIR (default build): the Release build; PYTHON: a Python with torch (default .venv/bin/python,
# which scripts/bench-vs-torch.sh sets up); PRECISION (default fp32): fp32 or bf16, for both sides
# (multigrad's --precision, PyTorch's autocast).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
build_dir=${BUILD_DIR:-build}
python=${PYTHON:-.venv/bin/python}
precision=${PRECISION:-fp32}
seeds=("$@")
((${#seeds[@]})) || seeds=(0 1)
[[ -x "$build_dir/multigrad" ]] || make build BUILD_DIR="$build_dir"
"$python" -c "import torch" || { echo "gpt-convergence: $python cannot import torch (run scripts/bench-vs-torch.sh once, or set PYTHON)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
summary() {  # the three lines of a run's output, on one line
  awk '/^(val_loss|val_bpb|tokens_per_s):/ { printf " %s %s", substr($1, 1, length($1) - 1), $2 } END { print "" }'
}
for seed in "${seeds[@]}"; do
  echo "multigrad seed $seed:$("$build_dir/multigrad" train --model gpt --seed "$seed" --precision "$precision" \
    --checkpoint-dir "$work/ck-$seed" 2>/dev/null | summary)"
  echo "pytorch seed $seed:$("$python" benchmarks/torch/gpt_convergence.py --seed "$seed" --threads "$(nproc)" \
    --precision "$precision" | summary)"
done
echo "sample (multigrad, seed ${seeds[0]}, --prompt 'The ' --tokens 200 --temperature 0.8 --top-k 40 --seed 1):"
"$build_dir/multigrad" generate --checkpoint "$work/ck-${seeds[0]}/step-1000.safetensors" --prompt "The " \
  --tokens 200 --temperature 0.8 --top-k 40 --seed 1 2>/dev/null

#!/usr/bin/env bash
# scripts/predict-gpt2.sh — GPT-2 124M's training step (batch 16 x 1024, AdamW) recorded by the CUDA
# simulator without running its kernels (MG_CUDA_SIM_EXECUTE=0), in bf16 and fp32, and each
# ledger's predicted H100 time (`multigrad predict`; docs/cost-model.md). Predicted, not measured.
#
# Usage: scripts/predict-gpt2.sh OUT_DIR   (after `make sim`; about 10 minutes on 2 cores)
# Writes, per precision P: OUT_DIR/gpt2-P.jsonl.gz (step 2's ledger), gpt2-P.train.txt (the run's
# output: its losses are zeros, no kernel ran) and gpt2-P.predicted.txt.
#
# The text only has to yield GPT-2's 50,257-token BPE vocabulary (the shapes are what the ledger
# records; the values are never computed): Debian's fortunes and Python's standard library
# (its tests left out), about 13 MB, do; either alone runs out of pairs first.
set -euo pipefail
out=${1:?usage: scripts/predict-gpt2.sh OUT_DIR}
cli=${MG_SIM_CLI:-build-sim/multigrad}
[[ -x $cli ]] || { echo "predict-gpt2: $cli is not built (make sim)" >&2; exit 1; }
mkdir -p "$out"
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
find /usr/share/games/fortunes -maxdepth 1 -type f -exec cp {} "$corpus"/ \;
stdlib=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
find "$stdlib" -maxdepth 2 -type f -name '*.py' -not -path '*/test*' -not -path '*-packages/*' | sort |
  xargs cat > "$corpus/python-stdlib.py"
for precision in bf16 fp32; do
  ledger="$out/gpt2-$precision.jsonl"
  MG_CUDA_SIM_EXECUTE=0 "$cli" train --model gpt --config gpt2 --data "$corpus" --tokenizer bpe --vocab-size 50257 \
    --devices cuda:0 --batch-size 16 --precision "$precision" --max-steps 2 --test-limit 16 --ledger "$ledger" \
    > "$out/gpt2-$precision.train.txt"
  "$cli" predict "$ledger" > "$out/gpt2-$precision.predicted.txt"
  gzip -f "$ledger"
  echo "predict-gpt2: $precision: $(grep -E '^predicted_(step_ms|tokens_per_s)' "$out/gpt2-$precision.predicted.txt" | tr '\n' ' ')"
done

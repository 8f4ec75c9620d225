#!/usr/bin/env python3
"""Record-only mode of the CUDA simulator (MG_CUDA_SIM_EXECUTE=0, sim/ledger.h) through the
simulated build's CLI: a tiny GPT's step recorded without running kernels leaves the same
launches, GEMMs, copies, memsets and host synchronisations as the same step run in full (the grids
aside: record-only sizes them for an H100's 132 SMs), says on stderr that the host read zeros, and
`multigrad predict` prices it. A value other than 0 or 1 is refused, naming it.

Usage: test_record_only.py BUILD_SIM_MULTIGRAD
"""
import collections
import json
import os
import subprocess
import sys
import tempfile

RUN = ["train", "--model", "gpt", "--config", "tiny", "--devices", "cuda:0", "--max-steps", "2",
       "--batch-size", "4", "--test-limit", "8"]
# What must match between the two runs: everything an entry says but its order, thread and stream
# (the loader thread's entries interleave with the step's differently), its grid, and the step
# entry's record_only.
VARYING = ("seq", "thread", "stream", "grid", "record_only")


def run(cli, env_value, ledger):
    env = dict(os.environ)
    env.pop("MG_CUDA_SIM_LEDGER", None)
    if env_value is None:
        env.pop("MG_CUDA_SIM_EXECUTE", None)
    else:
        env["MG_CUDA_SIM_EXECUTE"] = env_value
    return subprocess.run([cli, *RUN, "--ledger", ledger], env=env, capture_output=True, text=True)


def entries(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def summary(path):
    return collections.Counter(json.dumps({k: v for k, v in e.items() if k not in VARYING}, sort_keys=True)
                               for e in entries(path))


def main():
    cli = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        full, recorded = os.path.join(tmp, "full.jsonl"), os.path.join(tmp, "recorded.jsonl")
        ran = run(cli, None, full)
        if ran.returncode != 0:
            sys.exit(f"the full run failed ({ran.returncode}): {ran.stderr}")
        rec = run(cli, "0", recorded)
        if rec.returncode != 0:
            sys.exit(f"the record-only run failed ({rec.returncode}): {rec.stderr}")
        if "record only (MG_CUDA_SIM_EXECUTE=0)" not in rec.stderr or "reads zeros" not in rec.stderr:
            failures.append(f"record-only did not say the host reads zeros: {rec.stderr!r}")
        if "record only" in ran.stderr:
            failures.append("the full run says record only")
        a, b = summary(full), summary(recorded)
        if a != b:
            failures.append(f"the ledgers differ: only in the full run {a - b}, only in record-only {b - a}")
        launches = [e for e in entries(recorded) if e["event"] == "launch"]
        if not launches or any(e["bytes"] <= 0 for e in launches):
            failures.append("record-only ledger: no launches, or a launch without its bytes")
        step = [e for e in entries(recorded) if e["event"] == "step"]
        if len(step) != 1 or step[0]["record_only"] is not True or step[0]["tokens"] <= 0:
            failures.append(f"record-only ledger's step entry: {step}")
        predicted = subprocess.run([cli, "predict", recorded], capture_output=True, text=True)
        if predicted.returncode != 0 or "predicted_step_ms:" not in predicted.stdout or \
                "predicted_tokens_per_s:" not in predicted.stdout:
            failures.append(f"multigrad predict: {predicted.returncode} {predicted.stdout!r} {predicted.stderr!r}")
        bad = run(cli, "yes", os.path.join(tmp, "bad.jsonl"))
        if bad.returncode == 0 or "MG_CUDA_SIM_EXECUTE='yes'" not in bad.stderr:
            failures.append(f"MG_CUDA_SIM_EXECUTE=yes was not refused: {bad.returncode} {bad.stderr!r}")
    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    print(f"record-only: {sum(a.values())} entries, the same as the full run's; predicted")


if __name__ == "__main__":
    main()

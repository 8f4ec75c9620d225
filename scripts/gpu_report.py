#!/usr/bin/env python3
"""The report of scripts/gpu-check.sh, and the parsers that turn its step logs into JSON lines.

gpu-check.sh keeps everything it measures as JSON lines (gpu-results.jsonl, one object per line,
each with a "kind"); the markdown report is made from those lines alone, after every step, so a
run cut at any point still leaves a report of what it measured.

  gpu_report.py ctest LABEL LOG         a {"kind": "tests"} line from a ctest log
  gpu_report.py sanitizer TOOL LOG      a {"kind": "sanitizer"} line from compute-sanitizer's log
  gpu_report.py rows SOURCE LOG         each JSON line of a benchmark's log, as {"kind": "bench"}
                                        (or "kernel_time"), with "source": SOURCE
  gpu_report.py devices LOG             a {"kind": "devices"} line: `multigrad devices`' text and
                                        cuda:0's peaks
  gpu_report.py train LOG               a {"kind": "train"} line: the `key: value` summary lines
                                        that `multigrad train` ends with
  gpu_report.py largest-batch RESULTS WORKLOAD [MOST]
                                        the largest batch cuda:0's memory holds for WORKLOAD, from
                                        its measured peak, at most MOST (256); nothing when none
                                        larger fits
  gpu_report.py report RESULTS OUT      the markdown report

Kinds written by gpu-check.sh itself: "run" (mode, budget, commit), "machine" (what preflight
read: GPU, clocks, driver, toolkit, libraries), "step" (name, status, seconds, note).
Standard library only: it runs under whatever python3 the GPU machine has.
"""
import json
import re
import sys

# ---- parsers of step logs ----


def parse_ctest(label, log_text):
    """ctest's summary: counts, and the names of failed and skipped tests."""
    out = {"kind": "tests", "label": label, "passed": None, "failed": None, "total": None, "failures": [], "skipped": []}
    m = re.search(r"(\d+)% tests passed, (\d+) tests? failed out of (\d+)", log_text)
    if m:
        out["failed"], out["total"] = int(m.group(2)), int(m.group(3))
        out["passed"] = out["total"] - out["failed"]
    for name, why in re.findall(r"^\s*\d+ - (.*) \(([A-Za-z ]+)\)\s*$", log_text, re.M):
        (out["skipped"] if why == "Skipped" else out["failures"]).append(f"{name} ({why})" if why != "Skipped" else name)
    if out["passed"] is not None:
        out["passed"] -= len(out["skipped"])  # ctest counts a skipped test as passed
    return out


def parse_sanitizer(tool, log_text):
    """compute-sanitizer's ERROR SUMMARY lines (one per run in the log) and their total."""
    summaries = re.findall(r"ERROR SUMMARY: (\d+) errors?", log_text)
    runs = re.findall(r"^== sanitizer run: (.*)$", log_text, re.M)
    return {"kind": "sanitizer", "tool": tool, "runs": runs, "summaries": [int(s) for s in summaries],
            "errors": sum(int(s) for s in summaries)}


def parse_rows(source, log_text):
    """Each JSON object line of a benchmark's output, tagged with its source."""
    rows = []
    for line in log_text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            row = json.loads(line)
        except ValueError:
            continue
        row["kind"] = "kernel_time" if "family" in row else "bench"
        row["source"] = source
        rows.append(row)
    return rows


def parse_devices(log_text):
    """`multigrad devices`' text, and cuda:0's memory and float32 and bf16 peaks in FLOP/s where it
    lists them."""
    out = {"kind": "devices", "text": log_text.strip()}
    for line in log_text.splitlines():
        if line.strip().startswith("cuda:0"):
            for rate, of in re.findall(r"([\d.]+) GFLOP/s (float32|bf16)", line):
                out["peak_" + of] = float(rate) * 1e9
            memory = re.search(r"([\d.]+) GiB", line)
            if memory:
                out["memory_bytes"] = float(memory.group(1)) * 2**30
    return out


def largest_batch(records, workload, fill=0.85, most=256):
    """The largest batch the GPU's memory holds for `workload`, from its measured row: its peak at
    its batch, scaled as if every byte grew with the batch (so an overestimate of what a sample
    costs, and the batch a safe one), to `fill` of cuda:0's memory. None when the row or the
    memory is missing, or when no larger batch fits."""
    rows = [r for r in records if r.get("kind") == "bench" and r.get("source") == "multigrad"
            and r.get("workload") == workload and r.get("peak_bytes")]
    devices = [r for r in records if r.get("kind") == "devices" and r.get("memory_bytes")]
    if not rows or not devices:
        return None
    batch = int(re.search(r"batch=(\d+)", rows[-1]["config"]).group(1))
    fits = int(batch * fill * devices[-1]["memory_bytes"] / rows[-1]["peak_bytes"])
    return min(fits, most) if fits > batch else None


def parse_train(log_text):
    """The summary lines `multigrad train` ends with (val_loss, tokens_per_s, mfu, peak_memory_mb, ...)."""
    out = {"kind": "train"}
    for key, value in re.findall(r"^([a-z_0-9]+): (.+)$", log_text, re.M):
        out[key] = value.strip()
    return out


# ---- the report ----

MAX_LISTED = 20  # skipped tests named one by one in the report; the rest counted

STATUS_MARK = {"ok": "ok", "failed": "FAILED", "cut": "CUT", "skipped": "skipped",
               "not on this machine": "not on this machine"}


def fmt(value, spec="{:.3g}"):
    return "—" if value is None else spec.format(value)


def gib(n):
    return None if n is None else n / 2**30


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def machine_lines(run, machine):
    rows = [
        ("where", "a dry run: every step only slept" if "dry run" in str(run.get("mode", ""))
         else "this machine, with the simulated CUDA build standing in for a GPU (--rehearse)"
         if run.get("rehearse") else "the GPU machine"),
        ("GPU", machine.get("gpu", "—")),
        ("clocks (SM / memory, MHz: now, max)", machine.get("clocks", "—")),
        ("driver / CUDA", machine.get("driver", "—")),
        ("nvcc", machine.get("nvcc", "—")),
        ("host", machine.get("host", "—")),
        ("cuBLAS", machine.get("cublas", "—")),
        ("cuDNN", machine.get("cudnn", "—")),
        ("NCCL", machine.get("nccl", "—")),
        ("PyTorch", machine.get("torch", "—")),
        ("compute-sanitizer", machine.get("sanitizer", "—")),
        ("network", machine.get("network", "—")),
        ("commit", run.get("commit", "—")),
        ("mode, budget", f"{run.get('mode', '—')}, {run.get('budget_s', '—')} s"),
    ]
    return table(["", ""], rows)


def gpt_lines(benches, kernel_times, devices):
    """The GPT-2 rows of both sides, their ratio at each batch both ran, and multigrad's time by
    kernel family (taken at its first measured batch)."""
    lines = []
    gpt = [b for b in benches if b.get("workload", "").startswith("gpt2_train_step")]
    if not gpt:
        return ["(no GPT-2 step was measured: see the steps above)"]
    flops = next((b["flops_per_token"] for b in gpt if b.get("flops_per_token")), None)
    rows = []
    by_key = {}  # (precision, source, batch) -> row
    for b in gpt:
        precision = "bf16" if b["workload"].endswith("_bf16") else "fp32"
        peak = devices.get("peak_bf16" if precision == "bf16" else "peak_float32")
        mfu = b["throughput"] * flops / peak if flops and peak else None
        config = b.get("config", "")
        batch = re.search(r"batch=(\d+)", config)
        layout = re.search(r"config=(\w+)", config)
        batch = batch.group(1) if batch else "—"
        by_key.setdefault((precision, b["source"], batch), b)
        rows.append((precision, b["source"], layout.group(1) if layout else "—", batch,
                     fmt(b["throughput"], "{:,.0f}"), fmt(b["ms"], "{:.1f}"), fmt(mfu, "{:.3f}"),
                     fmt(gib(b.get("peak_bytes")), "{:.2f}")))
    lines += table(["precision", "side", "config", "batch", "tokens/s", "ms/step", "MFU", "peak GiB"], rows)
    lines.append("")
    lines.append(f"MFU: tokens/s x {fmt(flops, '{:.4g}')} FLOPs per token (nn::GPT::flops_per_token) over "
                 f"cuda:0's peak as `multigrad devices` gives it (float32 on CUDA cores for fp32: TF32 is off on "
                 f"both sides; tensor cores for bf16).")
    for (precision, source, batch), mine in by_key.items():
        theirs = by_key.get((precision, "torch", batch))
        if source == "multigrad" and theirs:
            lines.append(f"- {precision}, batch {batch}: multigrad takes {mine['ms'] / theirs['ms']:.2f}x "
                         f"PyTorch eager's time per step.")
    for precision, workload in (("bf16", "gpt2_train_step_bf16"), ("fp32", "gpt2_train_step")):
        times = [k for k in kernel_times if k.get("workload") == workload]
        step = next((b for b in gpt if b["workload"] == workload and b["source"] == "multigrad"), None)
        if not times:
            continue
        families = {}
        for k in times:
            f = families.setdefault(k["family"], {"ms": 0.0, "launches": 0.0, "top": None})
            f["ms"] += k["ms"]
            f["launches"] += k["launches"]
            if f["top"] is None or k["ms"] > f["top"]["ms"]:
                f["top"] = k
        total = sum(f["ms"] for f in families.values())
        lines += ["", f"### Time by kernel family, {precision} (per step, from steps timed kernel by kernel)", ""]
        rows = []
        for name, f in sorted(families.items(), key=lambda kv: -kv[1]["ms"]):
            share = f["ms"] / step["ms"] if step else None
            rows.append((name, fmt(f["ms"], "{:.2f}"), fmt(share, "{:.1%}"), fmt(f["launches"], "{:.0f}"),
                         f"{f['top']['kernel']} ({f['top']['ms']:.2f} ms)"))
        lines += table(["family", "ms", "of the step", "launches", "largest kernel"], rows)
        if step:
            lines.append(f"\nKernels and library calls account for {total:.1f} of the step's {step['ms']:.1f} ms; "
                         f"the rest is time the GPU ran none of them (host work, launch gaps, copies). "
                         f"No cost model to set beside these yet (issue 44).")
    return lines


def read_records(results_path):
    records = []
    with open(results_path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    records.append(json.loads(line))
                except ValueError:
                    records.append({"kind": "unreadable", "line": line})
    return records


def report(results_path, out_path):
    records = read_records(results_path)
    kinds = lambda k: [r for r in records if r.get("kind") == k]  # noqa: E731
    run = (kinds("run") or [{}])[-1]
    machine = {}
    for m in kinds("machine"):
        machine.update(m)
    devices = (kinds("devices") or [{}])[-1]
    steps = kinds("step")
    benches, kernel_times = kinds("bench"), kinds("kernel_time")
    title = "multigrad GPU check" + (" — rehearsal" if run.get("rehearse") else "")
    lines = [f"# {title}, {run.get('date', '')}", ""]
    lines += machine_lines(run, machine)
    lines += ["", "## Steps", ""]
    lines += table(["#", "step", "status", "seconds", "note"],
                   [(i + 1, s["name"], STATUS_MARK.get(s["status"], s["status"]), s.get("seconds", "—"),
                     s.get("note", "")) for i, s in enumerate(steps)])
    done = {s["name"] for s in steps}
    pending = [name for name in str(run.get("plan", "")).split(",") if name and name not in done]
    if pending:
        lines += ["", "Not run: " + ", ".join(pending) + " (the run ended before them; the steps above say why)."]
    lines += ["", "## GPT-2 124M training step (multigrad beside PyTorch eager)", ""]
    lines += gpt_lines(benches, kernel_times, devices)
    lines += ["", "## Tests", ""]
    for t in kinds("tests"):
        lines.append(f"- {t.get('label', 'ctest')}: {fmt(t['passed'], '{}')} passed, {fmt(t['failed'], '{}')} failed, "
                     f"{len(t['skipped'])} skipped, of {fmt(t['total'], '{}')}")
        lines += [f"  - FAILED: {name}" for name in t["failures"]]
        if t["skipped"] and len(t["skipped"]) == t["total"]:
            lines.append("  - every test skipped (no usable GPU: the log says why)")
        else:
            lines += [f"  - skipped: {name}" for name in t["skipped"][:MAX_LISTED]]
            if len(t["skipped"]) > MAX_LISTED:
                lines.append(f"  - and {len(t['skipped']) - MAX_LISTED} more skipped (the log lists them)")
    if not kinds("tests"):
        lines.append("(no test summary)")
    lines += ["", "## compute-sanitizer", ""]
    for s in kinds("sanitizer"):
        if not s["summaries"]:
            lines.append(f"- {s['tool']}: none of its {len(s['runs'])} runs reached an ERROR SUMMARY (see its log)")
            continue
        runs = ", ".join(f"{r}: {n}" for r, n in zip(s["runs"], s["summaries"]))
        lines.append(f"- {s['tool']}: {s['errors']} errors in the {len(s['summaries'])} of {len(s['runs'])} runs "
                     f"that reached their ERROR SUMMARY ({runs})")
    if not kinds("sanitizer"):
        lines.append("(not run)")
    ops = [b for b in benches if b.get("source") == "bench_ops"]
    lines += ["", "## bench_ops (elementwise against a device copy, the native SGEMM against cuBLAS)", ""]
    if ops:
        lines += table(["bench", "impl", "config", "ms", "rate", "baseline", "ratio"],
                       [(b["bench"], b["impl"], b["config"], b["ms"],
                         f"{b.get('gflops', b.get('gbps'))} {'GFLOP/s' if 'gflops' in b else 'GB/s'}",
                         b.get("baseline", ""), b.get("ratio", "")) for b in ops])
    else:
        lines.append("(not run)")
    others = [b for b in benches if b.get("source") not in ("bench_ops",)
              and not b.get("workload", "").startswith("gpt2_train_step")]
    if others:
        lines += ["", "## Other workloads", ""]
        lines += table(["source", "workload", "config", "ms", "throughput", "unit"],
                       [(b["source"], b.get("workload", "—"), b.get("config", ""), b.get("ms", "—"),
                         b.get("throughput", "—"), b.get("unit", "")) for b in others])
    for t in kinds("train"):
        lines += ["", "## multigrad train --model gpt (the command line end to end)", ""]
        lines += [f"- {key}: {value}" for key, value in t.items() if key != "kind"]
    if devices.get("text"):
        lines += ["", "## multigrad devices", "", "```", devices["text"], "```"]
    lines += ["", "Every step's full log is in gpu-logs.tar.gz; the lines this report was made from are "
              "gpu-results.jsonl."]
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv):
    usage = ("usage: gpu_report.py ctest LABEL LOG | sanitizer TOOL LOG | rows SOURCE LOG | devices LOG | train LOG"
             " | largest-batch RESULTS WORKLOAD [MOST] | report RESULTS OUT")
    if len(argv) < 2:
        sys.exit(usage)
    cmd, args = argv[1], argv[2:]
    read = lambda path: open(path, errors="replace").read()  # noqa: E731
    if cmd == "ctest" and len(args) == 2:
        print(json.dumps(parse_ctest(args[0], read(args[1]))))
    elif cmd == "sanitizer" and len(args) == 2:
        print(json.dumps(parse_sanitizer(args[0], read(args[1]))))
    elif cmd == "rows" and len(args) == 2:
        for row in parse_rows(args[0], read(args[1])):
            print(json.dumps(row))
    elif cmd == "devices" and len(args) == 1:
        print(json.dumps(parse_devices(read(args[0]))))
    elif cmd == "train" and len(args) == 1:
        print(json.dumps(parse_train(read(args[0]))))
    elif cmd == "largest-batch" and len(args) in (2, 3):
        batch = largest_batch(read_records(args[0]), args[1], most=int(args[2]) if len(args) == 3 else 256)
        if batch:
            print(batch)
    elif cmd == "report" and len(args) == 2:
        report(args[0], args[1])
    else:
        sys.exit(usage)


if __name__ == "__main__":
    main(sys.argv)

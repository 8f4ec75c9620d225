#!/usr/bin/env python3
"""scripts/plot_pictures.py — three of the docs' pictures from the runs scripts/make-pictures.sh
makes (it passes the folder): a DDP step's timeline, memory per mode beside the memory model, the
GPT's loss beside PyTorch's. matplotlib, from the git-ignored .venv; never needed by make test."""
import argparse
import json
import pathlib
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FORWARD, BACKWARD, COMM = "#4878d0", "#ee854a", "#6acc64"


def ddp_timeline(work, out, caption):
    """Each rank's forward and backward lane beside its all-reduce lane (a box per bucket)."""
    events = json.loads((work / "ddp-trace.json").read_text())
    lanes = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    boxes = [e for e in events if e["ph"] == "X"]
    order = sorted(lanes, key=lambda tid: (lanes[tid].split(" all-reduce")[0], "all-reduce" in lanes[tid]))
    overlap = re.search(r"allreduce_overlap: ([0-9.]+)", (work / "ddp.txt").read_text()).group(1)
    fig, ax = plt.subplots(figsize=(9, 2.8))
    for row, tid in enumerate(order):
        for e in (b for b in boxes if b["tid"] == tid):
            colour = COMM if e["name"].startswith("bucket") else FORWARD if e["name"] == "forward" else BACKWARD
            ax.broken_barh([(e["ts"] / 1000, e["dur"] / 1000)], (row - 0.4, 0.8), color=colour, edgecolor="white")
            label = e["name"].replace("bucket ", "b")
            ax.text((e["ts"] + e["dur"] / 2) / 1000, row, label, ha="center", va="center", fontsize=7, color="black")
    ax.set_yticks(range(len(order)), [lanes[t] for t in order])
    ax.invert_yaxis()
    ax.set_xlabel("ms into the step")
    ax.set_title(f"A DDP step of the MLP on 2 ranks, buckets of 0.1 MiB: {overlap} of the all-reduce time "
                 "hidden behind backward", fontsize=10)
    fig.text(0.01, 0.01, caption, fontsize=7, color="#666")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(out / "ddp-timeline.svg")


def memory_per_mode(work, out, caption):
    """bench_ddp's held state and step peak per mode and rank count (the MLP, Adam)."""
    rows = [json.loads(line) for line in (work / "bench_ddp.jsonl").read_text().splitlines() if line.startswith("{")]
    rows = [r for r in rows if r["bench"] in ("zero1", "zero2", "zero3") and r["model"] == "mlp"]
    ranks = sorted({r["ranks"] for r in rows})
    modes = ["ddp", "zero1", "zero2", "zero3"]
    held, formula, peak = {}, {}, {}
    for r in rows:
        held[(r["impl"], r["ranks"])] = r["held_mib"]
        formula[(r["impl"], r["ranks"])] = r["formula_held_mib"]
        peak[(r["impl"], r["ranks"])] = r["peak_mb"] / 1.048576  # MB to MiB
        held[("ddp", r["ranks"])] = r["baseline_held_mib"]
        formula[("ddp", r["ranks"])] = r["baseline_formula_held_mib"]
        peak[("ddp", r["ranks"])] = r["baseline_peak_mb"] / 1.048576
    fig, ax = plt.subplots(figsize=(8, 3.6))
    width = 0.2
    colours = ["#8c8c8c", "#4878d0", "#ee854a", "#6acc64"]
    for i, mode in enumerate(modes):
        xs = [k + (i - 1.5) * width for k in range(len(ranks))]
        ax.bar(xs, [held[(mode, n)] for n in ranks], width * 0.9, color=colours[i], label=f"{mode}: held between steps")
        ax.bar(xs, [peak[(mode, n)] - held[(mode, n)] for n in ranks], width * 0.9, bottom=[held[(mode, n)] for n in ranks],
               color=colours[i], alpha=0.3)
        ax.scatter(xs, [formula[(mode, n)] for n in ranks], marker="_", s=200, color="black", zorder=3,
                   label="memory model's formula" if i == 0 else None)
    ax.set_xticks(range(len(ranks)), [f"{n} rank{'s' if n > 1 else ''}" for n in ranks])
    ax.set_ylabel("MiB per rank")
    ax.set_ylim(0, 1.35 * max(peak.values()))  # room for the legend
    ax.set_title("The MLP with Adam: one rank's training state per mode (solid), the step's peak (pale)", fontsize=10)
    ax.legend(fontsize=7, ncol=3, loc="upper right")
    fig.text(0.01, 0.01, caption, fontsize=7, color="#666")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(out / "memory-per-mode.svg")


def losses(text, steps):
    """(step, validation loss) pairs: every --eval-every line, then the run's last."""
    points = [(int(s), float(v)) for s, v in re.findall(r"^step (\d+): val[ _]loss ([0-9.]+)", text, re.M)]
    points.append((steps, float(re.search(r"^val_loss: ([0-9.]+)", text, re.M).group(1))))
    return points


def gpt_loss(work, out, caption):
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for name, colour in (("multigrad", "#4878d0"), ("pytorch", "#ee854a")):
        points = losses((work / f"gpt-{name}.txt").read_text(), 300)
        ax.plot([s for s, _ in points], [v for _, v in points], marker="o", markersize=3, color=colour,
                label=f"{name}: {points[-1][1]:.4f} at step {points[-1][0]}")
    ax.set_xlabel("step (32 windows of 128 bytes each)")
    ax.set_ylabel("validation loss (nats per byte)")
    ax.set_title("The small GPT on the fortunes, AdamW with warm-up and cosine, seed 0\n"
                 "(the same model, data and schedule; each framework draws its own initialisation and order)",
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.text(0.01, 0.01, caption, fontsize=7, color="#666")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(out / "gpt-loss.svg")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=pathlib.Path, required=True)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--cpu", required=True)
    parser.add_argument("--date", required=True)
    args = parser.parse_args()
    plt.rcParams["svg.hashsalt"] = "multigrad"  # stable ids: a rerun changes only what moved
    plt.rcParams["svg.fonttype"] = "none"       # text as text, not paths: smaller files
    caption = f"scripts/make-pictures.sh, {args.date}, 2 cores of {args.cpu}"
    ddp_timeline(args.work, args.out, caption)
    memory_per_mode(args.work, args.out, caption)
    gpt_loss(args.work, args.out, caption)


if __name__ == "__main__":
    main()

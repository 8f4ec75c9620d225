"""Turns the rounds of scripts/bench-vs-torch.sh into its per-workload lines and markdown table.

Input (--runs): one line per run, "<side> <round> <json>", side "multigrad" or "torch", json one
line of bench_workloads / workloads.py. Each side's ms for a workload is the median of its rounds'
medians; ratio = multigrad_ms / torch_ms (below 1: multigrad is faster). The two sides must
report the same config and unit (the twins drifting apart is worth a warning line).
Prints `<workload> multigrad_ms=<x> torch_ms=<y> ratio=<x/y>` per workload and writes the
markdown report (--out) headed by the machine description in --header (markdown, as given).
"""
import argparse
import json
import statistics


def rate(x):
    return f"{x:.0f}" if x >= 1000 else f"{x:.3g}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", required=True)
    parser.add_argument("--header", required=True, help="markdown file to open the report with")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    ms = {}  # workload -> side -> [ms per round]
    rows = {}  # workload -> side -> last JSON row (config, unit, throughput)
    with open(args.runs) as f:
        for line in f:
            side, _round, payload = line.split(" ", 2)
            row = json.loads(payload)
            ms.setdefault(row["workload"], {}).setdefault(side, []).append(row["ms"])
            rows.setdefault(row["workload"], {})[side] = row

    table = ["| workload | config | multigrad ms | torch ms | ratio | multigrad throughput | torch throughput | unit |",
             "|---|---|---|---|---|---|---|---|"]
    for workload, sides in ms.items():
        if set(sides) != {"multigrad", "torch"}:
            print(f"{workload} missing side(s): has {sorted(sides)}")
            continue
        ours, theirs = statistics.median(sides["multigrad"]), statistics.median(sides["torch"])
        ratio = ours / theirs
        print(f"{workload} multigrad_ms={ours:.4g} torch_ms={theirs:.4g} ratio={ratio:.3f}")
        r_ours, r_theirs = rows[workload]["multigrad"], rows[workload]["torch"]
        for key in ("config", "unit"):
            if r_ours[key] != r_theirs[key]:
                print(f"{workload} warning: {key} differs: multigrad {r_ours[key]!r}, torch {r_theirs[key]!r}")
        # The throughput columns follow from the medians, not from any one round.
        scale_ours, scale_theirs = r_ours["throughput"] * r_ours["ms"], r_theirs["throughput"] * r_theirs["ms"]
        table.append(f"| {workload} | {r_ours['config']} | {ours:.4g} | {theirs:.4g} | {ratio:.3f} | "
                     f"{rate(scale_ours / ours)} | {rate(scale_theirs / theirs)} | {r_ours['unit']} |")

    with open(args.header) as f:
        header = f.read()
    with open(args.out, "w") as f:
        f.write(header.rstrip("\n") + "\n\n" + "\n".join(table) + "\n")


if __name__ == "__main__":
    main()

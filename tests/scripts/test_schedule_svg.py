#!/usr/bin/env python3
"""tests/scripts/test_schedule_svg.py — `multigrad schedule --svg FILE` writes well-formed SVG
(parsed by an XML parser) whose boxes are the schedule: one per stage and slot, each box's
stage, slot, kind, micro-batch and chunk equal to the cell of the text drawing that the same
run prints (tests/cli/test_schedule_cli.cpp checks that drawing), the idle boxes' share equal to
the printed bubble fraction, which the title carries. And a path it cannot write is one error
line, with nothing on stdout. Usage: test_schedule_svg.py <the multigrad binary>"""
import pathlib
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

cli = sys.argv[1]
SVG = "{http://www.w3.org/2000/svg}"
fails = []


def check(condition, message):
    if not condition:
        fails.append(message)
    return condition


def text_cells(stdout):
    """The drawing's cells: {(stage, slot): (kind, micro_batch, chunk)}."""
    cells = {}
    for line in stdout.splitlines():
        m = re.match(r"^stage\s+(\d+) \|(.*)$", line)
        if not m:
            continue
        for slot, cell in enumerate(m.group(2).split()):
            if cell == ".":
                cells[(int(m.group(1)), slot)] = ("idle", -1, -1)
                continue
            c = re.fullmatch(r"([FB])(\d+)(?:\.(\d+))?", cell)
            check(c is not None, f"unreadable cell {cell!r}")
            cells[(int(m.group(1)), slot)] = ("forward" if c.group(1) == "F" else "backward", int(c.group(2)),
                                              int(c.group(3) or 0))
    return cells


def run_case(args, stages):
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "schedule.svg"
        r = subprocess.run([cli, "schedule", *args.split(), "--svg", str(path)], capture_output=True, text=True)
        if not check(r.returncode == 0, f"{args}: exit {r.returncode}: {r.stderr}"):
            return
        check(f"svg: {path}" in r.stdout, f"{args}: stdout does not name the file")
        root = ET.parse(path).getroot()  # raises on malformed XML
    check(root.tag == SVG + "svg", f"{args}: root is {root.tag}")
    check(int(root.get("width")) > 0 and int(root.get("height")) > 0, f"{args}: no size")
    want = text_cells(r.stdout)
    check(len({s for s, _ in want}) == stages, f"{args}: the drawing has not {stages} stages")
    boxes = {}
    for rect in root.iter(SVG + "rect"):
        if rect.get("data-stage") is None:
            continue  # the background and the legend
        key = (int(rect.get("data-stage")), int(rect.get("data-slot")))
        check(key not in boxes, f"{args}: two boxes at {key}")
        boxes[key] = (rect.get("data-kind"), int(rect.get("data-micro-batch")), int(rect.get("data-chunk")))
    if args.find("interleaved") < 0:  # without chunks the drawing's cells have chunk 0
        want = {k: (kind, mb, 0 if kind != "idle" else -1) for k, (kind, mb, _) in want.items()}
    check(boxes == want, f"{args}: the boxes differ from the drawing: "
          f"{sorted(set(boxes.items()) ^ set(want.items()))[:6]}")
    bubble = re.search(r"^bubble_fraction: ([0-9.]+)", r.stdout, re.M).group(1)
    idle = sum(1 for kind, _, _ in boxes.values() if kind == "idle")
    check(f"{idle / len(boxes):.4f}" == bubble, f"{args}: {idle} idle of {len(boxes)} boxes, bubble {bubble}")
    title = "".join(t.text or "" for t in root.iter(SVG + "text"))
    check(f"bubble {bubble}" in title, f"{args}: the title does not carry the bubble {bubble}")


run_case("--stages 2 --micro-batches 3 --schedule 1f1b", 2)
run_case("--stages 4 --micro-batches 8 --schedule 1f1b", 4)
run_case("--stages 3 --micro-batches 5 --schedule gpipe", 3)
run_case("--stages 2 --micro-batches 4 --schedule interleaved --chunks 2", 2)
run_case("--stages 4 --micro-batches 8 --schedule interleaved --chunks 3", 4)
run_case("--stages 4 --micro-batches 200 --schedule 1f1b", 4)  # narrow boxes, no labels

bad = subprocess.run([cli, "schedule", "--stages", "2", "--micro-batches", "2", "--svg", "/nonexistent-dir/x.svg"],
                     capture_output=True, text=True)
check(bad.returncode != 0 and bad.stdout == "" and "/nonexistent-dir/x.svg" in bad.stderr
      and len(bad.stderr.strip().splitlines()) == 1, f"an unwritable --svg: exit {bad.returncode}, "
      f"stdout {bad.stdout!r}, stderr {bad.stderr!r}")

for line in fails:
    print("FAIL:", line)
if fails:
    sys.exit(1)
print("schedule --svg: 6 schedules drawn and checked box by box, and the unwritable path refused")

"""The PyTorch twin of benchmarks/bench_workloads.cpp: the same workloads, shapes, float32 and
optimizer settings on the CPU, timed the same way (bench_util.h's measure: warm-up, then samples
that each repeat the op for at least 5 ms; ms is the median per iteration), printing the same
JSON lines:
    {"workload": "matmul_1024", "config": "n=1024 threads=2", "ms": 21.3,
     "throughput": 100.8, "unit": "gflops", "threads": 2}

Threads: --threads N, else $OMP_NUM_THREADS, else os.cpu_count(); set with
torch.set_num_threads (scripts/bench-vs-torch.sh passes the count multigrad uses).

Run from the repository root with PyTorch in the git-ignored .venv:
    .venv/bin/python benchmarks/torch/workloads.py [--quick] [--only NAME] [--threads N]
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# As in bench_util.h: a sample repeats the op until it lasts this long.
MIN_SAMPLE_MS = 5.0
MAX_CALLS_PER_SAMPLE = 10000

ELEMENTWISE_NUMEL = 1 << 24  # 16M floats = 64 MiB per operand
SOFTMAX_ROWS, SOFTMAX_CLASSES = 4096, 1000
BATCH = 128
CLASSES = 10  # Fashion-MNIST
SGD = dict(lr=0.1, momentum=0.9)


def now_ms():
    return time.perf_counter() * 1e3


def measure(fn, warmup, samples):
    """Median ms of one call of fn, as bench_util.h's measure does it for a single function."""
    for _ in range(warmup):
        fn()
    t0 = now_ms()
    fn()
    calls = min(max(math.ceil(MIN_SAMPLE_MS / max(now_ms() - t0, 1e-4)), 1), MAX_CALLS_PER_SAMPLE)
    per_call = []
    for _ in range(samples):
        t0 = now_ms()
        for _ in range(calls):
            fn()
        per_call.append((now_ms() - t0) / calls)
    # The upper middle of an even count, as bench_util.h's median takes it.
    return sorted(per_call)[len(per_call) // 2]


def mlp():
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


def fashion_cnn():
    """nn/models.cpp's fashion_cnn, as tests/golden/make_golden.py builds it."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


# Each workload returns (config, iteration, unit, throughput(ms)).
def matmul(n):
    a, b = torch.randn(n, n), torch.randn(n, n)
    flops = 2.0 * n * n * n
    return f"n={n}", lambda: torch.matmul(a, b), "gflops", lambda ms: flops / (ms * 1e6)


def elementwise(is_add):
    n = ELEMENTWISE_NUMEL
    x, y = torch.randn(n), torch.randn(n)
    nbytes = n * 4 * (3 if is_add else 2)
    fn = (lambda: torch.add(x, y)) if is_add else (lambda: F.gelu(x, approximate="tanh"))
    return f"numel={n}", fn, "gbps", lambda ms: nbytes / 1e9 / (ms / 1e3)


def softmax_ce():
    logits = torch.randn(SOFTMAX_ROWS, SOFTMAX_CLASSES, requires_grad=True)
    targets = torch.randint(0, SOFTMAX_CLASSES, (SOFTMAX_ROWS,))

    def iteration():
        logits.grad = None
        F.cross_entropy(logits, targets).backward()

    return (f"rows={SOFTMAX_ROWS} classes={SOFTMAX_CLASSES}", iteration, "rows_per_s",
            lambda ms: SOFTMAX_ROWS / (ms / 1e3))


def train_step(model, example_shape):
    model.train()
    x = torch.randn(BATCH, *example_shape)
    y = torch.randint(0, CLASSES, (BATCH,))
    opt = torch.optim.SGD(model.parameters(), **SGD)

    def iteration():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return (f"batch={BATCH} sgd(lr=0.1,momentum=0.9)", iteration, "samples_per_s",
            lambda ms: BATCH / (ms / 1e3))


WORKLOADS = {
    "matmul_256": lambda: matmul(256),
    "matmul_1024": lambda: matmul(1024),
    "add_16m": lambda: elementwise(True),
    "gelu_16m": lambda: elementwise(False),
    "softmax_ce": softmax_ce,
    "mlp_train_step": lambda: train_step(mlp(), (784,)),
    "cnn_train_step": lambda: train_step(fashion_cnn(), (1, 28, 28)),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one warm-up call and 3 samples")
    parser.add_argument("--only", choices=sorted(WORKLOADS), help="run one workload")
    parser.add_argument("--threads", type=int,
                        default=int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count()))
    args = parser.parse_args()
    warmup, samples = (1, 3) if args.quick else (2, 10)

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    for name, make in WORKLOADS.items():
        if args.only and name != args.only:
            continue
        config, iteration, unit, throughput = make()
        ms = measure(iteration, warmup, samples)
        print(json.dumps({"workload": name, "config": f"{config} threads={args.threads}", "ms": float(f"{ms:.4g}"),
                          "throughput": float(f"{throughput(ms):.4g}"), "unit": unit, "threads": args.threads}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()

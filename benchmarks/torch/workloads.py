"""The PyTorch twin of benchmarks/bench_workloads.cpp: the same workloads, shapes, float32 and
optimizer settings on the same device (--device cpu, the default, or cuda = cuda:0; the
cuda-only and cpu-only workloads are the same as there), timed the same way (bench_util.h's
measure: warm-up, then samples that each repeat the op for at least 5 ms, on CUDA each ending
with torch.cuda.synchronize(); ms is the median per iteration), printing the same JSON lines:
    {"workload": "matmul_1024", "config": "n=1024 threads=2", "ms": 21.3,
     "throughput": 100.8, "unit": "gflops", "device": "cpu:0", "threads": 2}
(on CUDA the config ends with "device=cuda:0" and there is no "threads").

Threads: --threads N, else $OMP_NUM_THREADS, else os.cpu_count(); set with
torch.set_num_threads (scripts/bench-vs-torch.sh passes the count multigrad uses).
ddp2_mlp_step splits them: 2 gloo processes (torch.multiprocessing spawn) with threads // 2
each, as multigrad gives each of its 2 rank threads hardware threads / 2; "threads" is the total.

On CUDA, TF32 is turned off for matmul and cuDNN (torch.backends.cuda.matmul.allow_tf32 and
torch.backends.cudnn.allow_tf32; the second is on by default), because multigrad runs float32
matmul and conv without it (kernels/cuda/matmul.cu: cuBLAS's default math; conv.cu:
CUDNN_FMA_MATH). torch.backends.cudnn.benchmark is left at its default (off): cuDNN's
heuristics pick the algorithm, as they do in multigrad. torch.backends.cudnn.deterministic is
left at its default (off) too, so PyTorch may pick a faster non-deterministic backward
algorithm where multigrad takes the first deterministic one.

Where the two sides cannot do literally the same thing:
  dataloader     torch.utils.data.DataLoader over a TensorDataset fetches the 128 examples of a
                 batch one by one and stacks them (default collate); multigrad's TensorDataset
                 gathers a batch's rows in one copy. Both assemble batches on the calling
                 thread (num_workers=0, multigrad's default; torch workers would be processes).
  ddp2_mlp_step  torch's ranks are processes talking over gloo (TCP on 127.0.0.1); multigrad's
                 are threads of one process whose all-reduce copies through shared memory.

Run from the repository root with PyTorch in the git-ignored .venv (or any Python that imports
torch: scripts/bench-vs-torch.sh takes $PYTHON, or python3 where it has torch):
    .venv/bin/python benchmarks/torch/workloads.py [--quick] [--device cpu|cuda] [--only NAME] [--threads N] [--batch N]
"""
import argparse
import json
import math
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

# fashion_cnn and the GPT as the golden values' script builds them (nn/models.cpp, nn/gpt.h).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "golden"))
from make_golden import GPT, fashion_cnn  # noqa: E402

# As in bench_util.h: a sample repeats the op until it lasts this long.
MIN_SAMPLE_MS = 5.0
MAX_CALLS_PER_SAMPLE = 10000

ELEMENTWISE_NUMEL = 1 << 24  # 16M floats = 64 MiB per operand
LARGE_ELEMENTWISE_NUMEL = 1 << 28  # 256M floats = 1 GiB per operand
SOFTMAX_ROWS, SOFTMAX_CLASSES = 4096, 1000
BATCH = 128
LARGE_BATCH = 1024  # enough rows to keep a GPU's multiprocessors busy
CLASSES = 10  # Fashion-MNIST
SGD = dict(lr=0.1, momentum=0.9)
# fashion_cnn's second conv layer: its input is the first layer's output after one 2x2 pool.
CONV_IN, CONV_OUT, CONV_KERNEL, CONV_SIDE = 32, 64, 3, 14
LOADER_IMAGES = 60000  # Fashion-MNIST's training split
DDP_RANKS = 2
# nn::gpt_config("small", 256) on bytes, as `multigrad train --model gpt` trains it.
GPT_VOCAB, GPT_CONTEXT, GPT_LAYERS, GPT_HEADS, GPT_WIDTH = 256, 128, 4, 4, 128
GPT_BATCH, GPT_LR, GPT_WEIGHT_DECAY = 32, 1e-3, 1e-2
# GPT-2 124M (nn::gpt_config("gpt2", 50257)); batch 2 on a CPU, 16 on CUDA unless --batch says.
GPT2_VOCAB, GPT2_CONTEXT, GPT2_LAYERS, GPT2_HEADS, GPT2_WIDTH = 50257, 1024, 12, 12, 768
GPT2_BATCH_CPU, GPT2_BATCH_CUDA = 2, 16


ARGS = None  # main's parsed arguments


def now_ms():
    return time.perf_counter() * 1e3


def calls_for(one_call_ms):
    """How many calls of a one_call_ms op make a sample of MIN_SAMPLE_MS (bench_util.h's)."""
    return min(max(math.ceil(MIN_SAMPLE_MS / max(one_call_ms, 1e-4)), 1), MAX_CALLS_PER_SAMPLE)


def no_sync():
    pass


def measure(fn, warmup, samples, sync=no_sync):
    """Median ms of one call of fn, as bench_util.h's measure does it for a single function;
    sync waits for queued device work."""
    for _ in range(warmup):
        fn()
    sync()
    t0 = now_ms()
    fn()
    sync()
    return median_per_call(fn, calls_for(now_ms() - t0), samples, sync)


def median_per_call(fn, calls, samples, sync=no_sync):
    """Median ms per call over `samples` samples of `calls` calls each."""
    per_call = []
    for _ in range(samples):
        t0 = now_ms()
        for _ in range(calls):
            fn()
        sync()
        per_call.append((now_ms() - t0) / calls)
    # The upper middle of an even count, as bench_util.h's median takes it.
    return sorted(per_call)[len(per_call) // 2]


def mlp():
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


# Each workload takes the torch.device and returns (config, iteration, unit, throughput(ms)).
def matmul(n, device):
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    flops = 2.0 * n * n * n
    return f"n={n}", lambda: torch.matmul(a, b), "gflops", lambda ms: flops / (ms * 1e6)


def elementwise(is_add, n, device):
    x, y = torch.randn(n, device=device), torch.randn(n, device=device)
    nbytes = n * 4 * (3 if is_add else 2)
    fn = (lambda: torch.add(x, y)) if is_add else (lambda: F.gelu(x, approximate="tanh"))
    return f"numel={n}", fn, "gbps", lambda ms: nbytes / 1e9 / (ms / 1e3)


def softmax_ce(device):
    logits = torch.randn(SOFTMAX_ROWS, SOFTMAX_CLASSES, device=device, requires_grad=True)
    targets = torch.randint(0, SOFTMAX_CLASSES, (SOFTMAX_ROWS,), device=device)

    def iteration():
        logits.grad = None
        F.cross_entropy(logits, targets).backward()

    return (f"rows={SOFTMAX_ROWS} classes={SOFTMAX_CLASSES}", iteration, "rows_per_s",
            lambda ms: SOFTMAX_ROWS / (ms / 1e3))


def train_step(model, example_shape, batch, device):
    model.to(device).train()
    x = torch.randn(batch, *example_shape, device=device)
    y = torch.randint(0, CLASSES, (batch,), device=device)
    opt = torch.optim.SGD(model.parameters(), **SGD)

    def iteration():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return (f"batch={batch} sgd(lr=0.1,momentum=0.9)", iteration, "samples_per_s",
            lambda ms: batch / (ms / 1e3))


def gpt_train_step(device, dtype=None, config="small", layout=(GPT_VOCAB, GPT_CONTEXT, GPT_LAYERS, GPT_HEADS, GPT_WIDTH),
                   batch=GPT_BATCH):
    """dtype: torch.bfloat16 runs the forward and the loss under torch.autocast."""
    vocab, context = layout[0], layout[1]
    model = GPT(*layout).to(device).train()
    x = torch.randint(0, vocab, (batch, context), device=device)
    y = torch.randint(0, vocab, (batch * context,), device=device)
    params = list(model.parameters())  # weight decay on the matrices and embeddings only
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": GPT_WEIGHT_DECAY},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}], lr=GPT_LR)

    def iteration():
        opt.zero_grad()
        with torch.autocast(torch.device(device).type, dtype=dtype, enabled=dtype is not None):
            loss = F.cross_entropy(model(x).reshape(-1, vocab), y)
        loss.backward()
        opt.step()

    precision = {None: "fp32", torch.bfloat16: "bf16"}[dtype]
    return (f"config={config} batch={batch} context={context} adamw(lr={GPT_LR:g},weight_decay={GPT_WEIGHT_DECAY:g})"
            f" precision={precision}",
            iteration, "tokens_per_s", lambda ms: batch * context / (ms / 1e3))


def gpt2_train_step(device, dtype=None):
    batch = ARGS.batch or (GPT2_BATCH_CUDA if torch.device(device).type == "cuda" else GPT2_BATCH_CPU)
    return gpt_train_step(device, dtype, "gpt2", (GPT2_VOCAB, GPT2_CONTEXT, GPT2_LAYERS, GPT2_HEADS, GPT2_WIDTH), batch)


def conv2d(device):
    x = torch.randn(BATCH, CONV_IN, CONV_SIDE, CONV_SIDE, device=device, requires_grad=True)
    w = torch.randn(CONV_OUT, CONV_IN, CONV_KERNEL, CONV_KERNEL, device=device, requires_grad=True)
    grad_out = torch.randn(BATCH, CONV_OUT, CONV_SIDE, CONV_SIDE, device=device)
    gemm_flops = 2.0 * BATCH * CONV_OUT * CONV_IN * CONV_KERNEL * CONV_KERNEL * CONV_SIDE * CONV_SIDE

    def iteration():
        x.grad, w.grad = None, None
        F.conv2d(x, w, padding=1).backward(grad_out)

    return (f"batch={BATCH} in=32 out=64 k=3 hw=14 padding=1", iteration, "gflops",
            lambda ms: 3 * gemm_flops / (ms * 1e6))


def dataloader(_device):
    """One iteration is one whole epoch (469 batches, the last of 96), its shuffle included."""
    dataset = TensorDataset(torch.rand(LOADER_IMAGES, 1, 28, 28), torch.randint(0, CLASSES, (LOADER_IMAGES,)))
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=0)

    def iteration():
        for _ in loader:
            pass

    return (f"images={LOADER_IMAGES} batch={BATCH} shuffle workers=0", iteration, "images_per_s",
            lambda ms: LOADER_IMAGES / (ms / 1e3))


class SelfTimed:
    """In place of an iteration: a workload that times itself, time(warmup, samples) -> ms."""

    def __init__(self, time):
        self.time = time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_rank(rank, port, threads, warmup, samples, results):
    """One rank of ddp2_mlp_step (a spawned process): its replica trains on its own fixed random
    BATCH // DDP_RANKS examples; DDP averages the gradients, so a step matches one over BATCH.
    As bench_workloads' measure_on_ranks: rank 0 sizes the samples and broadcasts the calls per
    sample, so that every rank runs the same steps; rank 0 puts its median ms in results."""
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=DDP_RANKS)
    torch.set_num_threads(threads)
    torch.manual_seed(rank)  # the data differ per rank; DDP gives every replica rank 0's parameters
    model = DistributedDataParallel(mlp())
    rows = BATCH // DDP_RANKS
    x, y = torch.randn(rows, 784), torch.randint(0, CLASSES, (rows,))
    opt = torch.optim.SGD(model.parameters(), **SGD)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(warmup):
        step()
    t0 = now_ms()
    step()
    calls = torch.tensor([calls_for(now_ms() - t0)])
    dist.broadcast(calls, 0)
    ms = median_per_call(step, int(calls.item()), samples)
    if rank == 0:
        results.put(ms)
    dist.destroy_process_group()


def ddp2_mlp_step(_device):
    threads = torch.get_num_threads()
    per_rank = max(1, threads // DDP_RANKS)

    def time(warmup, samples):
        results = mp.get_context("spawn").SimpleQueue()
        mp.spawn(ddp_rank, args=(free_port(), per_rank, warmup, samples, results), nprocs=DDP_RANKS)
        return results.get()

    return (f"global_batch={BATCH} ranks={DDP_RANKS} threads_per_rank={per_rank} sgd(lr=0.1,momentum=0.9)",
            SelfTimed(time), "samples_per_s", lambda ms: BATCH / (ms / 1e3))


# name -> (make(device), the devices it runs on; bench_workloads.cpp's header says why some
# run on one only).
BOTH, CPU_ONLY, CUDA_ONLY = ("cpu", "cuda"), ("cpu",), ("cuda",)
WORKLOADS = {
    "matmul_256": (lambda d: matmul(256, d), BOTH),
    "matmul_1024": (lambda d: matmul(1024, d), BOTH),
    "matmul_4096": (lambda d: matmul(4096, d), CUDA_ONLY),
    "add_16m": (lambda d: elementwise(True, ELEMENTWISE_NUMEL, d), BOTH),
    "gelu_16m": (lambda d: elementwise(False, ELEMENTWISE_NUMEL, d), BOTH),
    "add_256m": (lambda d: elementwise(True, LARGE_ELEMENTWISE_NUMEL, d), CUDA_ONLY),
    "gelu_256m": (lambda d: elementwise(False, LARGE_ELEMENTWISE_NUMEL, d), CUDA_ONLY),
    "softmax_ce": (softmax_ce, BOTH),
    "mlp_train_step": (lambda d: train_step(mlp(), (784,), BATCH, d), BOTH),
    "cnn_train_step": (lambda d: train_step(fashion_cnn(), (1, 28, 28), BATCH, d), BOTH),
    "mlp_train_step_b1024": (lambda d: train_step(mlp(), (784,), LARGE_BATCH, d), CUDA_ONLY),
    "cnn_train_step_b1024": (lambda d: train_step(fashion_cnn(), (1, 28, 28), LARGE_BATCH, d), CUDA_ONLY),
    "conv2d": (conv2d, BOTH),
    "gpt_train_step": (gpt_train_step, BOTH),
    "gpt_train_step_bf16": (lambda d: gpt_train_step(d, torch.bfloat16), BOTH),
    "gpt2_train_step": (gpt2_train_step, BOTH),
    "gpt2_train_step_bf16": (lambda d: gpt2_train_step(d, torch.bfloat16), BOTH),
    "dataloader": (dataloader, CPU_ONLY),
    "ddp2_mlp_step": (ddp2_mlp_step, CPU_ONLY),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one warm-up call and 3 samples")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cuda means cuda:0")
    parser.add_argument("--only", choices=sorted(WORKLOADS), help="run one workload")
    parser.add_argument("--threads", type=int,
                        default=int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count()))
    parser.add_argument("--batch", type=int, default=0,
                        help="the GPT-2 workloads' batch (default 2 on a CPU, 16 on CUDA)")
    global ARGS
    args = ARGS = parser.parse_args()
    if args.batch < 0:
        parser.error(f"--batch must be positive, got {args.batch}")
    warmup, samples = (1, 3) if args.quick else (2, 10)
    if args.only and args.device not in WORKLOADS[args.only][1]:
        parser.error(f"{args.only} does not run with --device {args.device} (bench_workloads.cpp's header says why)")

    sync = no_sync
    if args.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit(f"workloads.py: --device cuda: no CUDA devices (torch {torch.__version__}, built for CUDA "
                     f"{torch.version.cuda or 'none'}, sees {torch.cuda.device_count()})")
        device = torch.device("cuda:0")
        sync = torch.cuda.synchronize
        device_name = str(device)
        where = f"device={device_name}"
        # multigrad's float32 matmul and conv use no TF32 (see the docstring); cuDNN's flag is on by default.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    else:
        device = torch.device("cpu")
        device_name = "cpu:0"  # bench_workloads' name; torch.device("cpu") has no index
        where = f"threads={args.threads}"

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    for name, (make, devices) in WORKLOADS.items():
        if args.device not in devices or (args.only and name != args.only):
            continue
        if args.device == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        config, iteration, unit, throughput = make(device)
        if isinstance(iteration, SelfTimed):
            ms = iteration.time(warmup, samples)
        else:
            ms = measure(iteration, warmup, samples, sync)
        row = {"workload": name, "config": f"{config} {where}", "ms": float(f"{ms:.4g}"),
               "throughput": float(f"{throughput(ms):.4g}"), "unit": unit, "device": device_name}
        if args.device == "cpu":
            row["threads"] = args.threads
        elif name.startswith("gpt"):  # as bench_workloads' GPT rows
            row["peak_bytes"] = torch.cuda.max_memory_allocated(device)
        print(json.dumps(row))
        sys.stdout.flush()


if __name__ == "__main__":
    main()

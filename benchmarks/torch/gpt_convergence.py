"""PyTorch's twin of `multigrad train --model gpt` with its defaults, for the convergence
comparison of issue 18 (scripts/gpt-convergence.sh runs both).

The same text (data::read_text: the regular files of the folder in name order, `.dat` files and
links skipped, a line holding only "%" read as an empty line), the same split (the last tenth for
validation), bytes as tokens, the same model (nn::gpt_config("small", 256), GPT-2's
initialisation: tests/golden/make_golden.py's GPT), AdamW (lr 1e-3, betas (0.9, 0.999), eps 1e-8,
weight decay 1e-2 on the parameters of 2 or more dims only), its schedule (a linear warmup over a
tenth of the steps, at most 100, then a half cosine to 0: optim::WarmupCosineLR), 32
windows of 128 bytes a step drawn without replacement from every window of the training text,
and the same evaluation: the mean cross-entropy over the disjoint windows of the validation text.
What differs is the random numbers (the initial weights and the order of the windows come from
each framework's own generator), so the two runs are compared as two seeds of one experiment.

Prints `val_loss: X` (nats per byte), `val_bpb: Y` and `tokens_per_s: Z`, as multigrad does.
`--precision bf16` runs the forward passes (training and evaluation) and the losses under
torch.autocast("cpu", torch.bfloat16), as `multigrad train --precision bf16` autocasts them.
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "golden"))
from make_golden import GPT  # noqa: E402

VOCAB, CONTEXT, LAYERS, HEADS, WIDTH = 256, 128, 4, 4, 128
BATCH, LR, WEIGHT_DECAY = 32, 1e-3, 1e-2
VALIDATION_FRACTION = 0.1


def read_file(path):
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    return b"\n".join(b"" if line == b"%" else line for line in lines)


def read_text(path):
    if not os.path.isdir(path):
        return read_file(path)
    files = sorted(os.path.join(path, name) for name in os.listdir(path))
    files = [f for f in files if not os.path.islink(f) and os.path.isfile(f) and not f.endswith(".dat")]
    return b"".join(read_file(f) for f in files)


def evaluate(model, val, precision):
    """The mean cross-entropy over the disjoint windows of `val` (nats per token)."""
    model.eval()
    total, tokens = 0.0, 0
    offsets = torch.arange(CONTEXT)
    starts = torch.arange(0, len(val) - CONTEXT, CONTEXT)  # s + T + 1 <= n
    with torch.no_grad(), autocast(precision):
        for first in range(0, len(starts), BATCH):
            rows = starts[first:first + BATCH, None] + offsets
            logits = model(val[rows]).reshape(-1, VOCAB)
            total += F.cross_entropy(logits, val[rows + 1].reshape(-1), reduction="sum").item()
            tokens += rows.numel()
    model.train()
    return total / tokens


def autocast(precision):
    """torch.autocast's bfloat16 for --precision bf16, else nothing."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="/usr/share/games/fortunes")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--eval-every", type=int, default=0, help="also print val_loss every N steps")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    text = read_text(args.data)
    split = len(text) - int(len(text) * VALIDATION_FRACTION)
    train = torch.tensor(list(text[:split]), dtype=torch.long)
    val = torch.tensor(list(text[split:]), dtype=torch.long)

    model = GPT(VOCAB, CONTEXT, LAYERS, HEADS, WIDTH).train()
    params = list(model.parameters())
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}], lr=LR)
    warmup = min(100, args.steps // 10)

    def rate(t):  # optim::WarmupCosineLR's factor of the base rate at step t
        if t < warmup:
            return (t + 1) / warmup
        return (1 + math.cos(math.pi * (t - warmup) / (args.steps - warmup))) / 2

    schedule = torch.optim.lr_scheduler.LambdaLR(opt, rate)

    # Window s is (train[s : s + T], train[s + 1 : s + T + 1]); an epoch's shuffle of all of them.
    order = torch.randperm(len(train) - CONTEXT)
    assert args.steps * BATCH <= len(order), "more steps than one epoch of windows"
    offsets = torch.arange(CONTEXT)
    start = time.perf_counter()
    for step in range(args.steps):
        rows = order[step * BATCH:(step + 1) * BATCH, None] + offsets  # (B, T)
        with autocast(args.precision):
            loss = F.cross_entropy(model(train[rows]).reshape(-1, VOCAB), train[rows + 1].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        schedule.step()
        if args.eval_every and (step + 1) % args.eval_every == 0 and step + 1 < args.steps:
            print(f"step {step + 1}: val_loss {evaluate(model, val, args.precision):.4f}", flush=True)
    seconds = time.perf_counter() - start

    val_loss = evaluate(model, val, args.precision)
    print(f"val_loss: {val_loss:.4f}")
    print(f"val_bpb: {val_loss / math.log(2):.4f}")
    print(f"tokens_per_s: {args.steps * BATCH * CONTEXT / seconds:.0f}")


if __name__ == "__main__":
    main()

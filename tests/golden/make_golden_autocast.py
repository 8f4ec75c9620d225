"""Writes tests/golden/gpt_tiny_autocast.safetensors: what PyTorch's autocast computes for the
tiny GPT of gpt_tiny.safetensors (the same initial state, batch and targets, read from that
file), in float32 with the matmuls, linears and attention in bfloat16 (torch.autocast("cpu",
torch.bfloat16)) and in float16 (torch.float16), for autograd/autocast.h's emulation to be held
against (tests/golden/test_golden.cpp derives the bound):
    <p>.output, <p>.loss       forward in training mode (logits as float32) and the loss
    <p>.grad.<name>            d loss / d parameter (float32: the parameters stay float32)
    <p>.adamw_groups.<name>    the parameters after two AdamW steps (make_golden.py's nanoGPT
                               groups and settings) on float32 master weights, each step's
                               forward and backward under autocast
for p in bf16, fp16; metadata {"case", "loss", "torch"}. And tests/golden/gpt_tiny_trajectory.safetensors:
    fp64, fp32, bf16, fp16     the loss at each of TRAJECTORY_STEPS AdamW steps on that batch
                               (float64 losses), from the same float32 initial state: in float64,
                               in float32, and under autocast to bf16 and fp16

Run from the repository root with PyTorch in the git-ignored .venv (see make_golden.py):
    .venv/bin/python tests/golden/make_golden_autocast.py              (the first file)
    .venv/bin/python tests/golden/make_golden_autocast.py trajectory   (the second)
"""
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from make_golden import ADAMW_GROUPS, GPT, decay_groups

OUT = os.path.dirname(os.path.abspath(__file__))
PRECISIONS = {"bf16": torch.bfloat16, "fp16": torch.float16}


TRAJECTORY_STEPS = 40


def lm_loss(logits, target):
    if logits.dtype != torch.float64:
        logits = logits.float()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def model_from(golden):
    model = GPT(40, 16, 2, 2, 16)  # gpt_tiny's
    model.load_state_dict({k[len("state."):]: v for k, v in golden.items() if k.startswith("state.")})
    model.train()
    return model


def adamw_steps(model, golden, autocast, n):
    """n AdamW steps of model on golden's batch, the forward under autocast to `autocast` (None:
    off); returns each step's loss."""
    opt = torch.optim.AdamW(decay_groups(model.parameters()), **ADAMW_GROUPS)
    losses = []
    for _ in range(n):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
            loss = lm_loss(model(golden["input"]), golden["target"])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float64)


def trajectory(golden, dtype, autocast):
    """The loss at each of TRAJECTORY_STEPS steps, the parameters in dtype."""
    return adamw_steps(model_from(golden).to(dtype), golden, autocast, TRAJECTORY_STEPS)


def write_trajectories(golden):
    out = {"fp64": trajectory(golden, torch.float64, None), "fp32": trajectory(golden, torch.float32, None)}
    out.update({name: trajectory(golden, torch.float32, dtype) for name, dtype in PRECISIONS.items()})
    save_file(out, os.path.join(OUT, "gpt_tiny_trajectory.safetensors"),
              metadata={"case": "gpt_tiny_trajectory", "loss": "lm", "steps": str(TRAJECTORY_STEPS), "torch": torch.__version__})
    for name, losses in out.items():
        print(f"gpt_tiny_trajectory.{name}: {losses[0]:.6f} -> {losses[-1]:.6f}")


def main():
    golden = load_file(os.path.join(OUT, "gpt_tiny.safetensors"))
    if sys.argv[1:] == ["trajectory"]:
        return write_trajectories(golden)
    x, target = golden["input"], golden["target"]
    out = {}
    for name, dtype in PRECISIONS.items():
        model = model_from(golden)
        with torch.autocast("cpu", dtype=dtype):
            logits = model(x)
            loss = lm_loss(logits, target)
        loss.backward()
        out[f"{name}.output"] = logits.detach().float()
        out[f"{name}.loss"] = loss.detach()
        out.update({f"{name}.grad.{k}": p.grad for k, p in model.named_parameters()})
        model = model_from(golden)
        adamw_steps(model, golden, dtype, 2)
        out.update({f"{name}.adamw_groups.{k}": p.detach().clone() for k, p in model.named_parameters()})
    out = {k: v.contiguous() for k, v in out.items()}
    save_file(out, os.path.join(OUT, "gpt_tiny_autocast.safetensors"), metadata={"case": "gpt_tiny_autocast", "loss": "lm", "torch": torch.__version__})
    print(f"gpt_tiny_autocast: {len(out)} tensors")


if __name__ == "__main__":
    main()

"""Writes the golden files of tests/golden/: what PyTorch computes for each multigrad layer,
the MLP and the Fashion-MNIST CNN, so that tests/golden/test_golden.cpp can check multigrad
against it without Python.

Each case is one safetensors file `<case>.safetensors` holding
    input, target            the batch (target: Float32 for mse, Int64 for cross_entropy)
    state.<name>             the module's state_dict before anything ran
    output, loss             forward in training mode, and the loss (mean reduction)
    grad.<name>              d loss / d parameter
    input_grad               d loss / d input (float inputs only)
    buffer_after.<name>      buffers after that forward (BatchNorm's running statistics)
    sgd.<name>, adam.<name>, adamw.<name>
                             parameters after two optimizer steps on the same batch, each
                             started from `state`
and metadata {"case", "loss", "module"} naming what to build.

Run from the repository root with PyTorch in the git-ignored .venv:
    python3 -m venv .venv && .venv/bin/pip install torch numpy safetensors
    .venv/bin/python tests/golden/make_golden.py
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

OUT = os.path.dirname(os.path.abspath(__file__))

# The optimizers of the golden steps; the C++ test uses the same settings.
SGD = dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
ADAM = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)


def mlp(sizes):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def fashion_cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


class Embed(nn.Module):
    """Embedding whose batch is integer indices; the loss sees the looked-up rows."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(10, 4))

    def forward(self, idx):
        return F.embedding(idx, self.weight)


# case name -> (module factory, module description for the C++ side, input, loss kind)
def cases():
    g = torch.Generator().manual_seed(1234)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    return {
        "linear": (lambda: nn.Linear(7, 5), "Linear(7, 5)", randn(4, 7), "mse"),
        "linear_ce": (lambda: nn.Linear(7, 5), "Linear(7, 5)", randn(6, 7), "cross_entropy"),
        "conv2d": (lambda: nn.Conv2d(3, 4, 3, padding=1), "Conv2d(3, 4, 3, padding 1)", randn(2, 3, 8, 8), "mse"),
        "conv2d_strided_groups": (lambda: nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2),
                                  "Conv2d(4, 6, 3, stride 2, padding 1, groups 2)", randn(2, 4, 9, 9), "mse"),
        "conv2d_dilated": (lambda: nn.Conv2d(2, 3, 3, padding=2, dilation=2),
                           "Conv2d(2, 3, 3, padding 2, dilation 2)", randn(1, 2, 7, 7), "mse"),
        "maxpool2d": (lambda: nn.MaxPool2d(2), "MaxPool2d(2)", randn(2, 3, 8, 8), "mse"),
        "avgpool2d": (lambda: nn.AvgPool2d(3, stride=2, padding=1), "AvgPool2d(3, stride 2, padding 1)",
                      randn(2, 3, 9, 9), "mse"),
        "batchnorm2d": (lambda: nn.BatchNorm2d(3), "BatchNorm2d(3)", randn(4, 3, 5, 5) * 2 + 1, "mse"),
        "layernorm": (lambda: nn.LayerNorm([3, 4]), "LayerNorm([3, 4])", randn(5, 3, 4), "mse"),
        "embedding": (Embed, "Embedding(10, 4)", torch.randint(0, 10, (3, 5), generator=g), "mse"),
        "relu": (nn.ReLU, "ReLU", randn(5, 7), "mse"),
        "gelu": (lambda: nn.GELU(approximate="tanh"), "GELU (tanh)", randn(5, 7) * 3, "mse"),
        "tanh": (nn.Tanh, "Tanh", randn(5, 7) * 2, "mse"),
        "sigmoid": (nn.Sigmoid, "Sigmoid", randn(5, 7) * 3, "mse"),
        "flatten": (nn.Flatten, "Flatten", randn(3, 2, 4), "mse"),
        "mlp": (lambda: mlp([784, 256, 128, 10]), "mlp({784, 256, 128, 10})", randn(8, 784), "cross_entropy"),
        "cnn": (fashion_cnn, "fashion_cnn()", randn(4, 1, 28, 28), "cross_entropy"),
    }


def make_target(kind, output, g):
    if kind == "cross_entropy":
        return torch.randint(0, output.shape[1], (output.shape[0],), generator=g)
    return torch.randn(*output.shape, generator=g)


def loss_of(kind, output, target):
    return F.cross_entropy(output, target) if kind == "cross_entropy" else F.mse_loss(output, target)


def steps(module_factory, state, x, target, kind, optimizer, settings, n=2):
    model = module_factory()
    model.load_state_dict(state)
    model.train()
    opt = optimizer(model.parameters(), **settings)
    for _ in range(n):
        opt.zero_grad()
        loss_of(kind, model(x), target).backward()
        opt.step()
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(99)
    for case, (factory, description, x, kind) in cases().items():
        model = factory()
        model.train()
        state = {k: v.clone() for k, v in model.state_dict().items()}
        float_input = x.is_floating_point()
        xin = x.clone().requires_grad_(float_input)
        output = model(xin)
        target = make_target(kind, output, g)
        loss = loss_of(kind, output, target)
        loss.backward()

        out = {"input": x, "target": target, "output": output.detach(), "loss": loss.detach()}
        out.update({f"state.{k}": v for k, v in state.items()})
        out.update({f"grad.{k}": p.grad for k, p in model.named_parameters()})
        out.update({f"buffer_after.{k}": v.clone() for k, v in model.named_buffers()})
        if float_input:
            out["input_grad"] = xin.grad
        if any(True for _ in model.parameters()):
            out.update({f"sgd.{k}": v for k, v in steps(factory, state, x, target, kind,
                                                         torch.optim.SGD, SGD).items()})
            out.update({f"adam.{k}": v for k, v in steps(factory, state, x, target, kind,
                                                          torch.optim.Adam, ADAM).items()})
            if case != "cnn":  # the CNN's copies are the largest; SGD and Adam cover it
                out.update({f"adamw.{k}": v for k, v in steps(factory, state, x, target, kind,
                                                               torch.optim.AdamW, ADAMW).items()})
        out = {k: v.contiguous() for k, v in out.items()}
        meta = {"case": case, "loss": kind, "module": description, "torch": torch.__version__}
        save_file(out, os.path.join(OUT, f"{case}.safetensors"), metadata=meta)
        print(f"{case}: {len(out)} tensors")


if __name__ == "__main__":
    main()

"""Writes the golden files of tests/golden/: what PyTorch computes for each multigrad layer,
the MLP, the Fashion-MNIST CNN and a tiny GPT, so that tests/golden/test_golden.cpp can check multigrad
against it without Python.

Each case is one safetensors file `<case>.safetensors` holding, as PyTorch drew them (float32):
    input, target            the batch (target: Float32 for mse, Int64 for cross_entropy)
    state.<name>             the module's state_dict before anything ran (PyTorch's init)
and, computed in float64 from exactly those values (module.double(), input.double()):
    output, loss             forward in training mode, and the loss (mean reduction)
    grad.<name>              d loss / d parameter
    input_grad               d loss / d input (float inputs only)
    buffer_after.<name>      buffers after that forward (BatchNorm's running statistics)
    sgd.<name>, adam.<name>, adamw.<name>
                             parameters after two optimizer steps on the same batch, each
                             started from `state`
    adamw_groups.<name>      (the GPT) the same with nanoGPT's two parameter groups: weight
                             decay on parameters of 2 or more dimensions only
and metadata {"case", "loss", "module", "torch", "order_spread"} naming what to build.

Why float64: the test checks that multigrad computes the same function as PyTorch. In float32
two correct implementations differ by their rounding, which depends on the order of every sum
(BLAS kernels, threads, blocking) and which batch norm's cancellations and two training steps
amplify far beyond one rounding (issue 16: a CNN weight after two SGD steps, 1.6e-5 apart under
one OpenBLAS kernel and equal under another). In float64 the rounding of any order is about
10^9 times smaller, far below any mistake in a formula (test_golden.cpp derives its tolerance).
`order_spread` shows that margin for each case: the largest difference, relative to the tensor's
largest magnitude, between the stored values and the same computation with the batch reversed
(every sum over the batch then runs in another order). main() refuses to write a case whose
spread exceeds MAX_ORDER_SPREAD, 100 times below the test's tolerance.

Run from the repository root with PyTorch in the git-ignored .venv:
    python3 -m venv .venv && .venv/bin/pip install torch numpy safetensors
    .venv/bin/python tests/golden/make_golden.py [case ...]
(naming cases writes only those: the files of the others stay as they are, torch version included).
"""
import copy
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

OUT = os.path.dirname(os.path.abspath(__file__))

# The optimizers of the golden steps; the C++ test uses the same settings.
SGD = dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
ADAM = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)
# nanoGPT's AdamW: betas (0.9, 0.95), weight decay 0.1 on matrices and embeddings only.
ADAMW_GROUPS = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
GROUP_WEIGHT_DECAY = 0.1

# test_golden.cpp's tolerance is 1e-9 of a tensor's largest magnitude (at least 0.1); see the
# docstring.
MAX_ORDER_SPREAD = 1e-11


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


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
                   for z in self.c_attn(x).split(c, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential()
        self.mlp.add_module("c_fc", nn.Linear(n_embd, 4 * n_embd))
        self.mlp.add_module("gelu", nn.GELU(approximate="tanh"))
        self.mlp.add_module("c_proj", nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT-2's layout with nn/gpt.h's names (nanoGPT's, less "transformer."); the output
    projection is the token embedding (weight tying), so there is no lm_head entry."""

    def __init__(self, vocab_size, context, n_layer, n_head, n_embd):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(context, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        for name, p in self.named_parameters():  # GPT-2's initialisation
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln_" not in name:
                std = 0.02 / (2 * n_layer) ** 0.5 if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


class Attention(nn.Module):
    """F.scaled_dot_product_attention of q, k and v cut from the last dimension of one
    (B, H, T, 3 E) input: the op alone, with its default scale 1/sqrt(E)."""

    def __init__(self, causal):
        super().__init__()
        self.causal = causal

    def forward(self, x):
        q, k, v = x.chunk(3, dim=-1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)


class Function(nn.Module):
    """One function of the functional API as a module."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


# case name -> (module factory, module description for the C++ side, input, loss kind). A new case
# goes last: each case's values are drawn in this order.
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
        # nn::gpt(gpt_config("tiny", 40)): context 16, 2 layers, 2 heads, 16 wide.
        "gpt_tiny": (lambda: GPT(40, 16, 2, 2, 16), "gpt(gpt_config(\"tiny\", 40))",
                     torch.randint(0, 40, (3, 16), generator=g), "lm"),
        # Head width 5 and 7 positions: odd sizes; inputs of std 2 give peaked softmax rows.
        "attention": (lambda: Attention(False), "Attention(causal false)", randn(2, 3, 7, 15) * 2, "mse"),
        "attention_causal": (lambda: Attention(True), "Attention(causal true)", randn(2, 3, 7, 15) * 2, "mse"),
        # The functional API (autograd/ops.h) as modules; log1p's input kept above -1.
        "sin": (lambda: Function(torch.sin), "sin", randn(5, 7) * 4, "mse"),
        "cos": (lambda: Function(torch.cos), "cos", randn(5, 7) * 4, "mse"),
        "erf": (lambda: Function(torch.erf), "erf", randn(5, 7) * 1.5, "mse"),
        "expm1": (lambda: Function(torch.expm1), "expm1", randn(5, 7) * 2, "mse"),
        "log1p": (lambda: Function(torch.log1p), "log1p", randn(5, 7).abs() * 3 - 0.9, "mse"),
        "logsumexp": (lambda: Function(lambda x: torch.logsumexp(x, 1)), "logsumexp(x, {1})", randn(5, 7) * 3, "mse"),
        "var": (lambda: Function(lambda x: torch.var(x, 1)), "var(x, {1})", randn(5, 7) * 2, "mse"),
        "std": (lambda: Function(lambda x: torch.std(x, 1, correction=0, keepdim=True)),
                "std(x, {1}, 0, keepdim)", randn(5, 7) * 2, "mse"),
        "masked_fill": (lambda: Function(lambda x: x.masked_fill(x > 0.5, -2.0)), "masked_fill(x, x > 0.5, -2)",
                        randn(5, 7), "mse"),
        # The index ops read the fixed indices ROWS and PICKS (test_golden.cpp has the same), along
        # dim 1: each example on its own, as order_spread expects (PICKS reads the same flipped).
        "index_select": (lambda: Function(lambda x: torch.index_select(x, 1, ROWS)), "index_select(x, 1, ROWS)",
                         randn(4, 5), "mse"),
        "index_add": (lambda: Function(lambda x: x.index_add(1, ROWS, x[:, :4] * 3)),
                      "index_add(x, 1, ROWS, 3 x[:, :4])", randn(4, 5), "mse"),
        "gather": (lambda: Function(lambda x: torch.gather(x, 1, PICKS)), "gather(x, 1, PICKS)", randn(4, 5), "mse"),
        "scatter_add": (lambda: Function(lambda x: torch.scatter_add(x, 1, PICKS, x[:, 1:4] * 2)),
                        "scatter_add(x, 1, PICKS, 2 x[:, 1:4])", randn(4, 5), "mse"),
        "cumsum": (lambda: Function(lambda x: torch.cumsum(x, 1)), "cumsum(x, 1)", randn(4, 5), "mse"),
        "sort": (lambda: Function(lambda x: torch.sort(x, stable=True, dim=1, descending=True).values),
                 "sort(x, 1, descending).values", randn(4, 5), "mse"),
        "topk": (lambda: Function(lambda x: torch.topk(x, 3, 1).values), "topk(x, 3, 1).values", randn(4, 5), "mse"),
    }


ROWS = torch.tensor([3, 0, 3, 1])
PICKS = torch.tensor([[4, 4, 0], [1, 2, 1], [1, 2, 1], [4, 4, 0]])


def make_target(kind, output, g):
    if kind == "cross_entropy":
        return torch.randint(0, output.shape[1], (output.shape[0],), generator=g)
    if kind == "lm":  # the next token at every position of (B, T, V) logits
        return torch.randint(0, output.shape[-1], output.shape[:-1], generator=g)
    return torch.randn(*output.shape, generator=g)


def loss_of(kind, output, target):
    if kind == "cross_entropy":
        return F.cross_entropy(output, target)
    if kind == "lm":
        return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))
    return F.mse_loss(output, target)


def as_float64(t):
    return t.double() if t.is_floating_point() else t


def fresh(model32):
    """A float64 copy of the float32 module, in training mode."""
    model = copy.deepcopy(model32).double()
    model.train()
    return model


def decay_groups(params):
    params = list(params)
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": GROUP_WEIGHT_DECAY},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def steps(model32, x, target, kind, optimizer, settings, n=2, groups=lambda params: params):
    model = fresh(model32)
    opt = optimizer(groups(model.parameters()), **settings)
    for _ in range(n):
        opt.zero_grad()
        loss_of(kind, model(x), target).backward()
        opt.step()
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def compute(case, model32, x32, target32, kind):
    """Every stored float64 value of a case; its batch reversed when x32 and target32 are."""
    x, target = as_float64(x32), as_float64(target32)
    model = fresh(model32)
    xin = x.clone().requires_grad_(x.is_floating_point())
    output = model(xin)
    loss = loss_of(kind, output, target)
    loss.backward()
    out = {"output": output.detach(), "loss": loss.detach()}
    out.update({f"grad.{k}": p.grad for k, p in model.named_parameters()})
    out.update({f"buffer_after.{k}": v.clone() for k, v in model.named_buffers()})
    if x.is_floating_point():
        out["input_grad"] = xin.grad
    if any(True for _ in model.parameters()):
        out.update({f"sgd.{k}": v for k, v in steps(model32, x, target, kind, torch.optim.SGD, SGD).items()})
        out.update({f"adam.{k}": v for k, v in steps(model32, x, target, kind, torch.optim.Adam, ADAM).items()})
        if case != "cnn":  # the CNN's copies are the largest; SGD and Adam cover it
            out.update({f"adamw.{k}": v for k, v in steps(model32, x, target, kind, torch.optim.AdamW,
                                                          ADAMW).items()})
        if kind == "lm":
            out.update({f"adamw_groups.{k}": v for k, v in steps(model32, x, target, kind, torch.optim.AdamW,
                                                                 ADAMW_GROUPS, groups=decay_groups).items()})
    return out


def order_spread(values, reversed_values):
    """The largest |a - b| / max|a| over the floating tensors, per-example ones flipped back."""
    spread = 0.0
    for k, a in values.items():
        if not a.is_floating_point() or a.numel() == 0:
            continue
        b = reversed_values[k]
        if k in ("output", "input_grad"):
            b = b.flip(0)
        scale = a.abs().max().item()
        if scale > 0:
            spread = max(spread, (a - b).abs().max().item() / scale)
    return spread


def main(only):
    """Writes every case, or those named in `only`; the others' random draws are made all the same."""
    from safetensors.torch import save_file  # here: benchmarks/torch/workloads.py imports the models without it
    all_cases = cases()
    unknown = sorted(set(only) - set(all_cases))
    if unknown:
        raise SystemExit(f"no such case: {', '.join(unknown)} (cases: {', '.join(all_cases)})")
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(99)
    for case, (factory, description, x, kind) in all_cases.items():
        model32 = factory()
        model32.train()
        state = {k: v.clone() for k, v in model32.state_dict().items()}
        with torch.no_grad():
            target = make_target(kind, model32(x), g)
        if only and case not in only:
            continue
        model32.load_state_dict(state)  # the forward above moved BatchNorm's running statistics
        values = compute(case, model32, x, target, kind)
        spread = order_spread(values, compute(case, model32, x.flip(0), target.flip(0), kind))
        if spread > MAX_ORDER_SPREAD:
            raise SystemExit(f"{case}: summation order moves the float64 values by {spread:.2e}")
        out = {"input": x, "target": target}
        out.update({f"state.{k}": v for k, v in state.items()})
        out.update(values)
        out = {k: v.contiguous() for k, v in out.items()}
        meta = {"case": case, "loss": kind, "module": description, "torch": torch.__version__,
                "order_spread": f"{spread:.2e}"}
        save_file(out, os.path.join(OUT, f"{case}.safetensors"), metadata=meta)
        print(f"{case}: {len(out)} tensors, order spread {spread:.2e}")


if __name__ == "__main__":
    main(sys.argv[1:])

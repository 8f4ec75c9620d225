#!/usr/bin/env python3
"""Checks that multigrad's safetensors files are what the Python `safetensors` package reads
and writes (io/safetensors.h). Not part of `make test`: it needs `safetensors` and `numpy`,
e.g. from a git-ignored virtual environment:

    python3 -m venv .venv && .venv/bin/pip install safetensors numpy
    .venv/bin/python scripts/check_safetensors.py check FILE...   # files multigrad wrote
    .venv/bin/python scripts/check_safetensors.py write FILE      # a file for multigrad to read

`check` loads each file with the Python package, prints its tensors and metadata, and, when its
tensors share one dtype and it has at most one metadata key (so the package's order of both
equals multigrad's), re-serialises them with the package and requires the very same bytes.
`write` saves a tensor of each dtype multigrad supports but BF16 (values in EXPECTED below).
"""
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save, save_file

# What `write` saves, for a reader to compare against. numpy has no bfloat16, so no BF16 here.
EXPECTED = {
    "f32": np.array([[1.5, -2.0, 0.0], [3.25, 1e-30, -0.0]], dtype=np.float32),
    "f64": np.array([np.pi, -1e300], dtype=np.float64),
    "f16": np.array([1.0, -65504.0, 2.0**-24, np.inf], dtype=np.float16),
    "i64": np.array([-(2**63), 2**63 - 1, 7], dtype=np.int64),
    "mask": np.array([True, False, True, True]),
    "scalar": np.array(4.0, dtype=np.float32),
    "empty": np.zeros((0, 3), dtype=np.float64),
}


def check(path):
    # safe_open parses and validates the header (offsets, sizes, dtypes) in the package's Rust
    # core; numpy has no bfloat16, so BF16 tensors are listed from their slices, not loaded.
    tensors = {}
    with safe_open(path, framework="numpy") as f:
        metadata = f.metadata() or {}
        names = sorted(f.keys())
        for name in names:
            view = f.get_slice(name)
            print(f"  {name}: {view.get_dtype()} {list(view.get_shape())}")
            if view.get_dtype() != "BF16":
                tensors[name] = f.get_tensor(name)
    print(f"  metadata: {metadata}")
    dtypes = {array.dtype for array in tensors.values()}
    # The package orders tensors by dtype, then name, and metadata in hash order: bytes are
    # comparable when there is one dtype and at most one metadata key.
    if len(tensors) == len(names) and len(dtypes) <= 1 and len(metadata) <= 1:
        with open(path, "rb") as file:
            ours = file.read()
        if ours != save(tensors, metadata=metadata or None):
            print(f"{path}: FAILED: the package serialises these tensors to other bytes")
            return False
        print(f"{path}: OK, byte-identical to the package's own writer")
    else:
        print(f"{path}: OK (several dtypes or metadata keys: bytes not compared)")
    return True


def main(argv):
    if len(argv) >= 3 and argv[1] == "check":
        return 0 if all([check(path) for path in argv[2:]]) else 1
    if len(argv) == 3 and argv[1] == "write":
        save_file(EXPECTED, argv[2], metadata={"writer": "python-safetensors"})
        print(f"wrote {argv[2]}")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))

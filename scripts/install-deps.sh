#!/usr/bin/env bash
# Installs the Debian packages that building and testing multigrad need (docs/build.md).
#
# Idempotent and quick when nothing is missing: dpkg-query decides first, and only when some
# package is absent does it run `apt-get update` (once) and install just those. Runs as root;
# otherwise through sudo when there is one, else it names the command to run and fails.
# The CUDA toolkit is not a package here: it is used from /usr/local/cuda when present.
set -euo pipefail

packages=(
  cmake ninja-build g++ make pkg-config
  catch2              # Catch2 v2: the test framework
  libopenblas-dev     # CPU matmul (cblas_sgemm / cblas_dgemm)
  libdnnl-dev         # float32 CPU convolutions (oneDNN)
  zlib1g-dev          # gzip'd IDX data files
  nlohmann-json3-dev  # safetensors headers
  libcli11-dev        # the `multigrad` command line
  libboost-context-dev  # the CUDA simulator's fibers, one per CUDA thread (sim/)
  libopenmpi-dev openmpi-bin  # the mpi backend (parallel/comm/mpi.cpp) and mpiexec for its tests
  dataset-fashion-mnist  # the training data, under /usr/share/datasets/fashion-mnist
  fortunes fortunes-min  # English text for the GPT, under /usr/share/games/fortunes (BSD licence)
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ "$status" == installed ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "install-deps: not root and no sudo; as root run: apt-get install -y ${missing[*]}" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -q
"${as_root[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"

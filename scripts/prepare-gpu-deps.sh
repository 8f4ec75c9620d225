#!/usr/bin/env bash
# Prepares .deps/ (git-ignored) for scripts/gpu-check.sh, which runs on a GPU machine that has
# the CUDA toolkit, CMake, ninja and a compiler but reaches no package registry.
#
# Run it here, where Debian's registry is reachable: it downloads the packages the build needs
# beyond the toolkit and extracts them (dpkg -x, no install scripts) into .deps/root, then
# drops what the build never reads (docs, static BLAS archives, the LAPACK and reference-BLAS
# aliases) so the folder can travel with the work tree. Repeatable: each run starts afresh.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
deps="$repo/.deps"
root="$deps/root"
# Headers and CMake packages (zlib for the gzip'd data files), plus the OpenBLAS shared library
# and its Fortran runtime.
# (libopenblas-dev and libopenblas0 are metapackages with nothing but docs: the files are in
# the -pthread packages.)
packages=(
  catch2 libcli11-dev nlohmann-json3-dev zlib1g-dev zlib1g
  libopenblas0-pthread libopenblas-pthread-dev
  libgfortran5 libquadmath0
)
# Largest .deps/ we accept: the work tree travels to the GPU machine under a 64 MiB limit.
max_mib=48

if ! apt-cache show "${packages[@]}" >/dev/null 2>&1; then
  [[ $(id -u) -eq 0 ]] || { echo "prepare-gpu-deps: package lists missing; run apt-get update as root" >&2; exit 1; }
  apt-get update -q
fi

download=$(mktemp -d)
trap 'rm -rf "$download"' EXIT
# apt drops privileges to _apt while downloading; it must be able to write here.
chmod 777 "$download"
(cd "$download" && apt-get download -q "${packages[@]}")

rm -rf "$root"
mkdir -p "$root"
for deb in "$download"/*.deb; do
  dpkg -x "$deb" "$root"
done

blas="$root/usr/lib/x86_64-linux-gnu/openblas-pthread"
rm -rf "$root/usr/share/doc" "$root/usr/share/lintian" "$root/usr/share/gcc"
rm -f "$blas"/*.a "$blas"/libblas.* "$blas"/liblapack.*
[[ -f "$root/usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h" && -e "$blas/libopenblas.so" ]] ||
  { echo "prepare-gpu-deps: cblas.h or libopenblas.so missing after extraction" >&2; exit 1; }

{
  echo "# .deps/root: Debian packages extracted by scripts/prepare-gpu-deps.sh on $(date -u +%F)"
  echo "arch $(dpkg --print-architecture)"
  for deb in "$download"/*.deb; do
    # shellcheck disable=SC2016  # the format is dpkg's, not the shell's
    dpkg-deb -W --showformat='${Package} ${Version}\n' "$deb"
  done
} >"$deps/MANIFEST"

size_mib=$(du -sm "$deps" | cut -f1)
echo "prepare-gpu-deps: .deps/ holds ${#packages[@]} packages, ${size_mib} MiB"
if ((size_mib > max_mib)); then
  echo "prepare-gpu-deps: .deps/ is over ${max_mib} MiB; it would not travel with the tree" >&2
  exit 1
fi

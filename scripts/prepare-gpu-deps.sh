#!/usr/bin/env bash
# Prepares .deps/ (git-ignored) for scripts/gpu-check.sh, which runs on a GPU machine that has
# the CUDA toolkit, CMake, ninja and a compiler but reaches no package registry.
#
# Run it here, where Debian's registry is reachable: it downloads the packages the build needs
# beyond the toolkit and extracts them (dpkg -x, no install scripts) into .deps/root, drops what
# the build never reads (docs, static BLAS archives, the LAPACK and reference-BLAS aliases), makes
# every absolute symbolic link relative (an absolute one would point into the other machine's
# /), and packs the folder into .deps/gpu-deps.tar.gz: the one path a GPU call carries, which
# gpu-check.sh unpacks there. Then checks that the tree plus that archive fit what a call may
# send (scripts/transfer-size.sh). Repeatable: each run starts afresh.
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
# /usr/lib/x86_64-linux-gnu/libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13 becomes a link within
# root; one whose target is not in root would dangle there and is an error here.
while IFS= read -r -d '' link; do
  target=$(readlink "$link")
  [[ -e "$root$target" ]] || { echo "prepare-gpu-deps: $link points to $target, which no package here holds" >&2; exit 1; }
  ln -sfr "$root$target" "$link"
done < <(find "$root" -type l -lname '/*' -print0)
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
cp "$deps/MANIFEST" "$root/MANIFEST"

archive="$deps/gpu-deps.tar.gz"
tar -czf "$archive" -C "$deps" root
echo "prepare-gpu-deps: ${#packages[@]} packages, $(du -sm "$root" | cut -f1) MiB unpacked, $(du -sm "$archive" | cut -f1) MiB packed in $archive"
"$repo/scripts/transfer-size.sh" "$archive"

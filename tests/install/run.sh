#!/usr/bin/env bash
# The installed package builds a consumer: install BUILD_DIR into WORK_DIR/prefix, then
# configure, build and run tests/install/consumer against that prefix only, as research code
# embedding multigrad would (find_package(multigrad CONFIG) + multigrad::multigrad).
#
# usage: run.sh BUILD_DIR WORK_DIR     (WORK_DIR is emptied first)
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR WORK_DIR" >&2
  exit 2
fi
build_dir=$1
work_dir=$2
here=$(cd "$(dirname "$0")" && pwd)

rm -rf "$work_dir"
mkdir -p "$work_dir"
prefix="$work_dir/prefix"

cmake --install "$build_dir" --prefix "$prefix" >"$work_dir/install.log"
# The installed CLI must run from the prefix alone (its RPATH finds the installed library).
"$prefix/bin/multigrad" --version

cmake -S "$here/consumer" -B "$work_dir/consumer-build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" >"$work_dir/configure.log"
cmake --build "$work_dir/consumer-build" >"$work_dir/build.log"

# The consumer must load the installed library, not the one in the build tree.
loaded=$(ldd "$work_dir/consumer-build/app" | awk '/libmultigrad/ {print $3}')
case "$loaded" in
  "$prefix"/*) ;;
  *) echo "install_consumer: app loads libmultigrad from '$loaded', not from $prefix" >&2; exit 1 ;;
esac

"$work_dir/consumer-build/app"

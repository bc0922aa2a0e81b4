#!/usr/bin/env bash
# Installs the build (default build/, or $1) into a temporary prefix and builds and runs examples/consumer against it:
# find_package(kerntune) + kerntune::kerntune, the public headers and libkerntune.so only. Exit 0 when all of it works.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --build "$build" -j"$(nproc)" --target kerntune >/dev/null
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
find "$tmp/prefix" -type f -o -type l | sed "s|$tmp/prefix/||" | sort
cmake -S examples/consumer -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
"$tmp/consumer/consumer"

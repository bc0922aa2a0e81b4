#!/usr/bin/env bash
# Builds (Release) and copies the binaries the GPU machine needs into build-gpu/ (git-ignored),
# to be carried to the GPU machine: `carry: ["build-gpu"]`, then `scripts/gpu_all.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-rel -j"$(nproc)" --target kerntune_tests autotune kerntune example_attention_prefill
mkdir -p build-gpu
cp build-rel/tests/kerntune_tests build-rel/tuner/autotune build-rel/runtime/libkerntune.so build-rel/examples/example_attention_prefill build-gpu/
cp -L build-rel/runtime/libkerntune.so build-gpu/libkerntune.so.0  # the example's soname, found through its $ORIGIN rpath
strip build-gpu/kerntune_tests build-gpu/autotune build-gpu/libkerntune.so build-gpu/libkerntune.so.0 \
  build-gpu/example_attention_prefill
du -sh build-gpu

#!/usr/bin/env bash
# One command: install dependencies, build, and run the main job on shapes/qwen7b.json.
# With a GPU: tune (compile, verify against float64, time) every attention_prefill problem.
# Without one: the compile-only sweep for sm_90a (autotune says that no GPU was found).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target autotune
arch=${KT_ARCH:-sm_90a}
exec build/tuner/autotune --arch "$arch" --shapes "${KT_SHAPES:-shapes/qwen7b.json}" "$@"

#!/usr/bin/env bash
# One command: install dependencies, build, and run the main job on shapes/qwen7b.json.
# With a GPU: tune (compile, verify against float64, time) every problem of the shapes file (attention_prefill
# and qkv_proj in every listed weight format) into kerntune-qwen7b.db.
# Without one: the compile-only sweep for sm_90a (autotune says that no GPU was found).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target autotune
arch=${KT_ARCH:-sm_90a}
# The tuning database (created if missing; rerunning resumes). Without a GPU autotune says so and runs
# the compile-only sweep.
exec build/tuner/autotune --arch "$arch" --shapes "${KT_SHAPES:-shapes/qwen7b.json}" --db "${KT_DB:-kerntune-qwen7b.db}" "$@"

#!/usr/bin/env bash
# One command: install dependencies, build, and run the main job on shapes/qwen7b.json.
# With a GPU: tune (compile, verify against float64, time) every problem of the shapes file (attention_prefill
# and qkv_proj in every listed weight format) into kerntune-qwen7b.db (rerunning resumes), for the GPU's arch
# (or $KT_ARCH).
# Without one: refuses (exit 2, before setting anything up) and says how to run the compile-only sweep instead:
# KT_COMPILE_ONLY=1 ./scripts/run.sh compiles every variant for $KT_ARCH (default sm_90a) and writes no database.
# Environment: KT_SHAPES (default shapes/qwen7b.json), KT_DB (default kerntune-qwen7b.db), KT_ARCH, KT_COMPILE_ONLY.
# Extra arguments go to autotune.
set -euo pipefail
cd "$(dirname "$0")/.."
shapes=${KT_SHAPES:-shapes/qwen7b.json}

have_gpu() {
  { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; } ||
    compgen -G '/proc/driver/nvidia/gpus/*' >/dev/null
}

compile_only=${KT_COMPILE_ONLY:-0}
if [ "$compile_only" != 1 ] && ! have_gpu; then
  cores=$(nproc)
  cat >&2 <<MSG
run.sh: no NVIDIA GPU found (nvidia-smi, /proc/driver/nvidia/gpus): nothing can be tuned here; no database written.
  The compile-only sweep builds every variant of $shapes without a GPU (for shapes/qwen7b.json about
  9000 binaries at roughly 0.3 s each per core: about $(( 9000 * 3 / 10 / cores / 60 + 1 )) min on this machine's $cores cores,
  plus the build; autotune prints its own estimate before compiling). To run it:
    KT_COMPILE_ONLY=1 ./scripts/run.sh
MSG
  exit 2
fi

./scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target autotune
if [ "$compile_only" = 1 ]; then
  echo "run.sh: compile-only sweep of $shapes for ${KT_ARCH:-sm_90a} (no database is written)"
  exec build/tuner/autotune --arch "${KT_ARCH:-sm_90a}" --shapes "$shapes" --compile-only "$@"
fi
exec build/tuner/autotune ${KT_ARCH:+--arch "$KT_ARCH"} --shapes "$shapes" --db "${KT_DB:-kerntune-qwen7b.db}" "$@"

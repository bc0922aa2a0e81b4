#!/usr/bin/env bash
# Builds the wgmma_pairs timeline driver (trace_pairs.cu) for one variant with nvcc, into build-gpu/trace/:
#   bench/ws_trace/build_pairs.sh 128 80 6      # tile_m 128, tile_n 80, 6 stages
# then on the GPU: build-gpu/trace/wp_128_80_6 M K (KT_TRACE_DUMP=1 also prints one row per block of the last traced
# launch). KT_TRACE_FLAGS adds compiler flags; KT_TRACE_TAG is appended to the binary's name.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 TILE_M TILE_N STAGES" >&2; exit 2; }
root="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$root/build-gpu/trace"
/usr/local/cuda/bin/nvcc -std=c++17 -O2 -gencode arch=compute_90a,code=sm_90a -diag-suppress 1886 -o "$root/build-gpu/trace/wp_$1_$2_$3${KT_TRACE_TAG:-}" \
  -I"$root/templates" -I"$root/include" -DKTM="$1" -DKTN="$2" -DKS="$3" ${KT_TRACE_FLAGS:-} \
  "$root/bench/ws_trace/trace_pairs.cu" -lcuda

#!/usr/bin/env bash
# Builds the wgmma_ws timeline driver (trace_ws.cu) for one variant (fp16 weights unless KFMT) with nvcc, into build-gpu/trace/:
#   bench/ws_trace/build.sh 64 128 2 6 1   # tile_m 64, tile_n 128, 2 consumer warpgroups, 6 stages, stream-K (0: split_k 1)
# (SPLIT_K, default 1: split-K over that many blocks per tile when STREAMK is 0)
# then on the GPU: build-gpu/trace/ws_64_128_2_6_1_1 M K. KT_TRACE_FLAGS adds compiler flags (-DKFMT=3: int4 weights,
# -DKFMT=4: nf4); KT_TRACE_TAG is appended to the binary's name.
set -euo pipefail
[ $# -eq 5 ] || [ $# -eq 6 ] || { echo "usage: $0 TILE_M TILE_N CONSUMERS STAGES STREAMK [SPLIT_K]" >&2; exit 2; }
sk=${6:-1}
root="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$root/build-gpu/trace"
/usr/local/cuda/bin/nvcc -std=c++17 -O2 -gencode arch=compute_90a,code=sm_90a -diag-suppress 1886 -o "$root/build-gpu/trace/ws_$1_$2_$3_$4_$5_$sk${KT_TRACE_TAG:-}" \
  -I"$root/templates" -I"$root/include" -DKTM="$1" -DKTN="$2" -DKC="$3" -DKS="$4" -DKSK="$5" -DKSPLIT="$sk" ${KT_TRACE_FLAGS:-} \
  "$root/bench/ws_trace/trace_ws.cu" -lcuda

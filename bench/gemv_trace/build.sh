#!/usr/bin/env bash
# Builds the gemv timeline driver (trace.cu) for one variant with nvcc, into build-gpu/trace/ (carried to the GPU):
#   bench/gemv_trace/build.sh f16 3 8 16 4 1 1 1 [2]  # fp16 activations, int4, tile_m 8, tile_n 16, 4x1 warps, p1, stages 1[, cluster 2]
# then on the GPU: build-gpu/trace/tr_f16_3_8_16_4_1_1_1_cl1 [M]. STAGES 2 encodes the weight's TMA map as runtime/qkv.cpp does
# (links -lcuda). KT_TRACE_FLAGS adds compiler flags; CLUSTER 0 builds the balanced tail (config split_k 0, KBAL=1).
set -euo pipefail
[ $# -eq 8 ] || [ $# -eq 9 ] || { echo "usage: $0 DT(f16|bf16) FORMAT TILE_M TILE_N WARPS_K WARPS_N PREFETCH STAGES [CLUSTER]" >&2; exit 2; }
cs=${9:-1}
bal=0
if [ "$cs" = 0 ]; then bal=1; fi
root="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$root/build-gpu/trace"
/usr/local/cuda/bin/nvcc -std=c++17 -O2 -arch=sm_90a -diag-suppress 1886 -o "$root/build-gpu/trace/tr_$1_$2_$3_$4_$5_$6_$7_$8_cl$cs" \
  -I"$root/templates" -I"$root/include" -DKDT="$1" -DKF="$2" -DKTM="$3" -DKTN="$4" -DKWK="$5" -DKWN="$6" -DKP="$7" -DKS="$8" -DKCS="$([ $bal = 1 ] && echo 1 || echo $cs)" -DKBAL=$bal ${KT_TRACE_FLAGS:-} \
  "$root/bench/gemv_trace/trace.cu" -lcuda

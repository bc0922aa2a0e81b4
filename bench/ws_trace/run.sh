#!/usr/bin/env bash
# Builds (here, not on the GPU machine) the traced variants the NOTES item used; on the GPU: bench/ws_trace/run.sh run
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -n "${KT_WS_VARIANTS:-}" ]; then IFS=, read -ra V <<< "$KT_WS_VARIANTS"; else V=("16 128 2 6 1" "16 128 2 6 0" "64 128 2 6 1" "64 128 2 6 0" "128 128 2 4 1" "128 128 2 6 0"); fi
if [ "${1:-build}" = build ]; then
  for v in "${V[@]}"; do bench/ws_trace/build.sh $v 2>&1 | grep -i " error" || true; done
  exit 0
fi
for v in "${V[@]}"; do
  set -- $v
  m=$1; [ "$1" = 128 ] && m=256
  for K in 512 3584; do build-gpu/trace/ws_$1_$2_$3_$4_$5_${6:-1} $m $K; done
done

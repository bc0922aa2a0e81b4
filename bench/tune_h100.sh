#!/usr/bin/env bash
# The tuning behind bench/results (H100): a quick tune of every family, a deeper qkv_proj tune of the tiled sizes
# (fp16 weights, row-major and K-blocked, with fp16 activations; quantized weights, row-major and K-blocked, with bf16
# activations: the benchmark's rows) and of the decode sizes, merged into $DB_DIR/merged.db. Then: KT_BENCH_DB=$DB_DIR/merged.db KT_BENCH_ARGS=--quick
# scripts/gpu_all.sh bench example. Binaries from build-gpu/ (scripts/stage_gpu.sh); logs under $OUT.
# PARTS (default all: "quick qkv_tiled_fp16 qkv_tiled_quant qkv_decode merge") runs a subset, e.g. to split the tune
# over device calls of at most 10 minutes each (same DB_DIR on a machine kept warm; on an H100 with a cold cubin cache
# PARTS="quick qkv_tiled_fp16" takes about 8 min, PARTS=qkv_tiled_quant 4.5, PARTS="qkv_decode merge" 4).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${KT_BIN:-build-gpu}
DB_DIR=${DB_DIR:-/tmp/kt}
OUT=${OUT:-/tmp/kerntune-out}
mkdir -p "$DB_DIR" "$OUT"
export KERNTUNE_CACHE_DIR=${KERNTUNE_CACHE_DIR:-/tmp/kerntune-cache}
PARTS=${PARTS:-quick qkv_tiled_fp16 qkv_tiled_quant qkv_decode merge}
has() { [[ " $PARTS " == *" $1 "* ]]; }
if has quick; then
  KT_QUICK_CANDIDATES=${KT_QUICK_CANDIDATES:-4} OUT="$DB_DIR" scripts/gpu_all.sh quicktune > "$OUT/quicktune.log" 2>&1
  tail -n 3 "$OUT/quicktune.log"
fi
for s in qkv_tiled_fp16:24 qkv_tiled_quant:24 qkv_decode:128; do
  name=${s%%:*}; n=${s##*:}
  has "$name" || continue
  "$BIN/autotune" --arch sm_90 --shapes "bench/shapes_$name.json" --db "$DB_DIR/$name.db" --budget-ms 5 \
    --max-candidates "$n" 2>&1 | grep -v "^compiled\|^measured" > "$OUT/tune_$name.log"
  tail -n 2 "$OUT/tune_$name.log"
  python3 bench/db_top.py "$DB_DIR/$name.db" --top 3 > "$OUT/top_$name.txt"
done
has merge || exit 0
"$BIN/autotune" merge "$DB_DIR/merged.db" "$DB_DIR/quick.db" "$DB_DIR/qkv_tiled_fp16.db" "$DB_DIR/qkv_tiled_quant.db" \
  "$DB_DIR/qkv_decode.db" 2>&1 | tail -n 2

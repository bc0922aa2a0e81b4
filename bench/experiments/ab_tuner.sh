#!/usr/bin/env bash
# Tuner A/B of two autotune binaries on one GPU machine, alternating base / new REPS times, each run into its own
# database, then the fastest candidates of each (bench/db_top.py). Tuner timing (us, median over batches).
#   OUT=/tmp/out bench/experiments/ab_tuner.sh SHAPES REGEX [REPS] [BUDGET_MS]
# Databases under $DB_DIR (default /tmp/kt-ab-db), logs and tables under $OUT. Binaries: $KT_BASE (default
# build-gpu/base/autotune) and $KT_NEW (default build-gpu/autotune). Each binary embeds its own templates, so the two
# runs compile different kernels; their cubin caches are kept apart.
set -uo pipefail
cd "$(dirname "$0")/../.."
shapes=$1; regex=$2; reps=${3:-2}; budget=${4:-20}
OUT=${OUT:-/tmp/kt-ab}; DB_DIR=${DB_DIR:-/tmp/kt-ab-db}; mkdir -p "$OUT" "$DB_DIR"  # databases kept off $OUT
base=${KT_BASE:-build-gpu/base/autotune}; new=${KT_NEW:-build-gpu/autotune}
for i in $(seq 1 "$reps"); do
  for which in base new; do
    bin=$base; [ "$which" = new ] && bin=$new
    db="$DB_DIR/ab_${which}_$i.db"; rm -f "$db"*
    KERNTUNE_CACHE_DIR=/tmp/ktc_ab_$which "$bin" --arch sm_90 --shapes "$shapes" --db "$db" --only "$regex" \
      --max-candidates 0 --budget-ms "$budget" > "$OUT/ab_${which}_$i.log" 2>&1 || echo "ab: $which run $i failed (see $OUT/ab_${which}_$i.log)"
    echo "== $which run $i"; python3 bench/db_top.py "$db" --top 8 | tee "$OUT/ab_${which}_$i.txt"
  done
done

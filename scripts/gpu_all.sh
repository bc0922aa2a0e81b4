#!/usr/bin/env bash
# Runs every [gpu] test and benchmark in one call on a GPU machine and writes logs + JSON under $OUT.
# Binaries come prebuilt in $KT_BIN (default build-gpu/, made by scripts/stage_gpu.sh on the build
# machine): the GPU machine has no SQLite/Catch2 headers and nothing is built there.
#   OUT=/tmp/out scripts/gpu_all.sh [tests|tune|qkv|anchors|python|quicktune|bench|example|gemv|stress|sanitize|tunetime|quality|devices|all]...
# (python: the ctypes package's torch tests and its torch custom operators; quicktune: a short tune of shapes/qwen7b.json into $OUT/quick.db;
#  bench: bench/bench_all.py side by side with the anchors, on $KT_BENCH_DB or the quick/full database;
#  example: examples/qwen7b_layer; gemv: the qkv_proj gemv [gpu] tests alone, about 8 min on the H100; stress: the
#  hidden gemv stress test over every packed format, fp16 / bf16 and M 1 / 16, KT_STRESS_REPS (default 20) launches of
#  each variant; sanitize: compute-sanitizer memcheck, racecheck and synccheck over every winner of a tuned database
#  ($KT_SANITIZE_DB, else the quick/full database of $OUT), and over the runtime's database-winners [gpu] tests, logs
#  in $OUT/sanitize_<tool>.log; tunetime: autotune's default on shapes/qwen7b.json with a cold cubin cache, timed, then
#  the same command again; KT_TUNETIME_BUDGET_S=S stops each call after S seconds (--time-budget) and
#  KT_TUNETIME_RESUME=1 continues the database and cache of the last call in /tmp, so a run longer than one call of the
#  device tool is measured over several, the times summed; quality: autotune's default and --strategy exhaustive
#  (--budget-ms KT_QUALITY_BUDGET_MS, default 10) on the named problems of KT_QUALITY_SHAPES (default
#  shapes/qwen7b.json; families KT_QUALITY_FAMILIES, default every family the file names), then
#  bench/tune_quality.py, the default's winners timed among the exhaustive measurements, bench/order_quality.py, the
#  candidate order against them, and bench/rematch.py, each problem over 1.03x timed again head to head;
#  KT_QUALITY_DEVICES (autotune --devices, default GPU 0) measures both on several GPUs;
#  KT_QUALITY_BUDGET_S / KT_QUALITY_RESUME=1 spread it over calls as tunetime's, and KT_QUALITY_STATE=dir over machines
#  (each call writes its measurements, without cubins and xz-compressed, to $OUT/quality_state/, in 15 MiB parts when
#  larger: the next call continues from that
#  folder); devices: the same tune of the named
#  problems of KT_DEVICES_SHAPES (default bench/shapes_devices_qwen7b_bf16.json; families KT_DEVICES_FAMILIES, default
#  every family the file names)
#  on GPU 0, then on every GPU (--devices all), from one pre-compiled cubin cache: candidates per second of each and
#  tune_quality.py of the all-GPU winners among the one-GPU measurements -- none of the six is part of "all".)
# The [gpu] tests exit 77 when a test case was skipped (it cannot run on this GPU; tests/README.md): reported here as a
# failure, since every test must run on the GPUs kerntune targets.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${KT_BIN:-build-gpu}
OUT=${OUT:-/tmp/kerntune-out}
mkdir -p "$OUT"
export KERNTUNE_CACHE_DIR=${KERNTUNE_CACHE_DIR:-/tmp/kerntune-cache}
what=("$@"); [ ${#what[@]} -eq 0 ] && what=(all)
want() { for w in "${what[@]}"; do [ "$w" = all ] || [ "$w" = "$1" ] && return 0; done; return 1; }
rc=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
if want tests; then
  # A queue of test cases, one process each, run on every GPU of the machine at once (a GPU takes the next case when
  # its last one ends; the [qkv] cases, the longest, go first). KT_TEST_SPEC picks a subset (default every
  # non-hidden [gpu] case). NVRTC compiles dominate the qkv cases; each process compiles on every core.
  # KT_TEST_NAMES=file runs exactly the cases named there, one per line (e.g. the not_run.txt of an earlier call);
  # KT_TEST_BUDGET_S=S starts no case after S seconds (a case started before runs to its end: leave room for the
  # longest, about 7 minutes on an H200) and lists the cases it did not start in $OUT/gpu_tests/not_run.txt, so that
  # the whole suite runs over several calls of a device whose calls are time-limited.
  spec=${KT_TEST_SPEC:-"[gpu]~[.]"}
  ngpu=$(nvidia-smi -L | grep -c "^GPU")
  mkdir -p "$OUT/gpu_tests"
  # Catch2 reads each line of -f as one exact name, with ',' '[' ']' '\' escaped.
  if [ -n "${KT_TEST_NAMES:-}" ]; then
    [ -r "$KT_TEST_NAMES" ] || { echo "gpu_all: KT_TEST_NAMES=$KT_TEST_NAMES is not a readable file"; exit 2; }
    sed '/^$/d' "$KT_TEST_NAMES" > "$OUT/gpu_tests/names.txt.new" && mv "$OUT/gpu_tests/names.txt.new" "$OUT/gpu_tests/names.txt"
    spec="names in $KT_TEST_NAMES"
  else
    { "$BIN/kerntune_tests" "$spec" --list-test-names-only | grep "^qkv_proj"
      "$BIN/kerntune_tests" "$spec" --list-test-names-only | grep -v "^qkv_proj"; } | sed '/^$/d' > "$OUT/gpu_tests/names.txt"
  fi
  rm -f "$OUT/gpu_tests/not_run.txt"
  echo "== [gpu] tests ($spec): $(grep -c . "$OUT/gpu_tests/names.txt") cases on $ngpu GPU(s)"
  export KT_TESTS_T0=$(date +%s) KT_TEST_BUDGET_S=${KT_TEST_BUDGET_S:-0}
  run_case() {  # run_case <name>: one case on the GPU of this xargs slot
    local f t0=$SECONDS st
    if [ "$KT_TEST_BUDGET_S" -gt 0 ] && [ $(($(date +%s) - KT_TESTS_T0)) -ge "$KT_TEST_BUDGET_S" ]; then
      printf '%s\n' "$1" >> "$OUT/gpu_tests/not_run.txt"
      echo "not run (KT_TEST_BUDGET_S=$KT_TEST_BUDGET_S spent): $1"
      return 0
    fi
    f="$OUT/gpu_tests/$(printf '%s' "$1" | tr -c 'A-Za-z0-9' '_' | cut -c1-80)"
    printf '%s\n' "$1" | sed 's/[][,\\]/\\&/g' > "$f.name"
    [ "$("$BIN/kerntune_tests" -f "$f.name" --list-test-names-only | grep -c .)" -eq 1 ] || { echo "no such case: $1"; return 1; }
    CUDA_VISIBLE_DEVICES=$KT_SLOT "$BIN/kerntune_tests" -f "$f.name" -r compact > "$f.log" 2>&1
    st=$?
    echo "exit $st $((SECONDS - t0)) s GPU $KT_SLOT: $1: $(grep -E "passed|failed|Passed|skipped" "$f.log" | tail -n 1 | cut -c1-160)"
    return $st
  }
  export -f run_case; export BIN OUT
  xargs -a "$OUT/gpu_tests/names.txt" -d '\n' -P "$ngpu" --process-slot-var=KT_SLOT -I{} bash -c 'run_case "$1"' _ {} \
    | tee "$OUT/gpu_tests.log"
  st=${PIPESTATUS[0]}
  grep -q "^exit 77" "$OUT/gpu_tests.log" && echo "gpu_all: some [gpu] test cases were skipped on this GPU (listed above)"
  [ "$st" -eq 0 ] || { rc=1; echo "gpu_all: FAILED: $(grep -c "^exit [1-9]" "$OUT/gpu_tests.log") [gpu] test case(s)"; }
  if [ -s "$OUT/gpu_tests/not_run.txt" ]; then
    rc=1
    echo "gpu_all: $(grep -c . "$OUT/gpu_tests/not_run.txt") [gpu] test case(s) not run (KT_TEST_BUDGET_S spent);" \
      "run them with KT_TEST_NAMES=<a copy of $OUT/gpu_tests/not_run.txt>"
  fi
fi
if want tune; then
  echo "== autotune (attention_prefill, qwen7b), cold cubin cache, then the same command again"
  rm -rf "$KERNTUNE_CACHE_DIR" "$OUT/qwen7b-h100.db"*
  cmd=("$BIN/autotune" --arch sm_90 --shapes shapes/qwen7b.json --db "$OUT/qwen7b-h100.db" --families attention_prefill
       --budget-ms "${KT_BUDGET_MS:-100}" --json "$OUT/tune.json")
  t0=$(date +%s.%N)
  "${cmd[@]}" 2>&1 | grep -v "^compiled" | tee "$OUT/tune.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  t1=$(date +%s.%N)
  "${cmd[@]}" > "$OUT/tune_again.log" 2>&1 || rc=1
  t2=$(date +%s.%N)
  python3 -c "print(f'cold tune: {$t1-$t0:.1f} s; same command again: {$t2-$t1:.1f} s')" | tee "$OUT/tune_times.txt"
  grep "candidates to measure" "$OUT/tune_again.log"
  "$BIN/autotune" show --db "$OUT/qwen7b-h100.db" > "$OUT/show.txt" 2>&1; tail -2 "$OUT/show.txt"
fi
if want tunetime && [[ " ${what[*]} " == *" tunetime "* ]]; then
  echo "== autotune's default on shapes/qwen7b.json (cold cubin cache), then the same command again"
  tdb=/tmp/kt-tunetime.db; tcache=/tmp/kt-tunetime-cache; tsum=/tmp/kt-tunetime.seconds
  [ "${KT_TUNETIME_RESUME:-0}" = 1 ] || rm -rf "$tdb"* "$tcache" "$tsum"
  cmd=("$BIN/autotune" --arch sm_90 --shapes shapes/qwen7b.json --db "$tdb" --cache-dir "$tcache")
  t0=$(date +%s.%N)
  "${cmd[@]}" --time-budget "${KT_TUNETIME_BUDGET_S:-0}" --json "$OUT/tunetime.json" > "$OUT/tunetime.log" 2>&1 || rc=1
  t1=$(date +%s.%N)
  python3 -c "print(f'{$t1-$t0:.1f}')" >> "$tsum"
  grep "^autotune" "$OUT/tunetime.log" | cut -c1-300
  if grep -q "time-budget .* spent" "$OUT/tunetime.log"; then
    echo "tunetime: not finished; run again with KT_TUNETIME_RESUME=1 while the machine is warm"
  else
    "${cmd[@]}" > "$OUT/tunetime_again.log" 2>&1 || rc=1
    t2=$(date +%s.%N)
    python3 -c "
t = [float(x) for x in open('$tsum')]
print(f'default tune: {sum(t):.1f} s over {len(t)} call(s) {t}; same command again: {$t2-$t1:.1f} s')" | tee "$OUT/tunetime.txt"
    grep "candidates to measure" "$OUT/tunetime_again.log"
  fi
fi
if want quality && [[ " ${what[*]} " == *" quality "* ]]; then
  qshapes=${KT_QUALITY_SHAPES:-shapes/qwen7b.json}
  qtag=$(basename "$qshapes" .json)${KT_QUALITY_FAMILIES:+-${KT_QUALITY_FAMILIES// /-}}
  qfast=/tmp/kt-quality-$qtag-fast.db; qexh=/tmp/kt-quality-$qtag-exhaustive.db; qcache=/tmp/kt-quality-cache
  [ "${KT_QUALITY_RESUME:-0}" = 1 ] || rm -rf "$qfast"* "$qexh"* "$qcache"
  # KT_QUALITY_STATE=dir: the measurements of an earlier machine (the quality_state/ files a call writes under $OUT),
  # continued here: autotune skips what any GPU of the same name measured, so the sweep spans several machines.
  qstate_in() {  # qstate_in <dir/name.db> <db>: name.db.xz, its parts name.db.xz.part0.. or name.db.gz
    local xz=$1.xz gz=$1.gz
    [ -f "$xz" ] || [ -f "$xz.part0" ] || [ -f "$gz" ] || return 0
    python3 bench/quality_state.py unpack "$1" "$2" > /dev/null || { rc=1; return; }
    echo "quality: continuing $(basename "$1")"
  }
  qstate_out() {  # qstate_out <db> <dir/name.db>: without its cubins, xz-compressed, in parts of 15 MiB when larger
    [ -f "$1" ] || return 0
    python3 bench/quality_state.py pack "$1" "$2" > /dev/null || rc=1
  }
  if [ -n "${KT_QUALITY_STATE:-}" ]; then
    qstate_in "$KT_QUALITY_STATE/quality_${qtag}_fast.db" "$qfast"
    qstate_in "$KT_QUALITY_STATE/quality_${qtag}_exhaustive.db" "$qexh"
  fi
  echo "== tuning quality on $qshapes: the default strategy's winners among every candidate's exhaustive times"
  q0=$(date +%s)
  qleft() {  # seconds of KT_QUALITY_BUDGET_S left (0: no budget), at least 1
    [ "${KT_QUALITY_BUDGET_S:-0}" = 0 ] && { echo 0; return; }
    local l=$(( ${KT_QUALITY_BUDGET_S} - ($(date +%s) - q0) )); [ "$l" -lt 1 ] && l=1; echo "$l"
  }
  qbase=("$BIN/autotune" --arch sm_90 --shapes "$qshapes" --grid listed --cache-dir "$qcache")
  [ -n "${KT_QUALITY_FAMILIES:-}" ] && qbase+=(--families $KT_QUALITY_FAMILIES)
  [ -n "${KT_QUALITY_DEVICES:-}" ] && qbase+=(--devices "$KT_QUALITY_DEVICES")
  "${qbase[@]}" --db "$qfast" --time-budget "$(qleft)" > "$OUT/quality_${qtag}_fast.log" 2>&1 || rc=1
  grep "^autotune: \(measured\|compiled\|--time-budget\)" "$OUT/quality_${qtag}_fast.log" | cut -c1-200
  if grep -q "time-budget .* spent" "$OUT/quality_${qtag}_fast.log"; then
    echo "quality: the default run is not finished; run again with KT_QUALITY_RESUME=1 while the machine is warm"
  else
    "${qbase[@]}" --db "$qexh" --strategy exhaustive --budget-ms "${KT_QUALITY_BUDGET_MS:-10}" \
      --time-budget "$(qleft)" > "$OUT/quality_${qtag}_exhaustive.log" 2>&1 || rc=1
    grep "^autotune: \(measured\|compiled\|--time-budget\)" "$OUT/quality_${qtag}_exhaustive.log" | cut -c1-200
    if grep -q "time-budget .* spent" "$OUT/quality_${qtag}_exhaustive.log"; then
      echo "quality: the exhaustive run is not finished; run again with KT_QUALITY_RESUME=1 while the machine is warm"
    else
      python3 bench/tune_quality.py --fast "$qfast" --exhaustive "$qexh" --json "$OUT/quality_$qtag.json" \
        > "$OUT/quality_$qtag.txt" 2>&1
      echo "quality: exit $? (1: a problem over 1.03x or missing); table in $OUT/quality_$qtag.txt"
      tail -n 3 "$OUT/quality_$qtag.txt"
      # The candidate order alone against the same measurements (bench/order_quality.py), appended to that table.
      { echo; echo "== the candidate order (autotune --list-candidates) against the exhaustive measurements"
        "${qbase[@]}" --list-candidates 2>/dev/null > /tmp/kt-quality-order.tsv &&
          python3 bench/order_quality.py --candidates /tmp/kt-quality-order.tsv --exhaustive "$qexh"; } \
        >> "$OUT/quality_$qtag.txt" 2>&1
      tail -n 1 "$OUT/quality_$qtag.txt"
      # The problems over 1.03x, their two winners timed again side by side in one process on GPU 0
      # (bench/rematch.py), appended too: the exhaustive pass times each candidate once, at a short budget.
      rm -f /tmp/kt-quality-$qtag-rematch.db*
      { echo; echo "== the problems over 1.03x, rematched head to head (bench/rematch.py)"
        KERNTUNE_CACHE_DIR=$qcache python3 bench/rematch.py --quality "$OUT/quality_$qtag.json" --shapes "$qshapes" \
          --autotune "$BIN/autotune" --db /tmp/kt-quality-$qtag-rematch.db --json "$OUT/quality_${qtag}_rematch.json"; } \
        >> "$OUT/quality_$qtag.txt" 2>&1
      tail -n 1 "$OUT/quality_$qtag.txt"
    fi
  fi
  qstate_out "$qfast" "$OUT/quality_state/quality_${qtag}_fast.db"
  qstate_out "$qexh" "$OUT/quality_state/quality_${qtag}_exhaustive.db"
fi
if want devices && [[ " ${what[*]} " == *" devices "* ]]; then
  ngpu=$(nvidia-smi -L | grep -c "^GPU")
  dshapes=${KT_DEVICES_SHAPES:-bench/shapes_devices_qwen7b_bf16.json}
  dfam=${KT_DEVICES_FAMILIES:-attention_prefill qkv_proj attention_decode}
  dcache=/tmp/kt-devices-cache; done1=/tmp/kt-devices-one.db; doneall=/tmp/kt-devices-all.db
  rm -rf "$dcache" "$done1"* "$doneall"*
  echo "== one GPU against all $ngpu GPUs: $dshapes, families $dfam"
  [ "$ngpu" -ge 2 ] || { echo "devices: needs 2 or more GPUs, found $ngpu"; rc=1; }
  dbase=("$BIN/autotune" --arch sm_90 --shapes "$dshapes" --grid listed --cache-dir "$dcache" \
         --families $dfam)
  # The binaries first, so that both runs time measuring alone (the fast strategy's 16 candidates per problem).
  "${dbase[@]}" --compile-only --max-candidates 16 > "$OUT/devices_compile.log" 2>&1 || rc=1
  tail -n 1 "$OUT/devices_compile.log" | cut -c1-200
  drun() {  # drun <db> <devices> <log>: one tune; prints "<candidates> <seconds>"
    local t0 t1
    t0=$(date +%s.%N)
    "${dbase[@]}" --db "$1" --devices "$2" > "$3" 2>&1 || rc=1
    t1=$(date +%s.%N)
    echo "$(grep -o "^autotune: [0-9]* candidates to measure" "$3" | grep -o "[0-9]*" | head -1) $(python3 -c "print($t1-$t0)")"
  }
  read -r n1 s1 < <(drun "$done1" 0 "$OUT/devices_one.log")
  read -r na sa < <(drun "$doneall" all "$OUT/devices_all.log")
  for l in "$OUT/devices_one.log" "$OUT/devices_all.log"; do
    grep "worker process" "$l" | cut -c1-160 || { echo "devices: $l: the tune did not finish"; rc=1; }
  done
  python3 -c "
r1, ra = $n1 / $s1, $na / $sa
print(f'devices: one GPU {$n1} candidates in {$s1:.1f} s ({r1:.1f}/s); all GPUs {$na} in {$sa:.1f} s ({ra:.1f}/s): {ra / r1:.2f}x')" \
    | tee "$OUT/devices.txt"
  python3 bench/tune_quality.py --fast "$doneall" --exhaustive "$done1" --json "$OUT/devices_winners.json" \
    > "$OUT/devices_winners.txt" 2>&1
  echo "devices: the all-GPU winners among the one-GPU measurements (exit $?; 1: one over 1.03x or missing):"
  tail -n 3 "$OUT/devices_winners.txt" | tee -a "$OUT/devices.txt"
fi
if want tune && [ -f "$OUT/qwen7b-h100.db" ]; then
  echo "== example: runtime launch from the tuned database"
  "$BIN/example_attention_prefill" "$OUT/qwen7b-h100.db" 2>&1 | tee "$OUT/example.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
if want qkv; then
  echo "== autotune qkv_proj (qwen7b, every format) + anchors (cuBLAS, tinygemm)"
  "$BIN/autotune" --arch sm_90 --shapes shapes/qwen7b.json --db "$OUT/qkv-h100.db" --families qkv_proj \
     --budget-ms "${KT_QKV_BUDGET_MS:-20}" --max-candidates "${KT_QKV_MAX_CANDIDATES:-32}" --json "$OUT/qkv_tune.json" 2>&1 \
     | grep -v "^compiled\|^measured" | tee "$OUT/qkv_tune.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  PYTHONUNBUFFERED=1 python3 bench/qkv_anchors.py --shapes shapes/qwen7b.json --out "$OUT/qkv_anchors.json" 2>&1 | tee "$OUT/qkv_anchors.log"
  python3 bench/qkv_report.py --tune "$OUT/qkv_tune.json" --anchors "$OUT/qkv_anchors.json" --out "$OUT/qkv_report.json" | tee "$OUT/qkv_report.txt"
fi
if want anchors; then
  echo "== anchors: torch SDPA flash / cuDNN"
  PYTHONUNBUFFERED=1 python3 bench/attention_anchors.py --shapes shapes/qwen7b.json --out "$OUT/anchors.json" 2>&1 | tee "$OUT/anchors.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
if [ -f "$OUT/tune.json" ] && [ -f "$OUT/anchors.json" ]; then
  python3 bench/attention_report.py --tune "$OUT/tune.json" --anchors "$OUT/anchors.json" --out "$OUT/report.json" | tee "$OUT/report.txt"
fi
export KERNTUNE_LIB="$PWD/$BIN/libkerntune.so"
if want python; then
  echo "== python package tests (torch reference; the torch custom operators under torch.compile and CUDA graphs)"
  PYTHONUNBUFFERED=1 python3 -m pytest -q -x python/tests/test_kerntune_gpu.py python/tests/test_torch_ops_gpu.py \
    python/tests/test_hf_gpu.py 2>&1 \
    | tail -n 30 | tee "$OUT/python_tests.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
if want quicktune; then
  echo "== quick tune of shapes/qwen7b.json (every family, few candidates)"
  "$BIN/autotune" --arch sm_90 --shapes shapes/qwen7b.json --db "$OUT/quick.db" --budget-ms "${KT_QUICK_BUDGET_MS:-5}" \
     --max-candidates "${KT_QUICK_CANDIDATES:-6}" --json "$OUT/quick_tune.json" 2>&1 | grep -v "^compiled\|^measured" | tail -n 100 \
     | tee "$OUT/quick_tune.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
if [[ " ${what[*]} " == *" gemv "* ]]; then
  echo "== qkv_proj gemv [gpu] tests"
  "$BIN/kerntune_tests" "qkv_proj gemv: every valid variant*,qkv_proj K-blocked packed weights*,qkv_proj gemv balanced tail*,qkv_proj gemv: units whose scale*" \
     -r compact 2>&1 | tail -n 40 | tee "$OUT/gemv_tests.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
if [[ " ${what[*]} " == *" stress "* ]]; then
  echo "== qkv_proj gemv stress (every variant relaunched, each launch checked)"
  KT_STRESS_FORMAT=${KT_STRESS_FORMAT:-int8,int4,nf4,mxfp4,nvfp4,int4_kb128,nvfp4_kb128} KT_STRESS_DTYPE=${KT_STRESS_DTYPE:-fp16,bf16} \
  KT_STRESS_M=${KT_STRESS_M:-1,16} KT_STRESS_REPS=${KT_STRESS_REPS:-20} KT_STRESS_SPLIT=${KT_STRESS_SPLIT:-0} \
    "$BIN/kerntune_tests" "[.stress]" 2>&1 | grep -E "^stress|^  |passed|failed" | tail -n 200 | tee "$OUT/gemv_stress.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
if [[ " ${what[*]} " == *" sanitize "* ]]; then
  sdb=${KT_SANITIZE_DB:-}
  [ -z "$sdb" ] && [ -f "$OUT/qwen7b-h100.db" ] && sdb="$OUT/qwen7b-h100.db"
  [ -z "$sdb" ] && [ -f "$OUT/quick.db" ] && sdb="$OUT/quick.db"
  cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
  for tool in memcheck racecheck synccheck; do
    echo "== compute-sanitizer --tool $tool (db: ${sdb:-none}; and the runtime's database-winners tests)"
    opts=(--tool "$tool" --error-exitcode 1 --print-limit 200)
    [ "$tool" = memcheck ] && opts+=(--leak-check full)
    [ "$tool" = racecheck ] && opts+=(--racecheck-report all)
    {
      if [ -n "$sdb" ]; then
        KT_SANITIZE_DB="$sdb" "$cs" "${opts[@]}" "$BIN/kerntune_tests" "[.sanitize]" || echo "gpu_all: FAILED: $tool over $sdb"
      else
        echo "gpu_all: no database: set KT_SANITIZE_DB or run quicktune first"
      fi
      "$cs" "${opts[@]}" "$BIN/kerntune_tests" "Runtime: database winners*,Runtime::qkv_proj: database winners*,Runtime::attention_decode*" \
        || echo "gpu_all: FAILED: $tool over the runtime's database-winners tests"
    } > "$OUT/sanitize_$tool.log" 2>&1
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|FAILED|passed|failed" "$OUT/sanitize_$tool.log" | tail -n 20
    grep -q "gpu_all: FAILED\|gpu_all: no database" "$OUT/sanitize_$tool.log" && rc=1
  done
fi
db=${KT_BENCH_DB:-}
[ -z "$db" ] && [ -f "$OUT/qwen7b-h100.db" ] && db="$OUT/qwen7b-h100.db"
[ -z "$db" ] && [ -f "$OUT/quick.db" ] && db="$OUT/quick.db"
if want bench; then
  echo "== bench/bench_all.py (db: ${db:-none})"
  PYTHONUNBUFFERED=1 python3 bench/bench_all.py --db "$db" --out "$OUT/bench.json" --plots-dir "$OUT" ${KT_BENCH_ARGS:-} 2>&1 \
     | tee "$OUT/bench.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
if want example; then
  echo "== examples/qwen7b_layer (db: ${db:-none})"
  PYTHONUNBUFFERED=1 python3 examples/qwen7b_layer/qwen7b_layer.py --db "$db" ${KT_EXAMPLE_ARGS:-} 2>&1 | tee "$OUT/example_layer.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
exit $rc

#!/bin/bash
# A diagnostic (session 27, NOTES qkv_proj 36; results: bench/results/h100_qkv_gemv_ncu_scale_stall.txt): Nsight Compute's
# per-instruction warp-stall samples of one gemv variant, launched by the runtime (bench/lone_launch_probe.py) from a
# database holding only the tuner's measurements of that variant (and the default), so the runtime picks it. Run on the
# GPU machine from the repository root: OUT=/tmp/out bash bench/experiments/ncu_gemv_source.sh
# The autotune binaries run candidates in a worker process that ncu did not profile (even with --target-processes all),
# hence the runtime. "base" uses build-gpu/base/{autotune,libkerntune.so} (an older build, copied there by hand).
# The -k regex selects qkv_gemv<.., TileM 8, TileN 16, WarpsK 8, WarpsN 1, Prefetch 1, Stages 0, Balance false>.
export KERNTUNE_CACHE_DIR=/tmp/ktc; mkdir -p /tmp/kt
NCU=/usr/local/cuda/bin/ncu
for fb in nf4_kb128:base mxfp4_kb128:base mxfp4_kb128:new; do
  f=${fb%%:*}; b=${fb##*:}
  cat > /tmp/kt/$f.json <<J
{"model": "p", "hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4, "head_dim": 128, "qkv_bias": true, "rope_theta": 1000000.0, "dtypes": ["bf16"], "workloads": {"qkv_proj": {"tokens": [1], "formats": ["$f"]}}}
J
  bin=build-gpu/autotune; lib=build-gpu/libkerntune.so; [ $b = base ] && { bin=build-gpu/base/autotune; lib=build-gpu/base/libkerntune.so; }
  db=/tmp/kt/l_${f}_${b}.db; rm -f $db
  $bin --arch sm_90 --shapes /tmp/kt/$f.json --db $db --only 'gemv_m8_n16_wk8_wn1_register_ring_p1_nored__' --max-candidates 0 --budget-ms 5 2>&1 | grep "kb128/m1" 
  KERNTUNE_LIB=$PWD/$lib timeout 150 $NCU --clock-control none --kernel-name-base mangled -k regex:'qkv_gemv.*Li8ELi16ELi8ELi1ELi1ELi0ELb0E' \
    --launch-skip 10 --launch-count 1 --section SourceCounters --section WarpStateStats --metrics gpu__time_duration.sum,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio \
    --print-details all python3 bench/lone_launch_probe.py --db $db --formats $f --dtype bf16 --m 1 --reps 20 --skip-host --kerntune-only > $OUT/ncu_${f}_$b.txt 2>&1
  echo "$f $b rc $?"; grep -E "gpu__time_duration|long_scoreboard|No kernels" $OUT/ncu_${f}_$b.txt | head -3
  KERNTUNE_LIB=$PWD/$lib timeout 150 $NCU --clock-control none --kernel-name-base mangled -k regex:'qkv_gemv.*Li8ELi16ELi8ELi1ELi1ELi0ELb0E' \
    --launch-skip 10 --launch-count 1 --section SourceCounters --page source --print-source sass \
    python3 bench/lone_launch_probe.py --db $db --formats $f --dtype bf16 --m 1 --reps 20 --skip-host --kerntune-only > $OUT/ncu_src_${f}_$b.txt 2>&1
  echo "src rc $? $(wc -l < $OUT/ncu_src_${f}_$b.txt)"
done

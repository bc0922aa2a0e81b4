#!/usr/bin/env python3
"""Do the tuner's timing and the anchors' do_bench method rank the M = 1 decode candidates alike? (A diagnostic.)

    python3 bench/rank_probe.py --db tuned.db --formats int4_kb128,mxfp4_kb128 [--dtype bf16] [--m 1] [--top 6]
        [--glob '*_s0_*' --glob '*_s2_*'] [--out r.json]

For each format's Qwen2.5-7B qkv_proj problem of M tokens in the database (family qkv_proj, key
qkv_proj/<dtype>/<format>/m<M>/...), takes the `top` fastest 'ok' measurements (with --glob: the `top` fastest of
each group of variant names matching that SQLite GLOB pattern) (the tuner's own timing: back-to-back
batches over rotated weight copies), and for each writes a copy of the database whose only measurement of that
problem is that candidate (so the runtime's winners view picks it), then runs bench/lone_launch_probe.py on it
(--skip-host --kerntune-only: the anchors are not timed again per candidate): one launch after a dirty 256 MB flush
(do_bench-style, the method of ../shared/ANCHORS.md), clean and no flush, and the graph column. Prints tuner us /
do_bench-style us / graph us per candidate, in the tuner's order.
"""
import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--formats", required=True)
    ap.add_argument("--dtype", default="bf16", choices=("fp16", "bf16"))
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("--m", type=int, default=1, help="tokens (the problem's M)")
    ap.add_argument("--glob", action="append", help="rank only variant names matching this GLOB (repeatable: groups)")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kt_rank_")
    results = []
    for fmt in a.formats.split(","):
        prefix = f"qkv_proj/{a.dtype}/{fmt}/m{a.m}/"
        con = sqlite3.connect(a.db)
        rows = []
        for pattern in a.glob or ["*"]:
            rows += con.execute("SELECT problem_key, variant_name, MIN(median_us) FROM measurements WHERE family = "
                                "'qkv_proj' AND status = 'ok' AND problem_key LIKE ? AND variant_name GLOB ? GROUP BY "
                                "problem_key, variant_name ORDER BY MIN(median_us) LIMIT ?",
                                (prefix + "%", pattern, a.top)).fetchall()
        con.close()
        if not rows:
            sys.exit(f"error: {a.db}: no ok measurement of {prefix}*")
        for rank, (key, variant, tuner_us) in enumerate(rows):
            db = os.path.join(tmp, f"{fmt}_{rank}.db")
            shutil.copyfile(a.db, db)
            c = sqlite3.connect(db)
            c.execute("DELETE FROM measurements WHERE family = 'qkv_proj' AND problem_key = ? AND variant_name != ?",
                      (key, variant))
            c.commit()
            c.close()
            out = os.path.join(tmp, f"{fmt}_{rank}.json")
            subprocess.run([sys.executable, os.path.join(HERE, "lone_launch_probe.py"), "--db", db, "--formats", fmt,
                            "--dtype", a.dtype, "--m", str(a.m), "--skip-host", "--kerntune-only", "--reps", str(a.reps), "--out", out],
                           check=True, stdout=subprocess.DEVNULL)
            kt_row = [r for r in json.load(open(out))["rows"] if r["name"].startswith("kerntune")][0]
            r = dict(format=fmt, rank=rank, variant=variant, tuner_us=tuner_us, dirty_us=kt_row["dirty"],
                     clean_us=kt_row["clean"], none_us=kt_row["none"], graph_us=kt_row.get("graph"))
            results.append(r)
            short = variant.split("__")[2] if variant.count("__") >= 2 else variant
            print(f"{fmt:12} #{rank} {short:34} tuner {tuner_us:6.2f}  do_bench {r['dirty_us']:6.1f}  "
                  f"clean {r['clean_us']:6.1f}  graph {r['graph_us']:6.2f} us", flush=True)
            os.remove(db)
    shutil.rmtree(tmp, ignore_errors=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(db=a.db, dtype=a.dtype, m=a.m, reps=a.reps, rows=results), f, indent=1)


if __name__ == "__main__":
    main()

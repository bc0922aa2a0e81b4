#!/usr/bin/env python3
"""Head-to-head rematch of tune_quality.py's misses: for each problem whose default-strategy winner was over the
threshold in the exhaustive database, time that winner and the exhaustive winner again in one autotune process, on one
GPU, in the fast strategy's final round (both at the full budget, in four passes: A B, A B, B A, B A;
tuner/strategy.h final_pass_orders).

Usage: bench/rematch.py --quality Q.json --shapes SHAPES --autotune BIN --db REMATCH.db [--arch sm_90]
                        [--threshold 1.03] [--budget-ms 100] [--json OUT.json]

Q.json is bench/tune_quality.py's --json output. In the exhaustive database the two times of a problem come from one
pass over hundreds of candidates, measured seconds or minutes apart, and from different GPUs or calls when the sweep
was spread over them; the rematch measures the two side by side, so it tells a winner that is really slower from
one that drew a slower moment. Each problem runs

    BIN --arch ARCH --shapes SHAPES --grid listed --problems '^KEY$' --only '^(FAST|EXH)$' --max-candidates 0
        --budget-ms N --retune --db REMATCH.db

(the default config always joins as a third finalist: autotune --only keeps it), then reads the newest 'ok' row that run
added for each of the two variants from REMATCH.db (rows of earlier runs in the same file never count):
ratio = fast winner's median / exhaustive winner's median.

Prints one line per problem and a summary; --json writes {"problems": [...], "summary": {...}}. Exit status: 0 when
every rematched ratio is <= --threshold (or nothing was over it), 1 when one is above it or could not be measured,
2 for bad input (an unreadable Q.json, a missing autotune).
"""
import argparse
import json
import os
import re
import sqlite3
import subprocess
import sys


def misses(quality, threshold):
    """The problems of tune_quality's JSON whose ratio is above threshold, with both winners' names."""
    out = []
    for p in quality.get("problems", []):
        if p.get("status") == "ok" and p["ratio"] > threshold:
            out.append({"problem": p["problem"], "family": p["family"], "fast_winner": p["fast_winner"],
                        "exh_winner": p["exh_winner"], "ratio_in_exhaustive": p["ratio"]})
    return out


def command(args, miss):
    """autotune's command line for one rematch (regexes anchored and escaped: names are matched exactly)."""
    names = "|".join(re.escape(n) for n in (miss["fast_winner"], miss["exh_winner"]))
    return [args.autotune, "--arch", args.arch, "--shapes", args.shapes, "--grid", "listed",
            "--problems", "^" + re.escape(miss["problem"]) + "$", "--only", "^(" + names + ")$",
            "--max-candidates", "0", "--budget-ms", str(args.budget_ms), "--retune", "--db", args.db]


def last_id(path):
    """The largest measurement id in the database at path (0 when it does not exist yet)."""
    if not os.path.isfile(path):
        return 0
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT COALESCE(MAX(id), 0) FROM measurements").fetchone()[0]
    finally:
        con.close()


def newest_ok(con, family, key, variant, after):
    """The newest 'ok' row of the variant with an id above `after` (this rematch's, not an earlier run's)."""
    row = con.execute(
        "SELECT median_us, sm_clock_mhz FROM measurements WHERE family = ? AND problem_key = ? AND variant_name = ? "
        "AND status = 'ok' AND id > ? ORDER BY id DESC LIMIT 1", (family, key, variant, after)).fetchone()
    return row if row else (None, None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quality", required=True, help="bench/tune_quality.py's --json output")
    ap.add_argument("--shapes", required=True, help="the shapes file both databases were tuned from")
    ap.add_argument("--autotune", required=True, help="the autotune binary")
    ap.add_argument("--db", required=True, help="the rematch's tuning database (created if missing)")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--threshold", type=float, default=1.03)
    ap.add_argument("--budget-ms", type=float, default=100)
    ap.add_argument("--json")
    args = ap.parse_args()
    try:
        with open(args.quality) as f:
            quality = json.load(f)
        todo = misses(quality, args.threshold)
    except (OSError, ValueError, KeyError) as e:
        print(f"rematch: {args.quality}: {e}", file=sys.stderr)
        return 2
    if not os.access(args.autotune, os.X_OK):
        print(f"rematch: --autotune {args.autotune}: not an executable file", file=sys.stderr)
        return 2
    results = []
    for m in todo:
        cmd = command(args, m)
        before = last_id(args.db)
        run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        con = sqlite3.connect(f"file:{args.db}?mode=ro", uri=True) if os.path.isfile(args.db) else None
        fast_us, fast_mhz = newest_ok(con, m["family"], m["problem"], m["fast_winner"], before) if con else (None, None)
        exh_us, exh_mhz = newest_ok(con, m["family"], m["problem"], m["exh_winner"], before) if con else (None, None)
        if con:
            con.close()
        r = dict(m, exit=run.returncode, fast_us=fast_us, exh_us=exh_us, fast_mhz=fast_mhz, exh_mhz=exh_mhz)
        if fast_us is None or exh_us is None:
            r["status"] = "not measured"
            r["log_tail"] = run.stdout[-2000:]
        else:
            r["status"] = "ok"
            r["ratio"] = fast_us / exh_us
        results.append(r)
    print(f"{'in exh':>7} {'rematch':>8} {'fast us':>9} {'exh us':>9}  problem  (fast winner / exhaustive winner)")
    for r in results:
        ratio = f"{r['ratio']:8.3f}" if r["status"] == "ok" else f"{'-':>8}"
        times = f"{r['fast_us']:9.2f} {r['exh_us']:9.2f}" if r["status"] == "ok" else f"{'-':>9} {'-':>9}"
        short = lambda n: n.split("__")[2] if n.count("__") >= 3 else n
        flag = "" if r["status"] == "ok" and r["ratio"] <= args.threshold else "  <-- over" if r["status"] == "ok" \
            else f"  <-- {r['status']} (autotune exit {r['exit']})"
        print(f"{r['ratio_in_exhaustive']:7.3f} {ratio} {times}  {r['problem']}  "
              f"({short(r['fast_winner'])} / {short(r['exh_winner'])}){flag}")
    bad = [r for r in results if r["status"] != "ok" or r["ratio"] > args.threshold]
    print(f"\nrematch: {len(todo)} problem(s) over {args.threshold:.2f}x in the exhaustive database; head to head "
          f"{len(todo) - len(bad)} of them within {args.threshold:.2f}x, {len(bad)} not")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"problems": results, "summary": {"over_in_exhaustive": len(todo), "still_over": len(bad),
                                                        "threshold": args.threshold}}, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

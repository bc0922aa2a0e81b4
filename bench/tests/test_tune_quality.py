#!/usr/bin/env python3
"""Tests of bench/tune_quality.py, plain python3 (no pytest, no third-party packages):

    python3 bench/tests/test_tune_quality.py        # exit status 0 = all passed, 1 = a failure

Builds a fast and an exhaustive tuning database in a temp folder with the schema cache/tuning_db.cpp creates (its
initial migration script, read from the source), runs tune_quality.py as a subprocess and checks: the ratio is the fast
winner's time in the exhaustive database over that database's best (not the fast database's own time); a ratio above
--threshold, and a fast winner the exhaustive database never measured, give exit status 1 and are named; a higher
threshold accepts the first; the JSON summary counts them; problems only in the exhaustive database are listed; each
compared row shows both measurements' SM clocks, and a ratio over the threshold that the clock ratio covers is marked
and counted as the clock's; tuning times are the runs' summed durations; a non-database file, a database without
measurements and a fast database without winners give exit status 2.
"""
import json
import os
import sqlite3
import subprocess
import sys
import tempfile

from tuning_db_fixture import REPO, check, failures, schema

SCRIPT = os.path.join(REPO, "bench", "tune_quality.py")


def make_db(path, runs, rows):
    """rows: (problem_key, variant_name, median_us[, status[, sm_clock_mhz (default 1980)]]); one device, family
    attention_decode."""
    con = sqlite3.connect(path)
    con.executescript(schema())
    con.execute("INSERT INTO devices VALUES (1, 'NVIDIA H200', 'GPU-1', 9, 0, 132, 62914560, 580, 1980000, 3201000)")
    for i, (start, end) in enumerate(runs, 1):
        con.execute("INSERT INTO runs VALUES (?, 'autotune', 's.json', 'h', '0.1.0', 'host', ?, ?)", (i, start, end))
    for key, name, us, *rest in rows:
        con.execute(
            "INSERT INTO measurements (run_id, device_id, family, problem_key, problem_json, variant_name, config_json,"
            " binary_hash, status, median_us, p20_us, p80_us, samples_json, error, sm_clock_mhz, rel_err, metric,"
            " measured_at) VALUES (1, 1, 'attention_decode', ?, '{}', ?, ?, NULL, ?, ?, ?, ?, '[]', '', ?, 0, 0, 0)",
            (key, name, json.dumps({"v": name}), rest[0] if rest else "ok", us, us, us,
             rest[1] if len(rest) > 1 else 1980))
    con.commit()
    con.close()


def run(*args):
    p = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


with tempfile.TemporaryDirectory() as d:
    fast, exh, js = os.path.join(d, "fast.db"), os.path.join(d, "exh.db"), os.path.join(d, "q.json")
    make_db(fast, [(100, 160), (200, 230)], [
        ("p1", "A", 10.0), ("p1", "B", 11.0),  # fast winner A
        ("p2", "B", 5.0), ("p2", "A", 6.0),    # fast winner B
        ("p3", "D", 7.0),                      # fast winner D, never measured exhaustively
    ])
    make_db(exh, [(1000, 1900)], [
        ("p1", "A", 10.2), ("p1", "B", 10.0), ("p1", "C", 9.9), ("p1", "E", 1.0, "wrong_result"),
        ("p2", "B", 5.0), ("p2", "A", 5.5),
        ("p3", "A", 7.0),
        ("p4", "A", 3.0),
    ])
    rc, out, err = run("--fast", fast, "--exhaustive", exh, "--json", js)
    check(rc == 1, f"a ratio over 1.03 and a missing winner exit 1 (got {rc}: {err})")
    line1 = [l for l in out.splitlines() if " p1 " in l]
    check(len(line1) == 1 and line1[0].lstrip().startswith("1.030") and "over" in line1[0],
          f"p1: 10.2 / 9.9 = 1.030 (from the exhaustive database, not 10.0 / 9.9), flagged over: {line1}")
    check("(A / C)" in line1[0] if line1 else False, "p1 names the fast winner and the exhaustive best")
    line2 = [l for l in out.splitlines() if " p2 " in l]
    check(len(line2) == 1 and line2[0].lstrip().startswith("1.000"), f"p2: the same winner gives 1.000: {line2}")
    check(any(" p3 " in l and "not in the exhaustive database" in l for l in out.splitlines()), "p3 is missing")
    check(any(" p4 " in l and "no winner in the fast database" in l for l in out.splitlines()), "p4 only in exh")
    check("fast 90 s over 2 run(s), exhaustive 900 s over 1 run(s)" in out, f"tuning times summed: {out}")
    q = json.load(open(js))
    s = q["summary"]
    check((s["problems"], s["compared"], s["within"], s["over"], s["missing"], s["only_in_exhaustive"]) ==
          (3, 2, 1, 1, 1, 1), f"summary counts: {s}")
    check(abs(s["worst_ratio"] - 10.2 / 9.9) < 1e-9, "worst ratio")
    check(s["over_by_clock"] == 0, f"same clocks: no ratio explained by the clock: {s}")
    check(line1 and "1980/1980" in line1[0] and "(clock)" not in line1[0], f"p1 clocks shown: {line1}")
    r1 = [r for r in q["problems"] if r["problem"] == "p1"][0]
    check(r1["fast_us_in_fast_db"] == 10.0 and r1["fast_us_in_exh"] == 10.2 and r1["exh_best_us"] == 9.9,
          f"p1 row times: {r1}")
    # p1's best measured at a 6% higher SM clock than the fast winner's row: its 3% is counted as the clock's.
    exh_clk = os.path.join(d, "exh_clk.db")
    make_db(exh_clk, [(0, 10)], [("p1", "A", 10.2, "ok", 1980), ("p1", "C", 9.9, "ok", 2100), ("p2", "B", 5.0)])
    rc, out, _ = run("--fast", fast, "--exhaustive", exh_clk, "--json", js)
    q2 = json.load(open(js))
    check(q2["summary"]["over"] == 1 and q2["summary"]["over_by_clock"] == 1, f"over by clock: {q2['summary']}")
    check(any(" p1 " in l and "1980/2100" in l and "(clock)" in l for l in out.splitlines()), f"p1 marked: {out}")
    check("1 of them by the SM clock alone" in out, f"summary line names the clock: {out[-300:]}")
    # A looser threshold accepts p1; p3 stays missing.
    rc, out, _ = run("--fast", fast, "--exhaustive", exh, "--threshold", "1.05")
    check(rc == 1 and "2 of 3 problems within 1.05x" in out, f"threshold 1.05: {rc} {out[-300:]}")
    # Without the missing problem: exit 0.
    fast2 = os.path.join(d, "fast2.db")
    make_db(fast2, [(0, 10)], [("p1", "A", 10.0), ("p2", "B", 5.0)])
    rc, out, _ = run("--fast", fast2, "--exhaustive", exh, "--threshold", "1.05")
    check(rc == 0, f"every problem within the threshold exits 0: {rc}")
    # Bad input: exit 2 with a message naming the file or the problem.
    junk = os.path.join(d, "junk.db")
    open(junk, "w").write("not sqlite")
    rc, _, err = run("--fast", junk, "--exhaustive", exh)
    check(rc == 2 and "tune_quality:" in err, f"a file that is not a database: {rc} {err}")
    empty = os.path.join(d, "empty.db")
    sqlite3.connect(empty).execute("CREATE TABLE t(x)").connection.commit()
    rc, _, err = run("--fast", fast, "--exhaustive", empty)
    check(rc == 2 and "not a kerntune tuning database" in err, f"a database without the schema: {rc} {err}")
    nowin = os.path.join(d, "nowin.db")
    make_db(nowin, [(0, 0)], [("p1", "A", 1.0, "timeout")])
    rc, _, err = run("--fast", nowin, "--exhaustive", exh)
    check(rc == 2 and "no winners" in err, f"a fast database without winners: {rc} {err}")
    rc, _, err = run("--fast", fast, "--exhaustive", os.path.join(d, "nope.db"))
    check(rc == 2 and "no such file" in err, f"a missing file: {rc} {err}")
    rc, _, err = run("--fast", fast, "--exhaustive", exh, "--threshold", "0.9")
    check(rc == 2 and "--threshold" in err, f"a threshold below 1: {rc} {err}")

print("test_tune_quality:", "FAILED" if failures else "all passed")
sys.exit(1 if failures else 0)

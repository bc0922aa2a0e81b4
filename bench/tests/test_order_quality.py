#!/usr/bin/env python3
"""Tests of bench/order_quality.py, plain python3 (no pytest, no third-party packages):

    python3 bench/tests/test_order_quality.py        # exit status 0 = all passed, 1 = a failure

Builds an exhaustive tuning database in a temp folder with the schema cache/tuning_db.cpp creates (its initial
migration script, read from the source) and a candidate list in autotune --list-candidates' form, runs
order_quality.py as a subprocess and checks: the prefix ratio is the best of the first --first candidates over the
exhaustive best; the refined ratio adds only the depth siblings (configs that differ in the "stages" leaf alone) of
the prefix's leaders (its fastest, and the next fastest only when within 5% of it); the winner's rank and the first rank within the threshold; a problem the database lacks is
missing; exit status 1 when a refined ratio is over the threshold, 0 when none is; the JSON summary; exit status 2 for
a malformed list, a file that is not a database, no problem in common and a threshold below 1.
"""
import json
import os
import sqlite3
import subprocess
import sys
import tempfile

from tuning_db_fixture import REPO, check, failures, schema

SCRIPT = os.path.join(REPO, "bench", "order_quality.py")


def make_db(path, rows):
    """rows: (problem_key, variant_name, config, median_us[, status]); one device, family qkv_proj."""
    con = sqlite3.connect(path)
    con.executescript(schema())
    con.execute("INSERT INTO devices VALUES (1, 'NVIDIA H200', 'GPU-1', 9, 0, 132, 62914560, 580, 1980000, 3201000)")
    con.execute("INSERT INTO runs VALUES (1, 'autotune', 's.json', 'h', '0.1.0', 'host', 0, 10)")
    for key, name, config, us, *rest in rows:
        con.execute(
            "INSERT INTO measurements (run_id, device_id, family, problem_key, problem_json, variant_name, config_json,"
            " binary_hash, status, median_us, p20_us, p80_us, samples_json, error, sm_clock_mhz, rel_err, metric,"
            " measured_at) VALUES (1, 1, 'qkv_proj', ?, '{}', ?, ?, NULL, ?, ?, ?, ?, '[]', '', 1980, 0, 0, 0)",
            (key, name, json.dumps(config), rest[0] if rest else "ok", us, us, us))
    con.commit()
    con.close()


def ws(tile_n, stages):
    return {"tile_m": 128, "tile_n": tile_n, "wgmma_ws": {"stages": stages, "split_k": 1}}


def run(*args):
    p = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


with tempfile.TemporaryDirectory() as d:
    exh, lst, js = os.path.join(d, "exh.db"), os.path.join(d, "order.tsv"), os.path.join(d, "o.json")
    with open(lst, "w") as f:
        for key, names in (("p1", "ABCDE"), ("p2", "AB"), ("p3", "A")):
            for r, n in enumerate(names):
                f.write(f"qkv_proj\t{key}\t{r}\t{n}\n")
    make_db(exh, [
        # p1: B leads the first two; C is B's depth sibling, D another tile, E a failure that would be fastest.
        ("p1", "A", ws(128, 4), 10.0), ("p1", "B", ws(256, 4), 9.0), ("p1", "C", ws(256, 6), 8.0),
        ("p1", "D", ws(96, 4), 7.5), ("p1", "E", ws(96, 6), 1.0, "wrong_result"),
        ("p2", "A", ws(128, 4), 5.0), ("p2", "B", ws(256, 4), 5.1),
    ])
    rc, out, err = run("--candidates", lst, "--exhaustive", exh, "--first", "2", "--json", js)
    check(rc == 1, f"p1's refined ratio over 1.03 exits 1 (got {rc}: {err})")
    q = json.load(open(js))
    r1 = [r for r in q["problems"] if r["problem"] == "p1"][0]
    check(abs(r1["prefix_ratio"] - 9.0 / 7.5) < 1e-9 and r1["prefix_best"] == "B", f"p1 prefix: {r1}")
    check(abs(r1["refined_ratio"] - 8.0 / 7.5) < 1e-9 and r1["refined_best"] == "C",
          f"p1 refined: B's depth sibling C, not D (another tile): {r1}")
    check(r1["best"] == "D" and r1["best_rank"] == 3 and r1["first_within"] == 3,
          f"p1: the winner D (E failed) at rank 3: {r1}")
    r2 = [r for r in q["problems"] if r["problem"] == "p2"][0]
    check(r2["prefix_ratio"] == 1.0 and r2["best_rank"] == 0, f"p2: the default wins: {r2}")
    check(abs(r1["default_ratio"] - 10.0 / 7.5) < 1e-9 and r2["default_ratio"] == 1.0, f"default ratios: {r1} {r2}")
    gm = q["summary"]["default_geomean"]["qkv_proj"]
    check(abs(gm - (10.0 / 7.5) ** 0.5) < 1e-9, f"the defaults' geometric mean: {q['summary']}")
    check("the default config is 1.155x the exhaustive best in geometric mean over 2 problems, worst 1.333x" in out,
          f"the defaults' summary line: {out[-400:]}")
    r3 = [r for r in q["problems"] if r["problem"] == "p3"][0]
    check(r3["status"] == "missing", f"p3 is missing: {r3}")
    s = q["summary"]
    check((s["compared"], s["missing"], s["within_prefix"], s["within_refined"]) == (2, 1, 1, 1), f"summary: {s}")
    check(any(" p1 " in l and "<-- over" in l for l in out.splitlines()), f"p1 flagged: {out}")
    check("on 1, with the leaders' depth siblings on 1" in out, f"summary line: {out[-300:]}")
    # With the first four, D is in the prefix: every problem within, exit 0.
    rc, out, _ = run("--candidates", lst, "--exhaustive", exh, "--first", "4")
    check(rc == 0, f"every compared problem within exits 0: {rc} {out[-300:]}")
    # A looser threshold accepts p1's sibling (8.0 / 7.5 = 1.067).
    rc, _, _ = run("--candidates", lst, "--exhaustive", exh, "--first", "2", "--threshold", "1.07")
    check(rc == 0, f"threshold 1.07: {rc}")
    # The runner-up's siblings: in q1 B is 4% behind A, so B's sibling C (the winner) is refined; in q2 B is 6%
    # behind, so only A's sibling D is.
    exh2, lst2, js2 = os.path.join(d, "exh2.db"), os.path.join(d, "order2.tsv"), os.path.join(d, "o2.json")
    with open(lst2, "w") as f:
        for key in ("q1", "q2"):
            for r, n in enumerate("ABCD"):
                f.write(f"qkv_proj\t{key}\t{r}\t{n}\n")
    make_db(exh2, [
        ("q1", "A", ws(128, 4), 10.0), ("q1", "B", ws(256, 4), 10.4), ("q1", "C", ws(256, 6), 9.0),
        ("q1", "D", ws(128, 6), 9.5),
        ("q2", "A", ws(128, 4), 10.0), ("q2", "B", ws(256, 4), 10.6), ("q2", "C", ws(256, 6), 9.0),
        ("q2", "D", ws(128, 6), 9.8),
    ])
    rc, out, err = run("--candidates", lst2, "--exhaustive", exh2, "--first", "2", "--json", js2)
    q2 = {r["problem"]: r for r in json.load(open(js2))["problems"]}
    check(q2["q1"]["refined_best"] == "C" and q2["q1"]["refined_ratio"] == 1.0,
          f"q1: the runner-up within 5% has its sibling C refined: {q2['q1']}")
    check(q2["q2"]["refined_best"] == "D" and abs(q2["q2"]["refined_ratio"] - 9.8 / 9.0) < 1e-9,
          f"q2: the runner-up 6% behind is not refined, the leader's sibling D is: {q2['q2']}")
    check(rc == 1, f"q2 over 1.03 exits 1: {rc} {err}")
    # Bad input: exit 2 with a message naming what is wrong.
    for fname, text, args, want in (
            ("bad.tsv", "qkv_proj p1 0 A\n", None, "not a line of autotune --list-candidates"),
            ("skip.tsv", "qkv_proj\tp1\t1\tA\n", None, "out of order"),
            ("junk.db", "not sqlite", "db", "order_quality:"),
            ("other.tsv", "qkv_proj\tp9\t0\tA\n", None, "no problem of the list")):
        path = os.path.join(d, fname)
        open(path, "w").write(text)
        rc, _, err = run("--candidates", lst if args == "db" else path, "--exhaustive", path if args == "db" else exh)
        check(rc == 2 and want in err, f"{fname}: {rc} {err}")
    rc, _, err = run("--candidates", lst, "--exhaustive", exh, "--threshold", "0.9")
    check(rc == 2 and "--threshold" in err, f"a threshold below 1: {rc} {err}")

print("test_order_quality:", "FAILED" if failures else "all passed")
sys.exit(1 if failures else 0)

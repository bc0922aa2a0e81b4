#!/usr/bin/env python3
"""How good a cheaper tuning strategy's winners are: each problem's winner of a FAST database, timed in an
EXHAUSTIVE database that measured every candidate of the same problems on the same GPU class.

Usage: bench/tune_quality.py --fast FAST.db --exhaustive EXH.db [--threshold 1.03] [--json OUT.json]

For each (device, family, problem) that FAST has a winner for (the database's `winners` view, cache/tuning_db.cpp):
  fast_in_exh = the least median, in EXH, of FAST's winning (variant, config) on that problem;
  exh_best    = the least median of any candidate of that problem in EXH;
  ratio       = fast_in_exh / exh_best (1.00: FAST picked the fastest candidate; 1.05: 5% slower).
Both times come from EXH, one run on one machine, so the ratio holds no run-to-run clock or thermal drift (unlike
comparing the two databases' own times, which `autotune diff` does). Within that run the SM clock still moves (an H200
under its power limit runs at 1.4-2.0 GHz): each compared row also gives the SM clock (NVML, read after the timing; the
`sm_clock_mhz` column) of the two measurements, and a ratio above the threshold whose clock ratio (best's MHz / fast
winner's MHz) is at least as large is counted as one the clock alone could explain. A problem whose FAST winner EXH
never measured is "missing"; one EXH has and FAST does not is listed too. Each database's tuning time is the sum of its
runs' (ended_at - started_at), from the `runs` table; a run still open (ended_at 0) counts as unknown.

Prints a table and a summary; --json writes {"problems": [...], "summary": {...}}. Exit status: 0 when every FAST
problem has a ratio <= --threshold, 1 when one is above it or missing, 2 for bad input (a file that is not a kerntune
tuning database, or a FAST database without winners).
"""
import argparse
import json
import os
import sqlite3
import sys


def open_db(path):
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    missing = {"measurements", "devices", "runs", "winners"} - names
    if missing:
        raise ValueError(f"{path}: not a kerntune tuning database (no {', '.join(sorted(missing))})")
    return con


def tuning_seconds(con):
    """(seconds summed over the finished runs, number of runs, number of runs still open)."""
    runs = con.execute("SELECT started_at, ended_at FROM runs").fetchall()
    done = [e - s for s, e in runs if e > 0]
    return float(sum(done)), len(runs), len(runs) - len(done)


def compare(fast, exh):
    winners = fast.execute(
        "SELECT device_name, family, problem_key, variant_name, config_json, median_us FROM winners "
        "ORDER BY family, problem_key, device_name").fetchall()
    if not winners:
        raise ValueError("the fast database has no winners")
    best = {}
    # SQLite's bare columns beside MIN() come from the row holding the minimum: its variant and SM clock.
    for dev, fam, key, name, us, mhz in exh.execute(
            "SELECT d.name, m.family, m.problem_key, m.variant_name, MIN(m.median_us), m.sm_clock_mhz "
            "FROM measurements m JOIN devices d ON d.id = m.device_id WHERE m.status = 'ok' "
            "GROUP BY d.name, m.family, m.problem_key"):
        best[(dev, fam, key)] = (name, us, mhz)
    problems = []
    for dev, fam, key, name, cfg, fast_us in winners:
        row = {"device": dev, "family": fam, "problem": key, "fast_winner": name, "fast_winner_config": cfg,
               "fast_us_in_fast_db": fast_us}
        b = best.get((dev, fam, key))
        same, same_mhz = exh.execute(
            "SELECT MIN(m.median_us), m.sm_clock_mhz FROM measurements m JOIN devices d ON d.id = m.device_id "
            "WHERE m.status = 'ok' AND d.name = ? AND m.family = ? AND m.problem_key = ? AND m.variant_name = ? "
            "AND m.config_json = ?", (dev, fam, key, name, cfg)).fetchone()
        if b is None or same is None:
            row["status"] = "missing"
        else:
            row.update(status="ok", exh_winner=b[0], exh_best_us=b[1], fast_us_in_exh=same, ratio=same / b[1],
                       fast_mhz_in_exh=same_mhz, exh_best_mhz=b[2])
        problems.append(row)
    fast_keys = {(r["device"], r["family"], r["problem"]) for r in problems}
    only_exh = sorted(k for k in best if k not in fast_keys)
    return problems, only_exh


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", required=True, help="database of the strategy under test (e.g. autotune's default)")
    ap.add_argument("--exhaustive", required=True, help="database of --strategy exhaustive on the same problems")
    ap.add_argument("--threshold", type=float, default=1.03, help="largest acceptable ratio (default 1.03)")
    ap.add_argument("--json", help="write the per-problem rows and the summary here")
    a = ap.parse_args()
    if not a.threshold >= 1.0:
        print(f"tune_quality: --threshold must be >= 1, got {a.threshold}", file=sys.stderr)
        return 2
    try:
        fast, exh = open_db(a.fast), open_db(a.exhaustive)
        problems, only_exh = compare(fast, exh)
    except (ValueError, sqlite3.DatabaseError) as e:
        print(f"tune_quality: {e}", file=sys.stderr)
        return 2
    ok = [r for r in problems if r["status"] == "ok"]
    over = [r for r in ok if r["ratio"] > a.threshold]
    missing = [r for r in problems if r["status"] == "missing"]
    def by_clock(r):  # the SM clock alone could explain the ratio
        f, b = r.get("fast_mhz_in_exh") or 0, r.get("exh_best_mhz") or 0
        return f > 0 and b > 0 and b / f >= r["ratio"]

    clocked = [r for r in over if by_clock(r)]
    print(f"{'ratio':>6}  {'fast us':>9}  {'best us':>9}  {'MHz fast/best':>13}  problem  "
          "(fast winner / exhaustive winner)")
    for r in problems:
        if r["status"] == "missing":
            print(f"{'-':>6}  {'-':>9}  {'-':>9}  {'-':>13}  {r['problem']}  "
                  f"({r['fast_winner']}: not in the exhaustive database)")
        else:
            mark = ("  <-- over" + (" (clock)" if by_clock(r) else "")) if r["ratio"] > a.threshold else ""
            mhz = f"{r['fast_mhz_in_exh']:.0f}/{r['exh_best_mhz']:.0f}"
            print(f"{r['ratio']:6.3f}  {r['fast_us_in_exh']:9.2f}  {r['exh_best_us']:9.2f}  {mhz:>13}  {r['problem']}  "
                  f"({r['fast_winner']} / {r['exh_winner']}){mark}")
    for dev, fam, key in only_exh:
        print(f"{'-':>6}  {'-':>9}  {'-':>9}  {'-':>13}  {key}  (no winner in the fast database)")
    t_fast, n_fast, open_fast = tuning_seconds(fast)
    t_exh, n_exh, open_exh = tuning_seconds(exh)
    families = sorted({r["family"] for r in ok})
    summary = {
        "threshold": a.threshold, "problems": len(problems), "compared": len(ok), "within": len(ok) - len(over),
        "over": len(over), "over_by_clock": len(clocked), "missing": len(missing), "only_in_exhaustive": len(only_exh),
        "worst_ratio": max((r["ratio"] for r in ok), default=None),
        "worst_by_family": {f: max(r["ratio"] for r in ok if r["family"] == f) for f in families},
        "fast_seconds": t_fast, "fast_runs": n_fast, "fast_runs_open": open_fast,
        "exhaustive_seconds": t_exh, "exhaustive_runs": n_exh, "exhaustive_runs_open": open_exh,
    }
    worst = f"{summary['worst_ratio']:.3f}" if ok else "-"
    print(f"\n{summary['within']} of {len(problems)} problems within {a.threshold:.2f}x of the exhaustive best "
          f"(worst {worst}; {len(over)} over, {len(clocked)} of them by the SM clock alone, {len(missing)} missing); "
          "per family: "
          + ", ".join(f"{f} {v:.3f}" for f, v in summary["worst_by_family"].items()))
    print(f"tuning time: fast {t_fast:.0f} s over {n_fast} run(s), exhaustive {t_exh:.0f} s over {n_exh} run(s)"
          + (f" ({open_fast + open_exh} run(s) not finished)" if open_fast + open_exh else ""))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"problems": problems, "only_in_exhaustive": [list(k) for k in only_exh], "summary": summary},
                      f, indent=1)
    return 1 if over or missing else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""How good a family's candidate order is: each problem's candidates in the order autotune keeps them, against an
EXHAUSTIVE database that measured every candidate of the same problems.

Usage:
    autotune --arch sm_90 --shapes S.json --grid listed --list-candidates > order.tsv
    bench/order_quality.py --candidates order.tsv --exhaustive EXH.db [--first 16] [--threshold 1.03] [--json OUT.json]

order.tsv holds one candidate per line: family, problem key, rank (0: the default config), variant name, tab-separated
(autotune --list-candidates). For each (device, family, problem) of EXH that the list names:
  best        = the least 'ok' median of any candidate of that problem in EXH;
  prefix      = the least median in EXH among the candidates ranked below --first, over best (1.00: the first --first
                hold the exhaustive winner);
  refined     = the same, with the depth siblings of the prefix's leaders added: the candidates ranked at or beyond
                --first whose config differs from a leader's only in the leaf named "stages" (tuner/work_items.h,
                depth_siblings), the leaders being the prefix's fastest and the next fastest when it is within 5% of
                it (tuner/strategy.h, refine_leaders: what autotune's fast strategy measures besides its first round);
  best_rank   = the rank of EXH's winner; first_within = the first rank whose time is within --threshold of best;
  default_ratio = the default config's (rank 0: what the runtime launches untuned) median over best, summarized per
                family as a geometric mean and a worst case.
Both ratios use EXH's times alone: what a strategy that measured its first --first candidates exactly would reach.
Measurement noise in a real run comes on top (bench/tune_quality.py compares a real run's winners). A problem of the
list without an 'ok' row in EXH is counted as missing.

Prints a table (problems whose refined ratio is over --threshold first) and a summary; --json writes {"problems":
[...], "summary": {...}}. Exit status: 0 when every compared problem's refined ratio is within --threshold, 1 when one
is over it, 2 for bad input (a list that is not autotune's, a file that is not a kerntune tuning database, no problem
in common).
"""
import argparse
import json
import math
import os
import sqlite3
import sys

from tune_quality import open_db


def read_candidates(path):
    """{(family, problem_key): [variant names by rank]} from autotune --list-candidates."""
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    order = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 4 or not parts[2].isdigit():
                raise ValueError(f"{path}:{n}: not a line of autotune --list-candidates "
                                 "(family, problem key, rank, variant name, tab-separated)")
            family, key, rank, variant = parts
            names = order.setdefault((family, key), [])
            if int(rank) != len(names):
                raise ValueError(f"{path}:{n}: rank {rank} of {key} out of order (expected {len(names)})")
            names.append(variant)
    if not order:
        raise ValueError(f"{path}: no candidates")
    return order


def flat(config, prefix=""):
    """A config's leaves as {JSON pointer: value} (nlohmann::json::flatten's form)."""
    if isinstance(config, dict):
        out = {}
        for k, v in config.items():
            out.update(flat(v, f"{prefix}/{k}"))
        return out
    return {prefix: config}


def depth_siblings(a, b):
    """Whether configs a and b differ in exactly one leaf, and that leaf is named "stages" (tuner/work_items.h)."""
    fa, fb = flat(a), flat(b)
    if fa.keys() != fb.keys():
        return False
    diff = [k for k in fa if fa[k] != fb[k]]
    return len(diff) == 1 and diff[0].rsplit("/", 1)[-1] == "stages"


# tuner/strategy.h: kRefineLeaders, kRefineWithin.
REFINE_LEADERS = 2
REFINE_WITHIN = 1.05


def refine_leaders(prefix, t):
    """The prefix's candidates whose depth siblings the fast strategy measures (tuner/strategy.h refine_leaders): the
    fastest, then up to REFINE_LEADERS - 1 more in order of time within REFINE_WITHIN of it."""
    ranked = sorted(prefix, key=lambda v: t[v][0])  # stable: equal times keep the listed order
    return [v for v in ranked[:REFINE_LEADERS] if t[v][0] <= REFINE_WITHIN * t[ranked[0]][0]]


def compare(order, exh, first, threshold):
    times = {}  # (device, family, key) -> {variant: (median, config)}
    for dev, fam, key, name, us, config in exh.execute(
            "SELECT d.name, m.family, m.problem_key, m.variant_name, MIN(m.median_us), m.config_json "
            "FROM measurements m JOIN devices d ON d.id = m.device_id WHERE m.status = 'ok' AND m.median_us > 0 "
            "GROUP BY d.name, m.family, m.problem_key, m.variant_name"):
        times.setdefault((dev, fam, key), {})[name] = (us, json.loads(config) if config else {})
    devices = sorted({d for d, _, _ in times}) or [None]
    rows = []
    for (fam, key), names in sorted(order.items()):
        for dev in devices:
            t = times.get((dev, fam, key))
            if not t:
                rows.append({"device": dev, "family": fam, "problem": key, "status": "missing"})
                continue
            best_name = min(t, key=lambda v: t[v][0])
            best = t[best_name][0]
            ranked = [(r, v) for r, v in enumerate(names) if v in t]
            prefix = [v for r, v in ranked if r < first]
            row = {"device": dev, "family": fam, "problem": key, "status": "compared", "candidates": len(names),
                   "measured": len(ranked), "best": best_name, "best_us": best,
                   "best_rank": names.index(best_name) if best_name in names else None,
                   "first_within": next((r for r, v in ranked if t[v][0] <= threshold * best), None),
                   "default_ratio": t[names[0]][0] / best if names[0] in t else None}
            if prefix:
                leads = refine_leaders(prefix, t)
                lead = leads[0]
                sibs = [v for r, v in ranked
                        if r >= first and any(depth_siblings(t[l][1], t[v][1]) for l in leads)]
                got = min(prefix + sibs, key=lambda v: t[v][0])
                row.update(prefix_ratio=t[lead][0] / best, prefix_best=lead, refined_ratio=t[got][0] / best,
                           refined_best=got)
            else:  # none of the first candidates has an 'ok' row: the order gives nothing
                row.update(prefix_ratio=None, prefix_best=None, refined_ratio=None, refined_best=None)
            rows.append(row)
    return rows


def short(variant):
    parts = variant.split("__")
    return parts[2] if len(parts) > 2 else variant


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--candidates", required=True, help="autotune --list-candidates output")
    ap.add_argument("--exhaustive", required=True, help="a database with every candidate measured")
    ap.add_argument("--first", type=int, default=16, help="the prefix length (autotune --max-candidates), default 16")
    ap.add_argument("--threshold", type=float, default=1.03, help="ratio counted as within, default 1.03")
    ap.add_argument("--json", help="also write the rows and the summary here")
    a = ap.parse_args()
    try:
        if a.threshold < 1:
            raise ValueError(f"--threshold {a.threshold} is below 1")
        if a.first < 1:
            raise ValueError(f"--first {a.first} must be at least 1")
        order = read_candidates(a.candidates)
        rows = compare(order, open_db(a.exhaustive), a.first, a.threshold)
    except (ValueError, sqlite3.DatabaseError) as e:
        print(f"order_quality: {e}", file=sys.stderr)
        return 2
    compared = [r for r in rows if r["status"] == "compared"]
    if not compared:
        print("order_quality: no problem of the list has an 'ok' row in the exhaustive database", file=sys.stderr)
        return 2
    missing = [r for r in rows if r["status"] != "compared"]
    over = lambda r, k: r[k] is None or r[k] > a.threshold
    print(f"{'refined':>8} {'prefix':>7} {'best rank':>9} {'first within':>12}  problem  (best / prefix's fastest)")
    for r in sorted(compared, key=lambda r: -(r["refined_ratio"] or 1e9)):
        fmt = lambda x: f"{x:.3f}" if x is not None else "-"
        rank = r["best_rank"] if r["best_rank"] is not None else "-"
        within = r["first_within"] if r["first_within"] is not None else "-"
        print(f"{fmt(r['refined_ratio']):>8} {fmt(r['prefix_ratio']):>7} {rank:>9} {within:>12}  {r['problem']}  "
              f"({short(r['best'])} / {short(r['prefix_best']) if r['prefix_best'] else '-'})"
              + ("  <-- over" if over(r, "refined_ratio") else ""))
    for r in missing:
        print(f"{'-':>8} {'-':>7} {'-':>9} {'-':>12}  {r['problem']}  (not in the exhaustive database)")
    n_prefix = sum(not over(r, "prefix_ratio") for r in compared)
    n_refined = sum(not over(r, "refined_ratio") for r in compared)
    print(f"\n{len(compared)} problems compared ({len(missing)} missing): the first {a.first} candidates hold one within "
          f"{a.threshold:.2f}x of the exhaustive best on {n_prefix}, with the leaders' depth siblings on "
          f"{n_refined}")
    # The default config (rank 0: what the runtime launches untuned) against the best, per family.
    defaults = {}
    for r in compared:
        if r["default_ratio"] is not None:
            defaults.setdefault(r["family"], []).append(r["default_ratio"])
    for fam, rs in sorted(defaults.items()):
        gm = math.exp(sum(math.log(x) for x in rs) / len(rs))
        print(f"{fam}: the default config is {gm:.3f}x the exhaustive best in geometric mean over {len(rs)} "
              f"problems, worst {max(rs):.3f}x")
    summary = {"compared": len(compared), "missing": len(missing), "first": a.first, "threshold": a.threshold,
               "within_prefix": n_prefix, "within_refined": n_refined,
               "default_geomean": {f: math.exp(sum(math.log(x) for x in rs) / len(rs)) for f, rs in defaults.items()},
               "default_worst": {f: max(rs) for f, rs in defaults.items()}}
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"problems": rows, "summary": summary}, f, indent=1)
    return 0 if n_refined == len(compared) else 1


if __name__ == "__main__":
    sys.exit(main())

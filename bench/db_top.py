#!/usr/bin/env python3
"""Prints the fastest candidates per problem of a kerntune tuning database and writes every measurement as CSV.

Usage: bench/db_top.py DB [--top N] [--csv OUT.csv]
Reads the measurements table (cache/tuning_db.cpp schema) with Python's sqlite3; times are microseconds (median over
batches, autotune timing). For runs on the GPU machine, whose databases are too large to bring back whole.
"""
import argparse
import csv
import sqlite3
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db")
    ap.add_argument("--top", type=int, default=5, help="candidates shown per problem (default 5)")
    ap.add_argument("--csv", help="write every measurement here")
    a = ap.parse_args()
    con = sqlite3.connect(f"file:{a.db}?mode=ro", uri=True)
    rows = con.execute(
        "SELECT problem_key, variant_name, status, median_us, p20_us, p80_us, rel_err FROM measurements "
        "ORDER BY problem_key, status != 'ok', median_us").fetchall()
    if not rows:
        sys.exit(f"{a.db}: no measurements")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["problem_key", "variant_name", "status", "median_us", "p20_us", "p80_us", "rel_err"])
            w.writerows(rows)
    shown = {}
    for key, name, status, med, p20, p80, err in rows:
        n = shown.get(key, 0)
        if n == 0:
            print(key)
        if n < a.top and status == "ok":
            print(f"  {med:9.2f} us  [{p20:.2f}, {p80:.2f}]  {name}")
        shown[key] = n + 1


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Per attention_prefill problem of a tuning database, the fastest measured variant overall and of each group of the
wgmma_ws space: unpacked / GQA-packed (`_gqa`), and unpacked with one, two or three consumer warpgroups (w4 / w8 /
w12), each with its ratio to the fastest. Reads the measurements table (status ok; median_us in microseconds).

usage: bench/prefill_groups.py DB
"""
import sqlite3
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    db = sqlite3.connect(sys.argv[1])
    probs = {}
    for key, variant, median_us, metric in db.execute(
            "select problem_key, variant_name, median_us, metric from measurements "
            "where status = 'ok' and family = 'attention_prefill'"):
        probs.setdefault(key, []).append((median_us, variant, metric))
    groups = [('unpacked', lambda v: '_gqa' not in v), ('packed', lambda v: '_gqa' in v),
              ('w4', lambda v: '_w4_' in v and '_gqa' not in v), ('w8', lambda v: '_w8_' in v and '_gqa' not in v),
              ('w12', lambda v: '_w12_' in v and '_gqa' not in v)]
    for key in sorted(probs):
        rows = sorted(probs[key])
        best = rows[0]
        print(f"{key}: best {best[0]:.2f} us {best[2]:.1f} TF/s {best[1].split('__')[2]}")
        for name, keep in groups:
            cand = [r for r in rows if keep(r[1])]
            if cand:
                r = cand[0]
                print(f"   {name:9s} {r[0]:8.2f} us  x{r[0] / best[0]:.3f}  {r[1].split('__')[2]}")


if __name__ == '__main__':
    main()

#!/usr/bin/env python3
"""Joins autotune's --json (qkv_proj problems) with bench/qkv_anchors.py (same run, same GPU): kerntune per weight
format vs fused fp16 F.linear (cuBLAS), three F.linear calls and tinygemm int4, in us and ratios, and checks the
issue's speed targets. fp16 activations (the anchors' dtype)."""
import argparse, json, re

FOUR_BIT = ("int4", "nf4", "mxfp4", "nvfp4", "int4_kb128", "nf4_kb128", "mxfp4_kb128", "nvfp4_kb128")  # K-blocked too
TARGETS = [  # (formats, m, limit description, function(ours_us, anchors) -> (ok, text))
    (FOUR_BIT, 1, lambda us, a: (us <= 8.0, "<= 8 us")),
    (FOUR_BIT, 16, lambda us, a: (us <= 10.0, "<= 10 us")),
    (("int8", "int8_kb64"), 1, lambda us, a: (us <= 12.0, "<= 12 us")),
    (FOUR_BIT, 4096, lambda us, a: (us <= 1.6 * a["fused_cublas"], "<= 1.6x cuBLAS fp16")),
    (("fp16",), 1, lambda us, a: (us <= a["fused_cublas"], "<= cuBLAS GEMM")),
    (("fp16",), 16, lambda us, a: (us <= a["fused_cublas"], "<= cuBLAS GEMM")),
    (("fp16",), 64, lambda us, a: (us <= a["fused_cublas"], "<= cuBLAS GEMM")),
    (("fp16",), 256, lambda us, a: (us <= a["fused_cublas"], "<= cuBLAS GEMM")),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tune", required=True)
    ap.add_argument("--anchors", required=True)
    ap.add_argument("--out")
    a = ap.parse_args()
    tune = json.load(open(a.tune))
    anc = json.load(open(a.anchors))
    A = {}
    for r in anc["rows"]:
        A.setdefault(r["m"], {})[r["backend"]] = r["us"]
    ours = {}
    for p in tune["problems"]:
        if p.get("family") != "qkv_proj" or "median_us" not in p:
            continue
        m = re.match(r"qkv_proj/(\w+)/(\w+)/m(\d+)/", p["problem"])
        dt, fmt, mm = m.group(1), m.group(2), int(m.group(3))
        ours[(dt, fmt, mm)] = p
    fmts = ["fp16", "int8", "int8_kb64", "int4", "int4_kb128", "nf4", "nf4_kb128", "mxfp4", "mxfp4_kb128", "nvfp4",
            "nvfp4_kb128"]
    print(f"device: {tune['device']} | anchors: torch {anc['torch']} on {anc['device']} | fp16 activations, us (ratio vs fused cuBLAS)")
    print(f"{'M':>6} {'cuBLAS':>8} {'3xlinear':>9} {'tinygemm':>9} " + " ".join(f"{f:>15}" for f in fmts))
    out = []
    for mm in sorted(A):
        row = A[mm]
        cells = []
        for f in fmts:
            p = ours.get(("fp16", f, mm))
            if p:
                cells.append(f"{p['median_us']:7.1f} ({row['fused_cublas'] / p['median_us']:4.2f}x)")
                out.append(dict(m=mm, format=f, us=p["median_us"], cublas_us=row["fused_cublas"], winner=p["winner"],
                                speedup_vs_cublas=row["fused_cublas"] / p["median_us"],
                                speedup_vs_tinygemm=(row["tinygemm_int4"] / p["median_us"]) if "tinygemm_int4" in row else None))
            else:
                cells.append(f"{'n/a':>15}")
        tg = f"{row['tinygemm_int4']:9.1f}" if "tinygemm_int4" in row else f"{'n/a':>9}"
        print(f"{mm:6d} {row['fused_cublas']:8.1f} {row['3_linears']:9.1f} {tg} " + " ".join(cells))
    print("\nspeed targets (issue 4):")
    for fs, mm, fn in TARGETS:
        for f in fs:
            p = ours.get(("fp16", f, mm))
            if not p or mm not in A:
                print(f"  {f:6} M={mm:5d}: not measured")
                continue
            ok, text = fn(p["median_us"], A[mm])
            print(f"  {f:6} M={mm:5d}: {p['median_us']:8.1f} us  target {text:22} {'MET' if ok else 'MISSED'}")
    if a.out:
        json.dump({"device": tune["device"], "rows": out}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()

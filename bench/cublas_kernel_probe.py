#!/usr/bin/env python3
"""Which kernels cuBLAS runs for the Qwen2.5-7B fused Q/K/V projection (a diagnostic; not part of bench_all).

    python3 bench/cublas_kernel_probe.py [--ms 1,16,64,256] [--out probe.json]

For each M: one F.linear(x [M, 3584], w [4608, 3584], bias) in fp16 under torch.profiler; prints each GPU kernel's
name, grid, block, shared memory and registers (Kineto's kernel event args) and its duration, so our tile and split
choices can be compared with the library's (the names of cuBLAS's sm90 kernels carry the tile shape, the cluster
shape and whether the K dimension is split).
"""
import argparse
import json
import os
import tempfile

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ms", default="1,16,64,256")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    K, N = 3584, 4608
    w = torch.randn(N, K, device="cuda", dtype=torch.float16) * 0.02
    b = torch.randn(N, device="cuda", dtype=torch.float16)
    rows = []
    for m in [int(s) for s in a.ms.split(",")]:
        x = torch.randn(m, K, device="cuda", dtype=torch.float16)
        for _ in range(5):
            F.linear(x, w, b)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                F.linear(x, w, b)
            torch.cuda.synchronize()
        path = os.path.join(tempfile.mkdtemp(), "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            ev = json.load(f)["traceEvents"]
        seen = {}
        for e in ev:
            if e.get("cat") != "kernel":
                continue
            args = e.get("args", {})
            key = e["name"]
            r = seen.setdefault(key, {"m": m, "kernel": key, "grid": args.get("grid"), "block": args.get("block"),
                                      "smem": args.get("shared memory"), "regs": args.get("registers per thread"),
                                      "dur_us": []})
            r["dur_us"].append(e.get("dur"))
        for r in seen.values():
            print(f"M={m:5d} grid={r['grid']} block={r['block']} smem={r['smem']} regs={r['regs']} "
                  f"dur={r['dur_us']} {r['kernel']}")
            rows.append(r)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()

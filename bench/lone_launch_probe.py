#!/usr/bin/env python3
"""Where a lone decode launch's time goes (a diagnostic; not part of bench_all).

    python3 bench/lone_launch_probe.py --db tuned.db [--formats int4,fp16] [--reps 50] [--out probe.json]

For the Qwen2.5-7B projection (K 3584, N 4608, bias, RoPE) at M = 1 it times, per rep, one call between two CUDA
events after an L2 flush and a GPU spin (the do_bench-style method of bench_all.py), with three flushes:
  dirty: zero a 256 MB buffer (what triton's do_bench does: L2 is left full of dirty lines, so the timed call's
         first reads also pay the write-back of the lines they evict);
  clean: read a 256 MB buffer (L2 full of clean lines of another buffer: cold but nothing to write back);
  none:  no flush (the call's own weight stays in L2 from the rep before: warm).
Rows: an empty-ish kernel (one-element add: launch + event overhead), pure reads of 8.3 / 16.5 / 33 MB (the 4-bit,
int8 and fp16 weight sizes; torch sum over int32), cuBLAS fp16 F.linear, tinygemm int4, kerntune qkv_proj per
format. It also splits kerntune's Python host time: the whole rt.qkv_proj call, the library call alone with the
argument structs built once, and a cProfile of the call.
"""
import argparse
import cProfile
import ctypes
import io
import json
import os
import pstats
import statistics
import sys
import time

import torch
import torch.nn.functional as F

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.join(REPO, "bench"))


def lone(fn, flush, reps, sleep_cycles, buf):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    st = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    en = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        if flush == "dirty":
            buf.zero_()
        elif flush == "clean":
            torch.sum(buf)
        torch.cuda._sleep(sleep_cycles)
        st[i].record()
        fn()
        en[i].record()
    torch.cuda.synchronize()
    per = sorted(a.elapsed_time(b) * 1e3 for a, b in zip(st, en))
    return statistics.median(per)


def host_us(fn, n=300):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) * 1e6 / n


def breakdown(rt, x, w, kw):
    """Host time (us per call) of the pieces of rt.qkv_proj: the library call alone with the argument structs built
    once, building the structs, the stream lookup, the device guard."""
    from kerntune._lib import format_id, kt_qkv_args, kt_qkv_problem
    q, k, v = kw["out"]
    lib, h, dev = rt._lib, rt._handle, rt.device
    from kerntune._lib import KT_DTYPE_BF16, KT_DTYPE_FP16
    dt = KT_DTYPE_FP16 if x.dtype == torch.float16 else KT_DTYPE_BF16
    mk_p = lambda: kt_qkv_problem(dt, format_id(w.format), 1, w.k, kw["num_heads"], kw["num_kv_heads"],
                                  kw["head_dim"], 1, 1)
    mk_a = lambda: kt_qkv_args(x.data_ptr(), w.data.data_ptr(), w.scales.data_ptr() if w.scales.numel() else None,
                               w.zeros.data_ptr() if w.zeros.numel() else None, kw["bias"].data_ptr(),
                               kw["positions"].data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(), w.k,
                               q.shape[1] * q.shape[2], k.shape[1] * k.shape[2], v.shape[1] * v.shape[2],
                               float(w.tensor_scale), 1e6)
    p, a = mk_p(), mk_a()
    st = ctypes.c_void_p(torch.cuda.current_stream(dev).cuda_stream)
    pb, ab = ctypes.byref(p), ctypes.byref(a)
    out = dict(lib_call_us=host_us(lambda: lib.kt_qkv_proj(h, pb, ab, st)))
    out["build_structs_us"] = host_us(lambda: (mk_p(), mk_a()), 2000)
    out["current_stream_us"] = host_us(lambda: ctypes.c_void_p(torch.cuda.current_stream(dev).cuda_stream), 2000)
    out["raw_stream_us"] = host_us(lambda: torch._C._cuda_getCurrentRawStream(0), 2000)

    def guard():
        with torch.cuda.device(dev):
            pass
    out["device_guard_us"] = host_us(guard, 2000)
    out["empty_lambda_us"] = host_us(lambda: None, 2000)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--formats", default="int4,fp16")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--sleep-us", type=float, default=300)
    ap.add_argument("--out")
    ap.add_argument("--dtype", default="fp16", choices=("fp16", "bf16"))
    args = ap.parse_args()
    import kerntune as kt
    from bench_all import packed_cuda_copies

    props = torch.cuda.get_device_properties(0)
    sleep_cycles = int(args.sleep_us * getattr(props, "clock_rate", 2_000_000) * 1e-3)
    buf = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
    buf.fill_(1)
    K, Hq, Hkv, D = 3584, 28, 4, 128
    N = (Hq + 2 * Hkv) * D
    g = torch.Generator().manual_seed(0)
    w32 = torch.randn(N, K, generator=g) * 0.02
    b32 = torch.randn(N, generator=g) * 0.1
    rows = []

    def row(name, fn):
        r = dict(name=name)
        for fl in ("dirty", "clean", "none"):
            r[fl] = lone(fn, fl, args.reps, sleep_cycles, buf)
        rows.append(r)
        print(f"{name:34} dirty {r['dirty']:7.1f}  clean {r['clean']:7.1f}  none {r['none']:7.1f} us", flush=True)

    one = torch.ones(1, device="cuda")
    row("tiny kernel (1-element add)", lambda: one.add_(1))
    for mb in (8.3, 16.5, 33.0):
        t = torch.ones(int(mb * 1e6 / 4), dtype=torch.int32, device="cuda")
        row(f"torch.sum read {mb} MB", lambda t=t: torch.sum(t))
    dt = torch.half if args.dtype == "fp16" else torch.bfloat16
    x16 = torch.randn(1, K, device="cuda").to(dt)
    w16 = w32.cuda().to(dt)
    b16 = b32.cuda().to(dt)
    row(f"cuBLAS {args.dtype} F.linear M=1", lambda: F.linear(x16, w16, b16))
    w_u8 = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device="cuda")
    tp = torch.ops.aten._convert_weight_to_int4pack(w_u8, 8)
    sz = torch.randn(K // 128, N, 2, device="cuda", dtype=torch.bfloat16) * 0.01
    xb = x16.bfloat16()
    row("tinygemm int4 M=1", lambda: torch.ops.aten._weight_int4pack_mm(xb, tp, 128, sz))

    rt = kt.Runtime(args.db)
    host = {}
    for fmt in args.formats.split(","):
        fmt = kt.format_for_activations(fmt, args.dtype)  # 16-bit: the act dtype
        pw = kt.quantize(w32, fmt)
        w = packed_cuda_copies(pw, 1)[0][0]
        pos = torch.zeros(1, dtype=torch.int32, device="cuda")
        outs = (torch.empty(1, Hq, D, device="cuda", dtype=dt), torch.empty(1, Hkv, D, device="cuda", dtype=dt),
                torch.empty(1, Hkv, D, device="cuda", dtype=dt))
        kw = dict(bias=b16, positions=pos, num_heads=Hq, num_kv_heads=Hkv, head_dim=D, rope_theta=1e6, out=outs)
        fn = lambda: rt.qkv_proj(x16, w, **kw)
        print(rt.explain_qkv(x16, w, num_heads=Hq, num_kv_heads=Hkv, head_dim=D, has_bias=True, rope=True).splitlines()[0])
        row(f"kerntune {fmt} ({args.dtype}) M=1", fn)
        host[fmt] = dict(call_us=host_us(fn))
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(200):
            fn()
        pr.disable()
        torch.cuda.synchronize()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
        host[fmt]["profile"] = s.getvalue()
        print(f"host: rt.qkv_proj {host[fmt]['call_us']:.1f} us per call\n{s.getvalue()}")
        host[fmt].update(breakdown(rt, x16, w, kw))
        print(f"host breakdown {fmt}: " + ", ".join(f"{k} {v:.1f}" for k, v in host[fmt].items() if k != "profile"))
    host["torch_one_add_us"] = host_us(lambda: one.add_(1))
    host["cublas_linear_us"] = host_us(lambda: F.linear(x16, w16, b16))
    print(f"host: torch add {host['torch_one_add_us']:.1f} us, F.linear {host['cublas_linear_us']:.1f} us")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(0), reps=args.reps, sleep_us=args.sleep_us, rows=rows,
                           host=host), f, indent=1)


if __name__ == "__main__":
    main()

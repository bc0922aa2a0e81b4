#!/usr/bin/env python3
"""Where a lone decode launch's time goes (a diagnostic; not part of bench_all).

    python3 bench/lone_launch_probe.py --db tuned.db [--formats int4,fp16] [--m 1] [--reps 50] [--out probe.json]
        [--cubin build-gpu/probes/read_floor.cubin [--read-mb 8.3]] [--copies 20] [--skip-host] [--kerntune-only]

For the Qwen2.5-7B projection (K 3584, N 4608, bias, RoPE) at M tokens (--m, default 1) it times, per rep, one call between two CUDA
events after an L2 flush and a GPU spin (the do_bench-style method of bench_all.py), with three flushes:
  dirty: zero a 256 MB buffer (what triton's do_bench does: L2 is left full of dirty lines, so the timed call's
         first reads also pay the write-back of the lines they evict);
  clean: read a 256 MB buffer (L2 full of clean lines of another buffer: cold but nothing to write back);
  none:  no flush (the call's own weight stays in L2 from the rep before: warm).
Rows: an empty-ish kernel (one-element add: launch + event overhead), cuBLAS fp16 F.linear, tinygemm int4, kerntune
qkv_proj per format, and with --cubin (build command in bench/read_floor/read_floor.cu) pure-read kernels over the
4-bit weight's size (8.3 MB; --read-mb): 128-bit ld.global.nc with 4-16 loads in flight per thread, and cp.async.bulk
streams through shared memory, over several grid sizes. Those and kerntune also get a "graph" column: the per-launch
time of a CUDA graph of launches over rotated copies (> 3x L2, bench_all's graph method). Unless --skip-host, it also
splits kerntune's Python host time: the whole rt.qkv_proj call, the library call alone with the argument structs
built once, and a cProfile of the call.
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


class Cubin:
    """The read_floor.cubin kernels, loaded through the Driver API (ctypes) into torch's primary context and launched
    on torch's current stream (so they are captured by torch.cuda.graph too)."""

    def __init__(self, path):
        self.cu = ctypes.CDLL("libcuda.so.1")
        torch.cuda.init()
        torch.zeros(1, device="cuda")
        self.mod = ctypes.c_void_p()
        self._ok(self.cu.cuModuleLoad(ctypes.byref(self.mod), path.encode()), "cuModuleLoad " + path)
        self.fns = {}
        self.smem = {}

    def _ok(self, rc, what):
        if rc != 0:
            raise RuntimeError(f"{what}: CUresult {rc}")

    def fn(self, name, smem=0):
        if name not in self.fns:
            f = ctypes.c_void_p()
            self._ok(self.cu.cuModuleGetFunction(ctypes.byref(f), self.mod, name.encode()), name)
            self.fns[name] = f
        f = self.fns[name]
        self.smem[name] = max(self.smem.get(name, 0), smem)
        if self.smem[name] > 48 * 1024:  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: the largest launch's
            self._ok(self.cu.cuFuncSetAttribute(f, 8, ctypes.c_int(self.smem[name])), name + " smem attribute")
        return f

    def launcher(self, name, grid, block, args, smem=0):
        """A zero-argument launch function; args are ctypes values (kept alive by the closure)."""
        f = self.fn(name, smem)
        vals = list(args)
        ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in vals])
        cu = self.cu

        def go():
            st = ctypes.c_void_p(torch._C._cuda_getCurrentRawStream(0))
            self._ok(cu.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, smem, st, ptrs, None), name)
        go.keep = (vals, ptrs)
        return go


def read_rows(cb, mb, out):
    """(name, [launch fn per copy]) for the pure-read kernels over `mb` MB, one fn per buffer copy in `out`."""
    bytes_ = int(mb * 1e6) // 16 * 16
    sink = torch.zeros(4, dtype=torch.int32, device="cuda")
    u = ctypes.c_uint64
    p = lambda t: ctypes.c_void_p(t.data_ptr())
    rows = [("empty kernel (read_floor.cubin)", [cb.launcher("empty", 1, 32, [p(sink)])])]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for name, unroll in (("read_ldg_u4", 4), ("read_ldg_u8", 8), ("read_ldg_u16", 16), ("read_ldg256_u8", 8)):
        for threads in (256, 512):
            for waves in (1, 2, 4):
                grid = min(sms * waves, max(1, bytes_ // (16 * threads * unroll)))
                if waves > 1 and grid < sms * waves:
                    continue
                rows.append((f"{name} T{threads} G{grid}",
                             [cb.launcher(name, grid, threads, [p(t), u(bytes_), p(sink)]) for t in out]))
    for grid_mul, chunk, slots in ((1, 16384, 4), (1, 8192, 8), (1, 32768, 4), (2, 16384, 4), (2, 8192, 6),
                                   (4, 8192, 4)):
        grid = sms * grid_mul
        smem = chunk * slots
        rows.append((f"read_bulk G{grid} chunk{chunk} x{slots}",
                     [cb.launcher("read_bulk", grid, 32, [p(t), u(bytes_), ctypes.c_uint32(chunk),
                                                          ctypes.c_uint32(slots), p(sink)], smem) for t in out]))
    return rows


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
    ap.add_argument("--m", type=int, default=1, help="tokens (M) of the projection")
    ap.add_argument("--cubin", help="build-gpu/probes/read_floor.cubin: adds the pure-read rows")
    ap.add_argument("--read-mb", type=float, default=8.3)
    ap.add_argument("--copies", type=int, default=20, help="rotated copies for the graph column (> 3x L2)")
    ap.add_argument("--skip-host", action="store_true", help="skip the host-time breakdown")
    ap.add_argument("--kerntune-only", action="store_true",
                    help="time only the kerntune rows (no tiny kernel, cuBLAS or tinygemm rows; bench/rank_probe.py)")
    args = ap.parse_args()
    import kerntune as kt
    import bench_all
    from bench_all import Timer, packed_cuda_copies
    bench_all._load_torch()
    timer = Timer(samples=30, budget_ms=300, replay_us=2000, max_launches=200, warmup_replays=2)

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

    def row(name, fn, graph_fns=None):
        r = dict(name=name)
        for fl in ("dirty", "clean", "none"):
            r[fl] = lone(fn, fl, args.reps, sleep_cycles, buf)
        text = f"{name:40} dirty {r['dirty']:7.1f}  clean {r['clean']:7.1f}  none {r['none']:7.1f}"
        if graph_fns:
            r["graph"] = timer.measure(graph_fns)["us"]
            text += f"  graph {r['graph']:7.2f}"
        rows.append(r)
        print(text + " us", flush=True)

    one = torch.ones(1, device="cuda")
    if not args.kerntune_only:
        row("tiny kernel (1-element add)", lambda: one.add_(1))
    if args.cubin:
        cb = Cubin(args.cubin)
        copies = [torch.randint(-2**31, 2**31 - 1, (int(args.read_mb * 1e6) // 4,), dtype=torch.int32, device="cuda")
                  for _ in range(args.copies)]
        for name, fns in read_rows(cb, args.read_mb, copies):
            row(name + f" ({args.read_mb} MB)", fns[0], fns if len(fns) > 1 else None)
        copies = None
    dt = torch.half if args.dtype == "fp16" else torch.bfloat16
    M = args.m
    x16 = torch.randn(M, K, device="cuda").to(dt)
    w16 = w32.cuda().to(dt)
    b16 = b32.cuda().to(dt)
    if not args.kerntune_only:
        row(f"cuBLAS {args.dtype} F.linear M={M}", lambda: F.linear(x16, w16, b16))
        w_u8 = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device="cuda")
        tp = torch.ops.aten._convert_weight_to_int4pack(w_u8, 8)
        sz = torch.randn(K // 128, N, 2, device="cuda", dtype=torch.bfloat16) * 0.01
        xb = x16.bfloat16()
        row(f"tinygemm int4 M={M}", lambda: torch.ops.aten._weight_int4pack_mm(xb, tp, 128, sz))

    rt = kt.Runtime(args.db)
    host = {}
    for fmt in args.formats.split(","):
        fmt = kt.format_for_activations(fmt, args.dtype)  # 16-bit: the act dtype
        pw = kt.quantize(w32, fmt)
        ws = packed_cuda_copies(pw, args.copies)[0]
        w = ws[0]
        pos = torch.arange(M, dtype=torch.int32, device="cuda")
        outs = (torch.empty(M, Hq, D, device="cuda", dtype=dt), torch.empty(M, Hkv, D, device="cuda", dtype=dt),
                torch.empty(M, Hkv, D, device="cuda", dtype=dt))
        kw = dict(bias=b16, positions=pos, num_heads=Hq, num_kv_heads=Hkv, head_dim=D, rope_theta=1e6, out=outs)
        fn = lambda: rt.qkv_proj(x16, w, **kw)
        print(rt.explain_qkv(x16, w, num_heads=Hq, num_kv_heads=Hkv, head_dim=D, has_bias=True, rope=True).splitlines()[0])
        row(f"kerntune {fmt} ({args.dtype}) M={M}", fn, [lambda wi=wi: rt.qkv_proj(x16, wi, **kw) for wi in ws])
        if args.skip_host:
            continue
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

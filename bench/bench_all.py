#!/usr/bin/env python3
"""kerntune against its anchors, side by side in ONE process on ONE GPU, for every workload of a shapes file.

    python3 bench/bench_all.py --db qwen7b-h100.db [--shapes shapes/qwen7b.json[,shapes/llama8b.json...]]
                               [--sections prefill,decode,qkv] [--out FILE.json] [--plots-dir DIR] [--quick] [--append]

Several shapes files (comma-separated, each naming a different "model"): every section runs over each file in the
order given (the prefill rows of the first file, then of the second; likewise decode and qkv), each row carries the
"model" it was measured for, and the section's table gets a "heads" column (Hq/Hkv) telling the geometries apart.

Needs a CUDA GPU, torch (2.11 tested: torch.nn.attention.sdpa_kernel, torch.cuda.CUDAGraph), the kerntune Python
package (python/kerntune, ctypes over libkerntune.so; found through sys.path, $KERNTUNE_LIB as that package says)
and, for the plots only, matplotlib. Exit status: 0 ok, 1 some kerntune row failed (error or wrong result; every
row is still written), 2 bad arguments / no GPU / no database.

Sections (each row of each section is one JSON row; nothing is skipped silently: a failure is a row with "error"):

  prefill  workloads.attention_prefill x "dtypes": kerntune rt.attention(q, k, v, causal) vs torch SDPA with the
           FLASH_ATTENTION (FlashAttention-2) and CUDNN_ATTENTION backends (torch.nn.attention.sdpa_kernel), fed
           transposed [B, H, S, D] views of the same [B, S, H, D] tensors (what FlashAttention-layout users do),
           enable_gqa=True. Unit: TFLOP/s, FLOPs = 4 * B * Hq * Sq * Sk * D, halved when causal (for Sq = Sk this is
           the usual 4*B*Hq*S^2*D/2 of FlashAttention's benchmarks; the diagonal is not counted separately).
           Ratio = kerntune TFLOP/s / anchor TFLOP/s (> 1: kerntune faster). The GPU's dense-matmul peak, once
           per run and per dtype of these rows (before the first file's rows; not per model): torch.matmul of two
           [8192, 8192] random normal matrices into a preallocated out=, timed like the rows (rows impl
           "matmul_peak": us, tflops = 2 * 8192^3 / time); every timed prefill row then carries peak_frac = its
           TFLOP/s / that peak (none when the peak failed: the peak row carries the error), and the table an
           "of_peak" column under a line giving the peak per dtype.
  decode   DECODE_POINTS (B 1 / 16 / 64, kv_len 4096 / 2048 / 32768, q_len 1; B 16 kv_len 4096 q_len 4 and 8), each
           with a contiguous and a paged (64-token pages, shuffled block table) cache, x "dtypes" (--decode-all: every
           attention_decode entry of the shapes file instead, lists expanded). kerntune rt.attention_decode(q, k_cache,
           v_cache, seqlens_k (all kv_len, on the device), block_table, causal=True, max_seqlen_k=kv_len); the new
           tokens causal among themselves. Anchors on the contiguous cache: SDPA FLASH and CUDNN with the equivalent
           mask (none for q_len 1; torch.nn.attention.bias.causal_lower_right for q_len > 1; a backend that refuses
           it is a row with its error text); paged rows are compared with them. read_ceiling: a Triton pure-read
           kernel over the same K+V bytes (read_ceiling_fn: 16 KB per program, 16-byte loads; timed the same way; row
           field "method"; torch.sum where Triton is missing) = the read bandwidth this GPU reaches for that size.
           Units: us and GB/s, bytes = K + V cache read + q read + o written = (2*B*kv_len*Hkv*D + 2*B*q_len*Hq*D) *
           elt (the ceiling: the K+V bytes). Every row (not the ceiling's) also carries the do_bench-style number
           (flush_us, see below).
  qkv      workloads.qkv_proj tokens M x formats: kerntune rt.qkv_proj (one kernel: GEMM with the packed weight,
           + bias, + RoPE on the Q and K heads at positions arange(M), split into Q/K/V) vs the anchors, GEMM only:
           three F.linear calls (q, k, v, with bias), one fused F.linear on the concatenated weight (cuBLAS, with
           bias), tinygemm int4 (torch.ops.aten._convert_weight_to_int4pack + _weight_int4pack_mm, bf16, group 128,
           no bias; the calls of bench/qkv_anchors.py). Activations: fp16 for the fp16 format, bf16 for every other
           format (--quant-act-dtype); cuBLAS / 3x F.linear are measured in fp16 AND bf16, and each kerntune row is
           compared with the anchors of its own activation dtype. Units: us per call; TFLOP/s = 2*M*N*K / t; weight
           GB/s = packed weight bytes / t. Ratio = anchor time / kerntune time (> 1: kerntune faster).

Timing: the same for kerntune and for every anchor.
  - Cold L2: C copies of the inputs, C = ceil(3 * L2 / bytes of one copy) (L2 from
    torch.cuda.get_device_properties(0).L2_cache_size): q/k/v copies for attention, weight copies for the projection
    (kerntune: packed weight + scales; cuBLAS: fp16/bf16 weight + bias; tinygemm: packed int4 + scales/zeros).
    One output buffer is shared by all copies (the anchors' outputs come from the graph's memory pool too).
  - One eager call per copy first (kerntune's first call per problem picks and loads the kernel and may allocate or
    synchronize: that must not happen during capture), then a side-stream warm-up, then torch.cuda.CUDAGraph
    capture of L launches walking through the copies in order (L a multiple of C, sized so a replay lasts about
    --replay-us, at most --max-launches unless C is larger). Python/ctypes launch overhead (~10 us) is therefore
    not in any number. If capture fails (reported as "capture_error"), that one row is timed eagerly (batches of
    L launches between events) and marked timing="eager".
  - Replays are timed with torch.cuda.Event pairs; per-launch time = replay time / L; the row gives the median over
    the replays (p20/p80 too), after --warmup-replays untimed replays. Replays: --samples, fewer when a replay
    would overrun --budget-ms (never fewer than 5). Every section interleaves: the graphs of one workload (prefill:
    kerntune, flash, cuDNN; decode: kerntune, the read ceiling, flash, cuDNN; qkv: every anchor and every format's
    kerntune row of one M) are captured first and their replays interleaved (kerntune, flash, cuDNN, kerntune, ...),
    so that all of them see the same SM clocks (the GPU's power limit moves them by up to 25% within a run); the
    ratios of a row compare like with like.
  - Projection rows with M <= --flush-max-m (default 16: the decode sizes), and the decode rows named above, are also
    timed the way published decode
    numbers usually are: triton.testing.do_bench's method, a
    256 MB buffer zeroed before each call (L2 flushed), then (--flush-sleep-us, default 300) a GPU spin so that a
    call's host side cannot outlast the GPU's head start (kerntune's Python path takes ~100 us per call, longer than
    the ~90 us zeroing: without the spin that host time lands in its number), one call between two CUDA events
    (eager: a lone launch, no back-to-back overlap), the median over --flush-reps calls; "flush_us" (p20/p80 too)
    and "flush_host_us" (median host time of the call). Same method for kerntune and the anchors.
  - Before timing, every kerntune output is checked once against a float64 torch reference (attention: a sample
    of query rows incl. the first and last, all heads; projection: all rows, with the DEQUANTIZED weight
    pw.dequantize(), so the check measures the kernel, not the quantization). rel err = ||out - ref||_2 / ||ref||_2.
    Tolerances: attention fp16 5e-3 / bf16 1e-2; projection fp16 3e-3 / bf16 1e-2. A kerntune row above its
    tolerance (or non-finite) is recorded as error "wrong result: ..." and is not timed. Anchor outputs are checked
    the same way (their rel_err is recorded, not gated; tinygemm uses random codes and is not checked).

Writes: bench/results/<gpu>.json (gpu = torch.cuda.get_device_name() slugified, e.g. nvidia_h100_80gb_hbm3.json;
--out overrides), rewritten after every section, with device, driver (nvidia-smi), torch/CUDA versions, date (UTC
ISO 8601), kerntune version, db path, the shapes file(s) ("shapes": the --shapes paths relative to the repository,
comma-joined; "model" and "geometry": the first file's; with several files also "models": [{model, shapes,
geometry}] per file, in order), the command, the timing settings and all rows (schema "kerntune-bench/1",
read by bench/make_report.py), and PNGs (matplotlib Agg) in --plots-dir (default bench/results/):
<gpu>_prefill.png (TFLOP/s per workload sorted by S, one line per backend, one panel per dtype) and <gpu>_qkv.png
(us vs M, log-log, one panel per format, lines for kerntune and each anchor). Prints one table per section (after
progress lines) and the full text of every error below it.
"""
import argparse
import contextlib
import copy
import datetime
import gc
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import time
import sys
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = "kerntune-bench/1"
ATTN_TOL = {"fp16": 5e-3, "bf16": 1e-2}
QKV_TOL = {"fp16": 3e-3, "bf16": 1e-2}

torch = None  # imported in main(), so that --help works anywhere
F = None


def _load_torch():
    global torch, F
    import torch as _torch
    import torch.nn.functional as _F
    torch, F = _torch, _F


def log(msg=""):
    print(msg, flush=True)


def slugify(name):
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "gpu"


def err_text(e):
    return f"{type(e).__name__}: {str(e).strip()}"


def short(s, n=60):
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 3] + "..."


def quantile(sorted_vals, p):
    """Linear interpolation between closest ranks (numpy's default), p in [0, 1]."""
    if len(sorted_vals) == 1:
        return sorted_vals[0]
    x = p * (len(sorted_vals) - 1)
    lo = int(math.floor(x))
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (x - lo)


def tensor_bytes(*ts):
    return sum(t.numel() * t.element_size() for t in ts if t is not None)


def rel_err(out, ref):
    out = out.double()
    ref = ref.double()
    den = ref.norm().item()
    num = (out - ref).norm().item()
    return num / den if den > 0 else (0.0 if num == 0 else float("inf"))


def n_copies(bytes_per_copy, l2_bytes, cap=256):
    return max(1, min(cap, int(math.ceil(3.0 * l2_bytes / max(1, bytes_per_copy)))))


def dtype_of(name):
    return {"fp16": torch.float16, "bf16": torch.bfloat16}[name]


# ---------------------------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------------------------
class Timer:
    """Times a list of zero-argument launch functions (one per rotated input copy) as described in the module
    docstring. measure() returns {"us", "p20_us", "p80_us", "replays", "launches_per_replay", "copies", "timing"}
    (+ "capture_error" when it had to fall back to eager timing)."""

    def __init__(self, samples, budget_ms, replay_us, max_launches, warmup_replays, min_samples=5, flush_reps=100,
                 flush_sleep_cycles=0):
        self.flush_reps = flush_reps
        self.flush_sleep_cycles = flush_sleep_cycles
        self._flush_buf = None
        self.samples = samples
        self.budget_ms = budget_ms
        self.replay_us = replay_us
        self.max_launches = max_launches
        self.warmup_replays = warmup_replays
        self.min_samples = min(min_samples, samples)

    @staticmethod
    def _capture(seq, mode):
        # Warm-up on a side stream before capture (torch.cuda.graphs docs: lazy init of cuBLAS workspaces etc.).
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for f in seq[: min(3, len(seq))]:
                f()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, capture_error_mode=mode):
            for f in seq:
                f()
        torch.cuda.synchronize()
        return g

    def prepare(self, fns, context=None):
        """Everything measure() does before its timed replays, for one row: one eager call per copy, the launch
        estimate, the graph capture (eager fallback), the warm-up replays. context: None or a zero-argument factory of
        a context manager (an SDPA backend choice) entered around the eager calls and the capture, and around every
        replay of an eager fallback. Returns the handle sample() takes. The handle holds fns: a graph replays raw
        device pointers, so the tensors the launch functions close over (outputs allocated outside the capture, such as
        kerntune's Q/K/V buffers) must live until sample() has replayed it and lets the handle go."""
        ctx = context if context is not None else contextlib.nullcontext
        n = len(fns)
        torch.cuda.synchronize()
        with ctx():
            for f in fns:  # eager: the first call of a problem resolves/loads the kernel; touches every copy once
                f()
        torch.cuda.synchronize()
        # Rough per-launch estimate (eager, so it includes launch overhead: an upper bound for small kernels).
        cnt = max(5, min(n, 64))
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with ctx():
            e0.record()
            for i in range(cnt):
                fns[i % n]()
            e1.record()
        torch.cuda.synchronize()
        est_us = max(0.5, e0.elapsed_time(e1) * 1e3 / cnt)
        launches = max(1, min(self.max_launches, int(math.ceil(self.replay_us / est_us))))
        launches = int(math.ceil(launches / n)) * n  # whole walks through the copies
        seq = [fns[i % n] for i in range(launches)]

        graph, capture_errors = None, []
        for mode in ("global", "relaxed"):
            try:
                with ctx():
                    graph = self._capture(seq, mode)
                break
            except Exception as e:  # kept as data; falls back to eager timing
                capture_errors.append(f"capture_error_mode={mode}: {err_text(e)}")
                graph = None
                try:
                    torch.cuda.synchronize()
                except Exception:
                    pass
        if graph is not None:
            run, mode = graph.replay, "graph"
        else:
            mode = "eager"

            def run():
                with ctx():
                    for f in seq:
                        f()

        for _ in range(self.warmup_replays):
            run()
        torch.cuda.synchronize()
        e0.record()
        run()
        e1.record()
        torch.cuda.synchronize()
        return dict(run=run, graph=graph, fns=fns, launches=launches, copies=n, mode=mode,
                    capture_errors=capture_errors, replay_ms=max(1e-4, e0.elapsed_time(e1)))

    def sample(self, preps):
        """Times prepared rows (prepare()) with their replays interleaved: replay i of every row, in order, then replay
        i + 1, so that every row of a workload sees the same clock and power states (an H200 under its power limit
        moves its SM clock by up to 25% within a run). Replays: --samples, fewer when the slowest row's replays would
        overrun --budget-ms (never fewer than 5). Returns per row {"us", "p20_us",
        "p80_us", "replays", "launches_per_replay", "copies", "timing"} (+ "capture_error" when eager)."""
        samples = max(self.min_samples, min(self.samples, int(self.budget_ms / max(p["replay_ms"] for p in preps))))
        events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(samples)]
                  for _ in preps]
        for i in range(samples):
            for p, ev in zip(preps, events):
                ev[i][0].record()
                p["run"]()
                ev[i][1].record()
        torch.cuda.synchronize()
        out = []
        for p, ev in zip(preps, events):
            per = sorted(s.elapsed_time(e) * 1e3 / p["launches"] for s, e in ev)
            res = dict(us=statistics.median(per), p20_us=quantile(per, 0.2), p80_us=quantile(per, 0.8),
                       replays=samples, launches_per_replay=p["launches"], copies=p["copies"], timing=p["mode"])
            if p["mode"] == "eager":
                res["capture_error"] = "; ".join(p["capture_errors"])
            out.append(res)
        for p in preps:
            p["graph"] = p["run"] = p["fns"] = None
        gc.collect()
        return out

    def measure(self, fns, context=None):
        """One row: prepare() then sample() of it alone."""
        return self.sample([self.prepare(fns, context)])[0]

    def time_rows(self, preps, derive):
        """The rows of one workload: preps is [(row, prepare() handle, launch function for the do_bench-style number
        or None)]. Their replays are timed interleaved (sample()) into each row, derive(row) adds the row's units,
        then each row with a launch function gets measure_flush(). A failure is written into the rows it hit."""
        try:
            for (r, _, _), res in zip(preps, self.sample([pr for _, pr, _ in preps]) if preps else []):
                r.update(res)
                derive(r)
        except Exception as e:
            for r, _, _ in preps:
                r["error"] = f"timing failed: {err_text(e)}"
        for r, _, fn in preps:
            if fn is not None and "us" in r:
                try:
                    r.update(self.measure_flush(fn))
                except Exception as e:
                    r["error"] = f"do_bench-style timing failed: {err_text(e)}"

    def measure_flush(self, fn):
        """do_bench-style time of one call (triton.testing.do_bench's method): per rep, zero a 256 MB buffer (L2
        flush; the CPU enqueues the call while the GPU zeroes, so host overhead up to the zeroing's ~90 us is hidden;
        with flush_sleep_cycles the GPU also spins that long after it, hiding more), record an event, call fn once,
        record an event; median over self.flush_reps reps. A call whose host side outlasts the GPU's head start (or
        synchronizes) is timed with its host overhead. Returns {"flush_us", "flush_p20_us", "flush_p80_us",
        "flush_reps", "flush_host_us" (median host time of one fn call, us)}."""
        if self._flush_buf is None:
            self._flush_buf = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        n = self.flush_reps
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        host = []
        for i in range(n):
            self._flush_buf.zero_()
            if self.flush_sleep_cycles:
                torch.cuda._sleep(self.flush_sleep_cycles)
            starts[i].record()
            t0 = time.perf_counter()
            fn()
            host.append((time.perf_counter() - t0) * 1e6)
            ends[i].record()
        torch.cuda.synchronize()
        per = sorted(st.elapsed_time(en) * 1e3 for st, en in zip(starts, ends))
        return dict(flush_us=statistics.median(per), flush_p20_us=quantile(per, 0.2), flush_p80_us=quantile(per, 0.8),
                    flush_reps=n, flush_host_us=statistics.median(host))


# ---------------------------------------------------------------------------------------------------------------
# References (float64, on the GPU)
# ---------------------------------------------------------------------------------------------------------------
def attention_ref_rows(q, k, v, rows, causal, scale=None):
    """float64 attention for the query rows `rows` (a CUDA long tensor) of q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D];
    GQA: query head h reads kv head h // (Hq / Hkv); causal bottom-right aligned (key j visible to query i iff
    j <= i + Sk - Sq). Returns [B, len(rows), Hq, D] float64."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    g = hq // hkv
    r = rows.numel()
    scale = scale if scale is not None else 1.0 / math.sqrt(d)
    outs = []
    for bi in range(b):
        qq = q[bi, rows].double().reshape(r, hkv, g, d)
        kk = k[bi].double()
        vv = v[bi].double()
        s = torch.einsum("rhgd,shd->hgrs", qq, kk) * scale  # [Hkv, G, r, Sk]
        if causal:
            hidden = torch.arange(sk, device=q.device)[None, :] > (rows + (sk - sq))[:, None]  # [r, Sk]
            s = s.masked_fill(hidden, float("-inf"))
        p = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)  # a row seeing no key gives 0 (kerntune's rule)
        outs.append(torch.einsum("hgrs,shd->rhgd", p, vv).reshape(r, hq, d))
        del s, p
    return torch.stack(outs)


def sample_rows(s, device, seed):
    """Query rows checked: the first 16, the last 32 and up to 48 random others (all rows when S <= 96)."""
    if s <= 96:
        return torch.arange(s, device=device)
    gen = torch.Generator().manual_seed(seed)
    pick = set(range(16)) | set(range(s - 32, s))
    pick |= set(torch.randint(16, s - 32, (48,), generator=gen).tolist())
    return torch.tensor(sorted(pick), device=device, dtype=torch.long)


def rope_ref(t, positions, theta):
    """Rotate-half RoPE (Llama / Qwen2, HF transformers apply_rotary_pos_emb): pairs (i, i + D/2) rotated by
    angle pos * theta^(-2i/D); inverse frequencies and angles in float64. t [M, H, D]."""
    d = t.shape[-1]
    half = d // 2
    inv_freq = 1.0 / (theta ** (torch.arange(half, dtype=torch.float64, device=t.device) * 2.0 / d))
    ang = positions.to(torch.float64)[:, None] * inv_freq[None, :]  # [M, D/2]
    cos = torch.cos(ang).to(t.dtype)[:, None, :]
    sin = torch.sin(ang).to(t.dtype)[:, None, :]
    x1, x2 = t[..., :half], t[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


# ---------------------------------------------------------------------------------------------------------------
# kerntune helpers
# ---------------------------------------------------------------------------------------------------------------
class Ctx:
    def __init__(self):
        self.kt = None
        self.rt = None
        self.kt_error = None  # why there is no runtime (every kerntune row then carries it)
        self.version = "unknown"


def kerntune_version(kt):
    """libkerntune's version (kt.version()), plus the Python package's (kt.__version__) when it differs."""
    lib = None
    try:
        lib = str(kt.version())
    except Exception as e:
        lib = f"unknown ({err_text(e)})"
    pkg = getattr(kt, "__version__", None)
    return lib if not pkg or pkg == lib else f"{lib} (python package {pkg})"


def quantize(kt, w, fmt):
    """kt.quantize on the CPU float32 weight (falls back to a CUDA copy if the package wants one)."""
    try:
        return kt.quantize(w, fmt)
    except Exception as e_cpu:
        try:
            return kt.quantize(w.cuda(), fmt)
        except Exception:
            raise e_cpu


def packed_bytes(pw):
    return tensor_bytes(*(getattr(pw, a, None) for a in ("data", "scales", "zeros")))


def packed_cuda_copies(pw, count):
    """`count` independent device copies of a PackedWeight. pw.to("cuda") is assumed to behave like torch's
    .to (a new object with new device tensors); if it hands back shared storage, the copies are made by cloning
    .data/.scales/.zeros of a shallow copy. Returns (copies, note)."""
    copies = []
    for _ in range(count):
        c = pw.to("cuda")
        copies.append(c if c is not None else pw)
    ptrs = {c.data.data_ptr() for c in copies}
    if len(ptrs) == count:
        return copies, None
    try:
        base = copies[0]
        out = [base]
        for _ in range(count - 1):
            c = copy.copy(base)
            for a in ("data", "scales", "zeros"):
                t = getattr(base, a, None)
                if t is not None:
                    setattr(c, a, t.clone())
            out.append(c)
        if len({c.data.data_ptr() for c in out}) == count:
            return out, None
    except Exception as e:
        return [copies[0]], f"weight not rotated (could not copy the PackedWeight: {err_text(e)}): warm L2"
    return [copies[0]], "weight not rotated (PackedWeight copies share storage): warm L2"


# ---------------------------------------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------------------------------------
def sdpa_backends():
    from torch.nn.attention import SDPBackend
    return (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION))


#: The dense matmul whose TFLOP/s is the prefill rows' "peak": torch.matmul of two [MATMUL_PEAK_N]^2 matrices.
MATMUL_PEAK_N = 8192


def prefill_peak_dtypes(cfgs):
    """The dtypes of the prefill rows of these shapes files (those with attention_prefill workloads), in order."""
    return list(dict.fromkeys(d for c in cfgs if (c.get("workloads") or {}).get("attention_prefill")
                              for d in c.get("dtypes", ["bf16", "fp16"])))


def run_matmul_peak(timer, l2, dtypes, rows):
    """The dense-matmul peak of this GPU, once per dtype: torch.matmul(a, b, out=c) of two [N, N] matrices
    (N = MATMUL_PEAK_N, random normal data, the output preallocated so that the timed call allocates nothing), timed
    with timer.measure() over rotated input copies exactly as the attention rows are. TFLOP/s = 2 * N^3 / time.
    Appends (and returns) one row per dtype: section "prefill", impl "matmul_peak"; a failure is a row with "error"
    (the prefill rows of that dtype then carry no peak_frac)."""
    n = MATMUL_PEAK_N
    dev = "cuda"
    flops = 2.0 * n * n * n
    out_rows = []
    for di, dname in enumerate(dtypes):
        r = dict(section="prefill", impl="matmul_peak", dtype=dname, m=n, n=n, k=n, flops=flops)
        a = b = c = fns = None
        try:
            dt = dtype_of(dname)
            elt = torch.finfo(dt).bits // 8
            cnt = n_copies(2 * n * n * elt, l2)
            torch.manual_seed(5000 + di)
            a = [torch.randn(n, n, device=dev, dtype=dt) for _ in range(cnt)]
            b = [torch.randn(n, n, device=dev, dtype=dt) for _ in range(cnt)]
            c = torch.empty(n, n, device=dev, dtype=dt)
            torch.matmul(a[0], b[0], out=c)
            torch.cuda.synchronize()
            rr = torch.arange(0, n, n // 64, device=dev)  # 64 rows of the output against float64
            r["rel_err"] = rel_err(c[rr], a[0][rr].double() @ b[0].double())
            fns = [(lambda i=i: torch.matmul(a[i], b[i], out=c)) for i in range(cnt)]
            r.update(timer.measure(fns))
            r["tflops"] = flops / (r["us"] * 1e-6) / 1e12
        except Exception as e:
            r["error"] = err_text(e)
        out_rows.append(r)
        log(f"  .. matmul peak {dname} [{n} x {n}] x [{n} x {n}]: "
            + (f"{r['us']:.1f} us, {r['tflops']:.1f} TFLOP/s" if "us" in r else f"FAILED {short(r.get('error'), 200)}")
            + eager_tag(r))
        a = b = c = fns = None
        gc.collect()
        torch.cuda.empty_cache()
    rows.extend(out_rows)
    return out_rows


def peak_tflops(peaks):
    """{dtype: TFLOP/s} of the measured matmul_peak rows (failed ones left out)."""
    return {r["dtype"]: r["tflops"] for r in peaks or () if r.get("impl") == "matmul_peak" and r.get("tflops")}


def run_prefill(ctx, cfg, timer, l2, rows, table=True, peaks=None):
    """peaks: the run's matmul_peak rows (run_matmul_peak): each timed row gets peak_frac = its TFLOP/s / the peak of
    its dtype, and the table (table=True) shows them. None: no peak_frac, the table as it was."""
    from torch.nn.attention import sdpa_kernel
    peak = peak_tflops(peaks)
    hq, hkv, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    dev = "cuda"
    out_rows = []
    for dname in cfg.get("dtypes", ["bf16", "fp16"]):
        dt = dtype_of(dname)
        for wi, w in enumerate(cfg["workloads"].get("attention_prefill", [])):
            b, s = int(w["batch"]), int(w["seqlen"])
            sk = int(w.get("seqlen_k", s))
            causal = bool(w.get("causal", True))
            flops = 4.0 * b * hq * s * sk * d / (2.0 if causal else 1.0)
            base = dict(section="prefill", model=cfg.get("model"), dtype=dname, batch=b, seqlen=s, seqlen_k=sk,
                        causal=causal, flops=flops, num_heads=hq, num_kv_heads=hkv, head_dim=d)
            elt = torch.finfo(dt).bits // 8
            set_bytes = (b * s * hq * d + 2 * b * sk * hkv * d) * elt
            cnt = n_copies(set_bytes, l2)
            tag = f"prefill {dname} B={b} S={s}{' causal' if causal else ''}"
            try:
                torch.manual_seed(1000 + wi)
                qs = [torch.randn(b, s, hq, d, device=dev, dtype=dt) for _ in range(cnt)]
                ks = [torch.randn(b, sk, hkv, d, device=dev, dtype=dt) for _ in range(cnt)]
                vs = [torch.randn(b, sk, hkv, d, device=dev, dtype=dt) for _ in range(cnt)]
                o = torch.empty_like(qs[0])
                ridx = sample_rows(s, dev, seed=wi)
                ref = attention_ref_rows(qs[0], ks[0], vs[0], ridx, causal)
            except Exception as e:  # e.g. out of memory: every impl of this workload gets the error
                msg = f"setup failed: {err_text(e)}"
                for impl in ("kerntune", "sdpa_flash", "sdpa_cudnn"):
                    out_rows.append(dict(base, impl=impl, error=msg))
                log(f"  .. {tag}: {msg}")
                qs = ks = vs = o = ref = None
                gc.collect()
                torch.cuda.empty_cache()
                continue
            # kerntune and the anchors: each checked, then prepared; their replays are timed interleaved.
            row_rows, preps = [], []
            r = dict(base, impl="kerntune", tol=ATTN_TOL[dname])
            if ctx.rt is None:
                r["error"] = ctx.kt_error
            else:
                try:
                    r["explain"] = ctx.rt.explain_attention(qs[0], ks[0], causal=causal)
                    o.fill_(float("nan"))
                    ctx.rt.attention(qs[0], ks[0], vs[0], causal=causal, out=o)
                    torch.cuda.synchronize()
                    e = rel_err(o[:, ridx], ref)
                    r["rel_err"] = e
                    if not math.isfinite(e) or e > ATTN_TOL[dname]:
                        r["error"] = f"wrong result: rel err {e:.3g} > tol {ATTN_TOL[dname]:g} (not timed)"
                    else:
                        fns = [(lambda i=i: ctx.rt.attention(qs[i], ks[i], vs[i], causal=causal, out=o))
                               for i in range(cnt)]
                        preps.append((r, timer.prepare(fns), None))
                except Exception as e:
                    r["error"] = err_text(e)
                    r["traceback"] = traceback.format_exc(limit=3)
            row_rows.append(r)
            for impl, backend in sdpa_backends():
                r = dict(base, impl=impl)
                try:
                    fns = [(lambda i=i: F.scaled_dot_product_attention(
                        qs[i].transpose(1, 2), ks[i].transpose(1, 2), vs[i].transpose(1, 2),
                        is_causal=causal, enable_gqa=True)) for i in range(cnt)]
                    with sdpa_kernel([backend]):
                        out = fns[0]()
                        torch.cuda.synchronize()
                        r["rel_err"] = rel_err(out.transpose(1, 2)[:, ridx], ref)
                        del out
                    preps.append((r, timer.prepare(fns, context=lambda b=backend: sdpa_kernel([b])), None))
                except Exception as e:  # a backend refusing the shape is data, not a crash
                    r["error"] = err_text(e)
                row_rows.append(r)
            def derive(r):
                r["tflops"] = flops / (r["us"] * 1e-6) / 1e12
                if dname in peak:
                    r["peak_frac"] = r["tflops"] / peak[dname]

            timer.time_rows(preps, derive)
            preps = None
            for r in row_rows:
                extra = (f", rel err {r['rel_err']:.2e}" if r["impl"] == "kerntune" and "rel_err" in r else "")
                log(f"  .. {tag} {r['impl']}: " + (f"{r['us']:.1f} us, {r['tflops']:.1f} TFLOP/s{extra}"
                                                   if "us" in r else f"FAILED {short(r.get('error'), 200)}")
                    + eager_tag(r))
            out_rows.extend(row_rows)
            qs = ks = vs = o = ref = None
            gc.collect()
            torch.cuda.empty_cache()
    rows.extend(out_rows)
    if table:
        print_prefill_table((peaks or []) + out_rows)


#: The decode workloads benchmarked (batch, kv_len, q_len), each contiguous and paged (DECODE_PAGE tokens per page):
#: the issue's speed targets. The shapes file's attention_decode entries are a tuning grid; with --decode-all every
#: expanded entry is a row instead.
DECODE_POINTS = ((1, 4096, 1), (16, 4096, 1), (64, 2048, 1), (1, 32768, 1), (16, 4096, 4), (16, 4096, 8))
DECODE_PAGE = 64


def decode_workloads(cfg, every=False):
    """The attention_decode workloads of a shapes file as (batch, kv_len, q_len, page_size, causal) tuples, entries
    expanded as tuner/shapes_file.h says (batch / kv_len may be lists: batch outer); without `every`, the
    DECODE_POINTS, contiguous and paged, in that order (the file's entries do not restrict them)."""
    if not every:
        return [(b, kv, q, page, True) for (b, kv, q) in DECODE_POINTS for page in (0, DECODE_PAGE)]
    out = []
    for w in cfg["workloads"].get("attention_decode", []):
        bs = w["batch"] if isinstance(w["batch"], list) else [w["batch"]]
        kvs = w["kv_len"] if isinstance(w["kv_len"], list) else [w["kv_len"]]
        for b in bs:
            for kv in kvs:
                out.append((int(b), int(kv), int(w.get("q_len", 1)), int(w.get("page_size", 0)),
                            bool(w.get("causal", True))))
    return out


READ_CHUNK_BYTES = 16384  # bytes one program of the read-ceiling kernel reads (4 loads of 4 KB in flight)
_READ_KERNEL = None


def read_ceiling_fn(buf, sink):
    """A pure-read kernel over buf's bytes, for the read ceiling: a Triton program per READ_CHUNK_BYTES of buf (viewed
    as int32), four 4 KB loads in flight per program (16-byte vector loads), their int32 sum (wrapping) stored to
    sink[program] so that the loads are not dead. Returns (launch function, method name). Without Triton, torch.sum
    over the bytes as fp32 (a reduction kernel: a lower ceiling), named "torch.sum"."""
    global _READ_KERNEL
    words = buf.view(-1).view(torch.int32)
    try:
        import triton
        import triton.language as tl
        if _READ_KERNEL is None:
            @triton.jit
            def _read_sum(x, out, n, BLOCK: tl.constexpr, ITERS: tl.constexpr):
                pid = tl.program_id(0)
                base = pid.to(tl.int64) * (BLOCK * ITERS)
                acc = tl.zeros([BLOCK], dtype=tl.int32)
                for i in tl.static_range(ITERS):
                    offs = base + i * BLOCK + tl.arange(0, BLOCK)
                    acc += tl.load(x + offs, mask=offs < n, other=0, cache_modifier=".cg")
                tl.store(out + pid, tl.sum(acc, 0))
            _READ_KERNEL = _read_sum
        n = words.numel()
        block, iters = 1024, READ_CHUNK_BYTES // 4096
        grid = (triton.cdiv(n, block * iters),)
        if sink.numel() < grid[0]:
            raise ValueError(f"read ceiling: sink holds {sink.numel()} words, the grid needs {grid[0]}")
        kern = _READ_KERNEL
        return (lambda: kern[grid](words, sink, n, BLOCK=block, ITERS=iters, num_warps=4)), "triton"
    except ImportError:
        out = sink[:1].view(torch.float32)
        return (lambda: torch.sum(buf.view(-1), 0, dtype=torch.float32, out=out[0])), "torch.sum"


def paged_copy(k, v, page, gen):
    """K/V [B, S, Hkv, D] as a paged cache: pages [B * S / page, page, Hkv, D] in a shuffled order and the block
    table [B, S / page] int32 that gathers them back (same values, so the contiguous reference holds)."""
    b, s, hkv, d = k.shape
    per = s // page
    perm = torch.randperm(b * per, generator=gen).to(k.device)
    table = perm.view(b, per).to(torch.int32)
    kp = torch.empty((b * per, page, hkv, d), dtype=k.dtype, device=k.device)
    vp = torch.empty_like(kp)
    kp[perm] = k.reshape(b * per, page, hkv, d)
    vp[perm] = v.reshape(b * per, page, hkv, d)
    return kp, vp, table


def run_decode(ctx, cfg, timer, l2, rows, every=False, table=True):
    from torch.nn.attention import sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right
    hq, hkv, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    dev = "cuda"
    out_rows = []
    for dname in cfg.get("dtypes", ["bf16", "fp16"]):
        dt = dtype_of(dname)
        elt = torch.finfo(dt).bits // 8
        for wi, (b, kv, ql, page, causal) in enumerate(decode_workloads(cfg, every)):
            kv_bytes = 2 * b * kv * hkv * d * elt
            nbytes = kv_bytes + 2 * b * ql * hq * d * elt
            layout = f"paged{page}" if page else "contiguous"
            base = dict(section="decode", model=cfg.get("model"), dtype=dname, batch=b, kv_len=kv, q_len=ql,
                        page_size=page, layout=layout, causal=causal, bytes=nbytes, num_heads=hq, num_kv_heads=hkv,
                        head_dim=d)
            tag = f"decode {dname} B={b} kv={kv} q_len={ql} {layout}"
            cnt = n_copies(nbytes, l2)
            impls = ("kerntune", "read_ceiling") + (() if page else tuple(i for i, _ in sdpa_backends()))
            try:
                torch.manual_seed(2000 + wi)
                gen = torch.Generator().manual_seed(3000 + wi)
                qs = [torch.randn(b, ql, hq, d, device=dev, dtype=dt) for _ in range(cnt)]
                # K and V of one copy in one buffer [2, B, kv, Hkv, D]: the read ceiling reads exactly those bytes.
                kvs = [torch.randn(2, b, kv, hkv, d, device=dev, dtype=dt) for _ in range(cnt)]
                ks, vs = [t[0] for t in kvs], [t[1] for t in kvs]
                pages = [paged_copy(ks[i], vs[i], page, gen) for i in range(cnt)] if page else None
                lens = torch.full((b,), kv, dtype=torch.int32, device=dev)
                o = torch.empty_like(qs[0])
                ref = attention_ref_rows(qs[0], ks[0], vs[0], torch.arange(ql, device=dev), causal)
            except Exception as e:
                msg = f"setup failed: {err_text(e)}"
                for impl in impls:
                    out_rows.append(dict(base, impl=impl, error=msg))
                log(f"  .. {tag}: {msg}")
                qs = kvs = ks = vs = pages = ref = None
                gc.collect()
                torch.cuda.empty_cache()
                continue
            # kerntune, the read ceiling and the anchors: each checked, then prepared; their replays are timed
            # interleaved, then the do_bench-style numbers one row after another.
            row_rows, preps = [], []  # preps: (row, prepared handle, launch function for the do_bench-style number)
            r = dict(base, impl="kerntune", tol=ATTN_TOL[dname])
            if ctx.rt is None:
                r["error"] = ctx.kt_error
            else:
                try:
                    if page:
                        call = lambda i: ctx.rt.attention_decode(qs[i], pages[i][0], pages[i][1], lens, pages[i][2],
                                                                 causal=causal, max_seqlen_k=kv, out=o)
                    else:
                        call = lambda i: ctx.rt.attention_decode(qs[i], ks[i], vs[i], lens, causal=causal,
                                                                 max_seqlen_k=kv, out=o)
                    prob = dict(dtype=dname, batch=b, q_len=ql, num_heads=hq, num_kv_heads=hkv, head_dim=d, kv_len=kv,
                                kv_layout="paged" if page else "contiguous", page_size=page, causal=causal)
                    r["explain"] = ctx.rt.explain("attention_decode", prob)
                    o.fill_(float("nan"))
                    call(0)
                    torch.cuda.synchronize()
                    e = rel_err(o, ref)
                    r["rel_err"] = e
                    if not math.isfinite(e) or e > ATTN_TOL[dname]:
                        r["error"] = f"wrong result: rel err {e:.3g} > tol {ATTN_TOL[dname]:g} (not timed)"
                    else:
                        fns = [(lambda i=i: call(i)) for i in range(cnt)]
                        preps.append((r, timer.prepare(fns), lambda: call(0)))
                except Exception as e:
                    r["error"] = err_text(e)
                    r["traceback"] = traceback.format_exc(limit=3)
            row_rows.append(r)
            # the read ceiling: a pure-read kernel over the same K and V bytes, timed the same way
            r = dict(base, impl="read_ceiling", bytes=kv_bytes)
            try:
                sink = torch.empty(kv_bytes // READ_CHUNK_BYTES + 1, dtype=torch.int32, device=dev)
                fns = []
                for i in range(cnt):
                    fn, r["method"] = read_ceiling_fn(kvs[i], sink)
                    fns.append(fn)
                fns[0]()
                torch.cuda.synchronize()
                preps.append((r, timer.prepare(fns), None))
            except Exception as e:
                r["error"] = err_text(e)
            row_rows.append(r)
            # anchors (contiguous layouts only: SDPA has no paged cache; paged rows compare with the contiguous ones)
            for impl, backend in (() if page else sdpa_backends()):
                r = dict(base, impl=impl)
                try:
                    # the equivalent mask: the new tokens causal among themselves, bottom-right aligned
                    mask = causal_lower_right(ql, kv) if (causal and ql > 1) else None
                    fns = [(lambda i=i: F.scaled_dot_product_attention(
                        qs[i].transpose(1, 2), ks[i].transpose(1, 2), vs[i].transpose(1, 2),
                        attn_mask=mask, enable_gqa=True)) for i in range(cnt)]
                    with sdpa_kernel([backend]):
                        out = fns[0]()
                        torch.cuda.synchronize()
                        r["rel_err"] = rel_err(out.transpose(1, 2), ref)
                        del out
                    ctxf = lambda b_=backend: sdpa_kernel([b_])
                    def fl(f=fns[0], c=ctxf):
                        with c():
                            f()

                    preps.append((r, timer.prepare(fns, context=ctxf), fl))
                except Exception as e:
                    r["error"] = err_text(e)
                row_rows.append(r)
            timer.time_rows(preps, lambda r: r.update(gbps=r["bytes"] / (r["us"] * 1e-6) / 1e9))
            preps = None
            for r in row_rows:
                extra = f", rel err {r['rel_err']:.2e}" if r["impl"] == "kerntune" and "rel_err" in r else ""
                log(f"  .. {tag} {r['impl']}: " + (f"{r['us']:.1f} us, {r['gbps']:.0f} GB/s{extra}" if "us" in r
                                                   else f"FAILED {short(r.get('error'), 200)}") + eager_tag(r))
            out_rows.extend(row_rows)
            qs = kvs = ks = vs = pages = ref = o = None
            gc.collect()
            torch.cuda.empty_cache()
    rows.extend(out_rows)
    if table:
        print_decode_table(out_rows)


def run_qkv(ctx, cfg, timer, l2, rows, quant_act, flush_max_m=16, table=True):
    """The projection rows, one M at a time: the anchors' and every format's kerntune rows of that M are checked, then
    prepared, and their replays timed interleaved (Timer.sample), so that all of them see the same SM clocks; the
    do_bench-style numbers (M <= flush_max_m) follow, one row after another."""
    from kerntune import weight_element_dtype  # the package is pure Python: importable without the library
    hidden, hq, hkv, d = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    has_bias = bool(cfg.get("qkv_bias", False))
    theta = cfg.get("rope_theta")
    theta = float(theta) if theta is not None else None
    nq, nkv = hq * d, hkv * d
    n = nq + 2 * nkv
    kdim = hidden
    spec = cfg["workloads"].get("qkv_proj", {})
    tokens = [int(m) for m in spec.get("tokens", [])]
    formats = list(spec.get("formats", []))
    dev = "cuda"
    out_rows = []
    base0 = dict(section="qkv", model=cfg.get("model"), n=n, k=kdim, num_heads=hq, num_kv_heads=hkv, head_dim=d,
                 bias=has_bias)

    gen = torch.Generator().manual_seed(0)
    w32 = torch.randn(n, kdim, generator=gen) * 0.02  # CPU float32, rows: q heads, k heads, v heads
    b32 = torch.randn(n, generator=gen) * 0.1

    def make_x(m, dt):
        g = torch.Generator(device=dev).manual_seed(10_000 + m)
        return torch.randn(m, kdim, device=dev, generator=g).to(dt)

    # ---- every implementation's inputs, once: the anchors' 16-bit weights, tinygemm's, each format's packed copies
    dense = {}  # dtype name -> (weight copies, bias copies, (q, k, v) weight views, (q, k, v) bias views) or error
    for dname in ("fp16", "bf16"):
        dt = dtype_of(dname)
        try:
            wd = w32.to(dev, dt)
            cnt = n_copies(tensor_bytes(wd), l2)
            ws = [wd.clone() for _ in range(cnt)]
            bs = [b32.to(dev, dt) if has_bias else None for _ in range(cnt)]
            w3 = [(w_[:nq], w_[nq:nq + nkv], w_[nq + nkv:]) for w_ in ws]
            b3 = [((b_[:nq], b_[nq:nq + nkv], b_[nq + nkv:]) if b_ is not None else (None, None, None)) for b_ in bs]
            del wd
            dense[dname] = (ws, bs, w3, b3)
        except Exception as e:
            dense[dname] = f"setup failed: {err_text(e)}"
    # tinygemm int4 (bf16, group 128, no bias): the calls of bench/qkv_anchors.py
    tiny = None
    try:
        w_u8 = torch.randint(0, 256, (n, kdim // 2), dtype=torch.uint8, device=dev)
        tp0 = torch.ops.aten._convert_weight_to_int4pack(w_u8, 8)
        sz0 = torch.randn(kdim // 128, n, 2, device=dev, dtype=torch.bfloat16) * 0.01
        cnt = n_copies(tensor_bytes(tp0, sz0), l2)
        tiny = ([tp0.clone() for _ in range(cnt)], [sz0.clone() for _ in range(cnt)])
        del w_u8, tp0, sz0
    except Exception as e:
        tiny = f"tinygemm int4 unavailable: {err_text(e)}"
    packed = {}  # format -> dict(aname, tol, copies, wbytes, note, quant_err, wdq, bias_d, b64) or dict(error)
    for fmt in formats:
        # 16-bit weights run in their own dtype (the K-blocked fp16_kb64 / bf16_kb64 too); the others in quant_act
        aname = weight_element_dtype(fmt) or quant_act
        st = dict(aname=aname, tol=QKV_TOL[aname])
        if ctx.rt is None:
            st["error"] = ctx.kt_error
        else:
            try:
                pw = quantize(ctx.kt, w32, fmt)
                wdq = torch.as_tensor(pw.dequantize()).to(torch.float64)
                if tuple(wdq.shape) != (n, kdim):
                    raise RuntimeError(f"dequantize() gave shape {tuple(wdq.shape)}, expected {(n, kdim)}")
                st["quant_err"] = rel_err(wdq, w32)
                st["wdq"] = wdq.to(dev)
                copies, st["note"] = packed_cuda_copies(pw, n_copies(packed_bytes(pw), l2))
                st["copies"], st["wbytes"] = copies, packed_bytes(copies[0])
                st["bias_d"] = b32.to(dev, dtype_of(aname)) if has_bias else None
                st["b64"] = b32.to(dev, torch.float64) if has_bias else None
                del pw, wdq
            except Exception as e:
                st = dict(st, error=f"quantize/setup failed: {err_text(e)}")
        packed[fmt] = st

    def anchor_fns(impl, dname, x):
        if impl == "tinygemm_int4":
            tps, szs = tiny
            return [(lambda i=i: torch.ops.aten._weight_int4pack_mm(x, tps[i], 128, szs[i])) for i in range(len(tps))]
        ws, bs, w3, b3 = dense[dname]
        if impl == "cublas_fused":
            return [(lambda i=i: F.linear(x, ws[i], bs[i])) for i in range(len(ws))]
        return [(lambda i=i: (F.linear(x, w3[i][0], b3[i][0]), F.linear(x, w3[i][1], b3[i][1]),
                              F.linear(x, w3[i][2], b3[i][2]))) for i in range(len(ws))]

    def kerntune_fns(fmt, m, x, r):
        """Checks kerntune's output for format fmt at M = m against the float64 reference (outputs poisoned first) and
        returns its launch functions, or None with r["error"] set."""
        st = packed[fmt]
        if "error" in st:
            r["error"] = st["error"]
            return None
        r["weight_bytes"] = st["wbytes"]
        if st["note"]:
            r["note"] = st["note"]
        dt = dtype_of(st["aname"])
        pos = torch.arange(m, dtype=torch.int32, device=dev)
        qo = torch.empty(m, hq, d, device=dev, dtype=dt)
        ko = torch.empty(m, hkv, d, device=dev, dtype=dt)
        vo = torch.empty(m, hkv, d, device=dev, dtype=dt)
        copies = st["copies"]
        kw = dict(bias=st["bias_d"], positions=pos, num_heads=hq, num_kv_heads=hkv, head_dim=d, rope_theta=theta)
        r["explain"] = ctx.rt.explain_qkv(x, copies[0], num_heads=hq, num_kv_heads=hkv, head_dim=d,
                                          has_bias=has_bias, rope=theta is not None)
        for t in (qo, ko, vo):
            t.fill_(float("nan"))
        ctx.rt.qkv_proj(x, copies[0], out=(qo, ko, vo), **kw)
        torch.cuda.synchronize()
        y = x.double() @ st["wdq"].t()  # float64 reference with the dequantized weight
        if st["b64"] is not None:
            y += st["b64"]
        rq = y[:, :nq].reshape(m, hq, d)
        rk = y[:, nq:nq + nkv].reshape(m, hkv, d)
        rv = y[:, nq + nkv:].reshape(m, hkv, d)
        if theta is not None:
            rq, rk = rope_ref(rq, pos, theta), rope_ref(rk, pos, theta)
        errs = dict(q=rel_err(qo, rq), k=rel_err(ko, rk), v=rel_err(vo, rv))
        del y, rq, rk, rv
        e = max(errs.values())
        r["rel_err"], r["rel_err_qkv"] = e, errs
        if not math.isfinite(e) or e > st["tol"]:
            r["error"] = (f"wrong result: rel err q {errs['q']:.3g} k {errs['k']:.3g} v {errs['v']:.3g}"
                          f" > tol {st['tol']:g} (not timed)")
            return None
        return [(lambda i=i: ctx.rt.qkv_proj(x, copies[i], out=(qo, ko, vo), **kw)) for i in range(len(copies))]

    for m in tokens:
        xs = {dn: make_x(m, dtype_of(dn)) for dn in ("fp16", "bf16")}
        row_rows, preps = [], []  # preps: (row, prepared handle, first launch function)
        jobs = [(impl, dn) for dn in ("fp16", "bf16") for impl in ("cublas_fused", "linear_x3")]
        jobs += [("tinygemm_int4", "bf16")] + [("kerntune", fmt) for fmt in formats]
        for impl, what in jobs:
            if impl == "kerntune":
                st = packed[what]
                r = dict(base0, impl=impl, format=what, dtype=st["aname"], m=m, rope=theta is not None, tol=st["tol"])
                if "quant_err" in st:
                    r["weight_quant_rel_err"] = st["quant_err"]
                setup = None
            elif impl == "tinygemm_int4":
                r = dict(base0, impl=impl, format="int4", dtype="bf16", m=m, bias=False,
                         weight_bytes=n * kdim // 2 + n * (kdim // 128) * 4)
                setup = tiny if isinstance(tiny, str) else None
            else:
                r = dict(base0, impl=impl, format=what, dtype=what, m=m, weight_bytes=n * kdim * 2)
                setup = dense[what] if isinstance(dense[what], str) else None
            row_rows.append(r)
            if setup:
                r["error"] = setup
                continue
            try:
                x = xs[r["dtype"]]
                fns = kerntune_fns(what, m, x, r) if impl == "kerntune" else anchor_fns(impl, what, x)
                if fns is not None:
                    preps.append((r, timer.prepare(fns), fns[0] if m <= flush_max_m else None))
            except Exception as e:
                r["error"] = err_text(e)
                if impl == "kerntune":
                    r["traceback"] = traceback.format_exc(limit=3)
        timer.time_rows(preps, lambda r: r.update(tflops=2.0 * m * n * kdim / (r["us"] * 1e-6) / 1e12,
                                                  weight_gbps=r["weight_bytes"] / (r["us"] * 1e-6) / 1e9))
        preps = None
        for r in row_rows:
            name = f"{r['impl']} {r['format']} ({r['dtype']})"
            extra = f", rel err {r['rel_err']:.2e}" if r["impl"] == "kerntune" and "rel_err" in r else ""
            log(f"  .. qkv M={m} {name}: " + (f"{r['us']:.1f} us{extra}" if "us" in r
                                              else f"FAILED {short(r.get('error'), 200)}") + eager_tag(r))
        out_rows.extend(row_rows)
        xs = row_rows = None
        gc.collect()
        torch.cuda.empty_cache()
    dense = tiny = packed = None
    gc.collect()
    torch.cuda.empty_cache()
    # the rows as tables read them: the anchors, then kerntune's format by format (each in M order)
    order = {f: i + 1 for i, f in enumerate(formats)}
    out_rows.sort(key=lambda r: order.get(r["format"], 0) if r["impl"] == "kerntune" else 0)
    rows.extend(out_rows)
    if table:
        print_qkv_table(out_rows)


# ---------------------------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------------------------
def eager_tag(r):
    return f"  [timed eagerly, launch overhead included: {short(r.get('capture_error'), 160)}]" \
        if r.get("timing") == "eager" else ""


def _fmt(v, spec, width):
    return f"{v:{width}{spec}}" if isinstance(v, (int, float)) else f"{'-':>{width}}"


def _ratio(num, den):
    return num / den if num and den else None


def _rfmt(r, width):
    return f"{r:{width - 1}.2f}x" if r is not None else f"{'-':>{width}}"


# The rows' model / head geometry and the "heads" labels: one definition, shared with the README report.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_report import geo_key, heads_labels  # noqa: E402


def _heads_col(heads):
    """(header cell, cell function) of the optional "heads" column: empty strings when heads is None."""
    if not heads:
        return "", lambda g: ""
    w = max([len("heads")] + [len(v) for v in heads.values()])
    return f"{'heads':{w}} ", lambda g: f"{heads[g]:{w}} "


def print_errors(rows, limit=600):
    """Every error of the section, each distinct text once with the rows it hit (the first `limit` characters;
    the JSON keeps the full text and, for kerntune, a short traceback). Rows of several models name theirs."""
    by_text = {}
    for r in rows:
        if r.get("error"):
            by_text.setdefault(r["error"], []).append(r)
    if not by_text:
        return
    keys = ("impl", "dtype", "format", "batch", "seqlen", "kv_len", "m")
    if heads_labels([r for r in rows if r.get("impl") != "matmul_peak"]):
        keys = ("model",) + keys
    log("errors:")
    for text, rs in by_text.items():
        where = ", ".join(" ".join(f"{k}={r[k]}" for k in keys if k in r) for r in rs)
        body = text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars, full text in the JSON)"
        log(f"  [{where}]\n    {body}")
        if rs[0].get("traceback"):
            log("    " + rs[0]["traceback"].rstrip().replace("\n", "\n    "))


def print_prefill_table(rows):
    """One line per workload; a leading "heads" column (Hq/Hkv) when the rows are of more than one geometry. With
    matmul_peak rows among them: a line with the measured peak per dtype above the table and an "of_peak" column
    (kerntune TFLOP/s / that peak)."""
    peaks = [r for r in rows if r.get("impl") == "matmul_peak"]
    body = [r for r in rows if r.get("impl") != "matmul_peak"]
    head, col = _heads_col(heads_labels(body))
    idx = {}
    for r in body:
        idx.setdefault((geo_key(r), r["dtype"], r["batch"], r["seqlen"], r["causal"]), {})[r["impl"]] = r
    log("\nattention prefill (TFLOP/s; ratio = kerntune / anchor, > 1 = kerntune faster"
        + ("; of_peak = kerntune / the matmul peak of its dtype)" if peaks else ")"))
    if peaks:
        n = MATMUL_PEAK_N
        log(f"matmul peak (torch.matmul [{n} x {n}] x [{n} x {n}], timed the same way): "
            + ", ".join(f"{r['dtype']} " + (f"{r['tflops']:.1f} TFLOP/s" if r.get("tflops") else "FAILED")
                        for r in peaks))
    pk = f" {'of_peak':>7}" if peaks else ""
    log(f"{head}{'dtype':5} {'B':>3} {'S':>6} {'causal':6} {'kerntune':>9} {'rel_err':>8}{pk} {'flash':>7} {'cudnn':>7}"
        f" {'vs_flash':>8} {'vs_cudnn':>8}  kerntune kernel")
    for (g, dt, b, s, c), by in idx.items():
        kt_, fl, cu = (by.get(k, {}).get("tflops") for k in ("kerntune", "sdpa_flash", "sdpa_cudnn"))
        ktr = by.get("kerntune", {})
        ex = ktr.get("explain") or ""
        pc = f" {_fmt(ktr.get('peak_frac'), '.2f', 7)}" if peaks else ""
        log(f"{col(g)}{dt:5} {b:3} {s:6} {str(c):6} {_fmt(kt_, '.1f', 9)} {_fmt(ktr.get('rel_err'), '.1e', 8)}{pc}"
            f" {_fmt(fl, '.1f', 7)} {_fmt(cu, '.1f', 7)} {_rfmt(_ratio(kt_, fl), 8)} {_rfmt(_ratio(kt_, cu), 8)}"
            f"  {short(ex, 90) if ktr.get('us') else 'FAILED: ' + short(ktr.get('error'), 80)}")
    print_errors(rows)


def print_decode_table(rows):
    head, col = _heads_col(heads_labels(rows))
    idx = {}
    for r in rows:
        idx.setdefault((geo_key(r), r["dtype"], r["batch"], r["kv_len"], r.get("q_len", 1), r.get("page_size", 0)),
                       {})[r["impl"]] = r
    contig = {k[:5]: by for k, by in idx.items() if k[5] == 0}
    log("\nattention decode (us and GB/s = (K+V cache + q + o bytes) / time; ceiling = a pure read of the K+V bytes;"
        " ratio = anchor time / kerntune time, > 1 = kerntune faster; paged rows against the contiguous anchors)")
    log(f"{head}{'dtype':5} {'B':>3} {'kv_len':>7} {'q':>2} {'layout':10} {'MB':>7} {'kerntune':>9} {'GB/s':>6}"
        f" {'%ceil':>6} {'flash_us':>9} {'cudnn_us':>9} {'vs_flash':>8} {'vs_cudnn':>8} {'do_bench':>8}  kerntune kernel")
    for (g, dt, b, kv, ql, page), by in idx.items():
        anchors = contig.get((g, dt, b, kv, ql), {})
        fl, cu = anchors.get("sdpa_flash", {}).get("us"), anchors.get("sdpa_cudnn", {}).get("us")
        ktr, ceil = by.get("kerntune", {}), by.get("read_ceiling", {})
        kt_us = ktr.get("us")
        pct = 100.0 * ktr["gbps"] / ceil["gbps"] if kt_us and ceil.get("gbps") else None
        mb = next(iter(by.values()))["bytes"] / 1e6
        layout = f"paged{page}" if page else "contiguous"
        ex = ktr.get("explain") or ""
        log(f"{col(g)}{dt:5} {b:3} {kv:7} {ql:2} {layout:10} {mb:7.1f} {_fmt(kt_us, '.1f', 9)} {_fmt(ktr.get('gbps'), '.0f', 6)}"
            f" {_fmt(pct, '.0f', 6)} {_fmt(fl, '.1f', 9)} {_fmt(cu, '.1f', 9)} {_rfmt(_ratio(fl, kt_us), 8)}"
            f" {_rfmt(_ratio(cu, kt_us), 8)} {_fmt(ktr.get('flush_us'), '.1f', 8)}"
            f"  {short(ex, 80) if kt_us else 'FAILED: ' + short(ktr.get('error'), 80)}")
    print_errors(rows)


def print_qkv_table(rows):
    """Each kerntune row against the anchors of its model; a leading "heads" column (Hq/Hkv) when the rows are of
    more than one geometry."""
    heads = heads_labels(rows)
    head, col = _heads_col(heads)
    anc = {(geo_key(r), r["impl"], r["dtype"], r["m"]): r for r in rows if r["impl"] != "kerntune"}
    log("\nQ/K/V projection (us per call; ratio = anchor time / kerntune time, > 1 = kerntune faster;"
        " anchors in the kerntune row's activation dtype; kerntune includes bias + RoPE + split, anchors GEMM(+bias))")
    log(f"{head}{'format':9} {'act':4} {'M':>6} {'kerntune':>9} {'rel_err':>8} {'cuBLAS':>8} {'3xlin':>8} {'tinygemm':>9}"
        f" {'vs_cuBLAS':>9} {'vs_3xlin':>8} {'vs_tiny':>8}")
    for r in rows:
        if r["impl"] != "kerntune":
            continue
        us = r.get("us")
        g = geo_key(r)
        cb = anc.get((g, "cublas_fused", r["dtype"], r["m"]), {}).get("us")
        l3 = anc.get((g, "linear_x3", r["dtype"], r["m"]), {}).get("us")
        tg = anc.get((g, "tinygemm_int4", "bf16", r["m"]), {}).get("us")
        log(f"{col(g)}{r['format']:9} {r['dtype']:4} {r['m']:6} {_fmt(us, '.1f', 9)} {_fmt(r.get('rel_err'), '.1e', 8)}"
            f" {_fmt(cb, '.1f', 8)} {_fmt(l3, '.1f', 8)} {_fmt(tg, '.1f', 9)} {_rfmt(_ratio(cb, us), 9)}"
            f" {_rfmt(_ratio(l3, us), 8)} {_rfmt(_ratio(tg, us), 8)}"
            + ("" if us else "  FAILED: " + short(r.get("error"), 80)))
    log("anchors alone (us):")
    gms = [(gk, m) for gk in dict.fromkeys(geo_key(r) for r in rows)
           for m in sorted({r["m"] for r in rows if geo_key(r) == gk})]
    log(f"{head}{'M':>6} {'cuBLAS fp16':>12} {'cuBLAS bf16':>12} {'3xlin fp16':>11} {'3xlin bf16':>11} {'tinygemm':>9}")
    for gk, m in gms:
        g = lambda impl, dt: anc.get((gk, impl, dt, m), {}).get("us")
        log(f"{col(gk)}{m:6} {_fmt(g('cublas_fused', 'fp16'), '.1f', 12)} {_fmt(g('cublas_fused', 'bf16'), '.1f', 12)}"
            f" {_fmt(g('linear_x3', 'fp16'), '.1f', 11)} {_fmt(g('linear_x3', 'bf16'), '.1f', 11)}"
            f" {_fmt(g('tinygemm_int4', 'bf16'), '.1f', 9)}")
    flushed = [r for r in rows if r["impl"] == "kerntune" and r.get("flush_us")]
    if flushed:
        log("\ndo_bench-style (triton.testing.do_bench's method: L2 flushed, one call between events; us; ratio ="
            " anchor / kerntune):")
        log(f"{head}{'format':9} {'act':4} {'M':>6} {'kerntune':>9} {'p80':>6} {'host':>6} {'cuBLAS':>8} {'tinygemm':>9}"
            f" {'vs_cuBLAS':>9} {'vs_tiny':>8}   (host: median host time of one call)")
        for r in flushed:
            us = r["flush_us"]
            g = geo_key(r)
            cb = anc.get((g, "cublas_fused", r["dtype"], r["m"]), {}).get("flush_us")
            tg = anc.get((g, "tinygemm_int4", "bf16", r["m"]), {}).get("flush_us")
            log(f"{col(g)}{r['format']:9} {r['dtype']:4} {r['m']:6} {_fmt(us, '.1f', 9)} {_fmt(r.get('flush_p80_us'), '.1f', 6)}"
                f" {_fmt(r.get('flush_host_us'), '.0f', 6)} {_fmt(cb, '.1f', 8)} {_fmt(tg, '.1f', 9)}"
                f" {_rfmt(_ratio(cb, us), 9)} {_rfmt(_ratio(tg, us), 8)}")
        for gk in dict.fromkeys(geo_key(r) for r in flushed):
            cbf = {m: anc.get((gk, "cublas_fused", "fp16", m), {}).get("flush_us")
                   for m in sorted({r["m"] for r in flushed if geo_key(r) == gk})}
            log((f"{heads[gk]} " if heads else "") + "cuBLAS fp16: "
                + ", ".join(f"M={m} {_fmt(v, '.1f', 0)}" for m, v in cbf.items()))
    print_errors(rows)


# ---------------------------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------------------------
LABEL = {"kerntune": "kerntune", "sdpa_flash": "SDPA flash (FA2)", "sdpa_cudnn": "SDPA cuDNN",
         "cublas_fused": "cuBLAS F.linear", "linear_x3": "3x F.linear", "tinygemm_int4": "tinygemm int4"}
COLOR = {"kerntune": "C0", "sdpa_flash": "C1", "sdpa_cudnn": "C2", "cublas_fused": "C1", "linear_x3": "C2",
         "tinygemm_int4": "C3"}


def make_plots(rows, plots_dir, slug, json_dir, device):
    """Returns (list of plot paths relative to the JSON file's folder, error or None)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        return [], f"no plots: matplotlib unavailable ({err_text(e)})"
    os.makedirs(plots_dir, exist_ok=True)
    made = []
    pre = [r for r in rows if r["section"] == "prefill" and r.get("impl") != "matmul_peak"]
    if pre:
        dtypes = list(dict.fromkeys(r["dtype"] for r in pre))
        heads = heads_labels(pre)  # rows of several geometries: Hq/Hkv is part of each point's key and tick label
        hl = (lambda r: heads[geo_key(r)]) if heads else (lambda r: "")
        fig, axes = plt.subplots(1, len(dtypes), figsize=(6.5 * len(dtypes), 4.5), squeeze=False)
        for ax, dt in zip(axes[0], dtypes):
            keys = sorted({(r["seqlen"], r["batch"], r["causal"], hl(r)) for r in pre if r["dtype"] == dt})
            xs = list(range(len(keys)))
            for impl in ("kerntune", "sdpa_flash", "sdpa_cudnn"):
                by = {(r["seqlen"], r["batch"], r["causal"], hl(r)): r.get("tflops") for r in pre
                      if r["dtype"] == dt and r["impl"] == impl}
                ys = [by.get(k) if by.get(k) is not None else float("nan") for k in keys]
                ax.plot(xs, ys, marker="o", label=LABEL[impl], color=COLOR[impl],
                        linewidth=2.2 if impl == "kerntune" else 1.2)
            ax.set_xticks(xs)
            ax.set_xticklabels([f"S={s}\nB={b}" + ("" if c else "\nfull") + (f"\n{h}" if h else "")
                                for s, b, c, h in keys], fontsize=8)
            ax.set_ylabel("TFLOP/s")
            ax.set_title(f"attention prefill, {dt}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(device, fontsize=9)
        fig.tight_layout()
        p = os.path.join(plots_dir, f"{slug}_prefill.png")
        fig.savefig(p, dpi=120)
        plt.close(fig)
        made.append(p)
    qkv = [r for r in rows if r["section"] == "qkv"]
    kts = [r for r in qkv if r["impl"] == "kerntune"]
    if kts:
        # one panel per format (per model and format when the rows are of several models)
        heads = heads_labels(qkv)
        gk = geo_key if heads else (lambda r: None)
        panels = list(dict.fromkeys((gk(r), r["format"]) for r in kts))
        fmts = [fmt for _, fmt in panels]
        cols = min(3, len(fmts))
        nrow = int(math.ceil(len(fmts) / cols))
        fig, axes = plt.subplots(nrow, cols, figsize=(5.2 * cols, 4.0 * nrow), squeeze=False)
        for i, (g, fmt) in enumerate(panels):
            ax = axes[i // cols][i % cols]
            mine = [r for r in kts if r["format"] == fmt and gk(r) == g]
            act = mine[0]["dtype"]
            series = [("kerntune", f"kerntune {fmt} weights ({act})", [(r["m"], r.get("us")) for r in mine])]
            for impl, dt in (("cublas_fused", act), ("linear_x3", act), ("tinygemm_int4", "bf16")):
                series.append((impl, f"{LABEL[impl]} ({dt})",
                               [(r["m"], r.get("us")) for r in qkv
                                if r["impl"] == impl and r["dtype"] == dt and gk(r) == g]))
            for impl, label, pts in series:
                pts = sorted((m, us) for m, us in pts if us)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label, color=COLOR[impl],
                            linewidth=2.2 if impl == "kerntune" else 1.2)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("tokens M")
            ax.set_ylabel("us")
            n_bad = sum(1 for r in mine if not r.get("us"))
            ax.set_title(f"Q/K/V projection, {fmt} weights" + (f" (kerntune failed at {n_bad} M)" if n_bad else "")
                         + (f"\n{g[0]} (heads {heads[g]})" if heads else ""))
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize=7)
        for j in range(len(fmts), nrow * cols):
            axes[j // cols][j % cols].axis("off")
        fig.suptitle(device, fontsize=9)
        fig.tight_layout()
        p = os.path.join(plots_dir, f"{slug}_qkv.png")
        fig.savefig(p, dpi=120)
        plt.close(fig)
        made.append(p)
    return [os.path.relpath(p, json_dir).replace(os.sep, "/") for p in made], None


# ---------------------------------------------------------------------------------------------------------------
def driver_version():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        v = out.stdout.strip().splitlines()
        if out.returncode == 0 and v:
            return v[0].strip()
    except Exception:
        pass
    try:
        v = torch._C._cuda_getDriverVersion()  # CUDA driver API version, e.g. 13000
        return f"unknown (nvidia-smi failed; CUDA driver API {v // 1000}.{(v % 1000) // 10})"
    except Exception:
        return "unknown"


def geometry(cfg):
    """The model fields of a shapes file, as the results JSON records them."""
    return {k: cfg.get(k) for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                                    "qkv_bias", "rope_theta")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=os.path.join(REPO, "shapes", "qwen7b.json"),
                    help="shapes file, or a comma-separated list of them (each section runs over every file, in "
                         "order; default shapes/qwen7b.json)")
    ap.add_argument("--db", required=True, help="tuning database written by `autotune` for this GPU")
    ap.add_argument("--out", help="results JSON (default bench/results/<gpu>.json)")
    ap.add_argument("--plots-dir", default=os.path.join(REPO, "bench", "results"), help="PNG folder (default bench/results)")
    ap.add_argument("--sections", default="prefill,decode,qkv", help="comma list of prefill,decode,qkv")
    ap.add_argument("--decode-all", action="store_true",
                    help="decode: every attention_decode entry of the shapes file (the tuning grid) instead of the "
                         "DECODE_POINTS")
    ap.add_argument("--quick", action="store_true", help="fewer replays and shorter budgets (smoke run)")
    ap.add_argument("--append", action="store_true",
                    help="keep the rows of the OTHER sections already in --out (same GPU), e.g. to run the sections "
                         "in separate processes: --sections prefill,decode, then --sections qkv --append")
    ap.add_argument("--samples", type=int, help="timed replays per row (default 40, --quick 10)")
    ap.add_argument("--budget-ms", type=float, help="GPU time per row for the timed replays (default 1000, --quick 300)")
    ap.add_argument("--replay-us", type=float, default=2000.0, help="target duration of one graph replay (default 2000)")
    ap.add_argument("--max-launches", type=int, default=200, help="most launches per graph (default 200)")
    ap.add_argument("--flush-max-m", type=int, default=16,
                    help="also time projection rows with M <= this do_bench-style (L2 flush, one call; default 16)")
    ap.add_argument("--flush-reps", type=int, help="calls per do_bench-style row (default 100, --quick 30)")
    ap.add_argument("--flush-sleep-us", type=float, default=300.0,
                    help="do_bench-style rows: GPU spin after the flush (torch.cuda._sleep), so that host overhead"
                         " longer than the flush (kerntune's Python call: ~100 us) is not timed (default 300; 0:"
                         " exactly do_bench)")
    ap.add_argument("--quant-act-dtype", choices=("bf16", "fp16"), default="bf16",
                    help="activation dtype of the quantized formats (default bf16; fp16/bf16 weights use their own)")
    args = ap.parse_args()

    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    bad = [s for s in sections if s not in ("prefill", "decode", "qkv")]
    if bad or not sections:
        print(f"error: --sections: unknown {bad or '(empty)'}; choose from prefill,decode,qkv", file=sys.stderr)
        return 2
    shapes_paths = [s.strip() for s in args.shapes.split(",") if s.strip()]
    if not shapes_paths:
        print("error: --shapes: no file named", file=sys.stderr)
        return 2
    cfgs = []
    for path in shapes_paths:
        try:
            cfgs.append(json.load(open(path)))
        except Exception as e:
            print(f"error: --shapes {path}: {err_text(e)}", file=sys.stderr)
            return 2
    if len(cfgs) > 1:  # the rows of several files are told apart by their "model"
        seen = {}
        for path, c in zip(shapes_paths, cfgs):
            name = c.get("model") if isinstance(c, dict) else None
            if not name:
                print(f"error: --shapes {path}: no \"model\" name (needed to tell the rows of several files apart)",
                      file=sys.stderr)
                return 2
            if name in seen:
                print(f"error: --shapes: {seen[name]} and {path} both name the model {name!r}", file=sys.stderr)
                return 2
            seen[name] = path
    cfg = cfgs[0]
    if not os.path.isfile(args.db):
        print(f"error: --db {args.db}: no such file (write one with `autotune --db ...` on this GPU)", file=sys.stderr)
        return 2

    _load_torch()
    if not torch.cuda.is_available():
        print("error: no CUDA GPU visible to torch", file=sys.stderr)
        return 2
    torch.empty(1, device="cuda")  # create torch's (primary) context before kerntune looks for one
    props = torch.cuda.get_device_properties(0)
    device = torch.cuda.get_device_name(0)
    slug = slugify(device)
    out_path = os.path.abspath(args.out or os.path.join(REPO, "bench", "results", f"{slug}.json"))
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    l2 = int(getattr(props, "L2_cache_size", 50 * 1024 * 1024))

    ctx = Ctx()
    sys.path.insert(0, os.path.join(REPO, "python"))
    try:
        import kerntune as kt
        ctx.kt = kt
        ctx.version = kerntune_version(kt)
        ctx.rt = kt.Runtime(args.db)
    except Exception as e:  # the anchors are still measured; every kerntune row carries this
        ctx.kt_error = f"kerntune unavailable: {err_text(e)}"
        log(f"WARNING: {ctx.kt_error}")

    samples = args.samples or (10 if args.quick else 40)
    budget = args.budget_ms or (300.0 if args.quick else 1000.0)
    timer = Timer(samples=samples, budget_ms=budget, replay_us=args.replay_us, max_launches=args.max_launches,
                  warmup_replays=2 if args.quick else 5, flush_reps=args.flush_reps or (30 if args.quick else 100),
                  flush_sleep_cycles=int(args.flush_sleep_us * getattr(props, "clock_rate", 2_000_000) * 1e-3))  # kHz

    def rel_to_repo(p):
        p = os.path.abspath(p)
        return os.path.relpath(p, REPO) if p.startswith(REPO + os.sep) else p

    cmd = ["python3", "bench/bench_all.py"]
    for a in sys.argv[1:]:
        cmd.append(a)
    results = dict(
        schema=SCHEMA,
        device=device,
        gpu_slug=slug,
        compute_capability=f"{props.major}.{props.minor}",
        sm_count=props.multi_processor_count,
        l2_bytes=l2,
        driver=driver_version(),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        date_utc=datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        kerntune_version=ctx.version,
        kerntune_error=ctx.kt_error,
        db=args.db,
        shapes=",".join(rel_to_repo(p) for p in shapes_paths),
        command=shlex.join(cmd),
        model=cfg.get("model"),  # the first file's (as before several files were allowed); all of them: "models"
        geometry=geometry(cfg),
        # several files: each one's model, path and geometry, in --shapes order (a single file's results keep the
        # layout they had before several were allowed: no "models")
        **({"models": [dict(model=c.get("model"), shapes=rel_to_repo(p), geometry=geometry(c))
                       for p, c in zip(shapes_paths, cfgs)]} if len(cfgs) > 1 else {}),
        timing=dict(method="CUDA graph of L launches over C rotated input copies (> 3x L2), replayed; "
                           "per-launch median over replays", samples=samples, budget_ms=budget,
                    replay_us=args.replay_us, max_launches=args.max_launches, warmup_replays=timer.warmup_replays,
                    quick=args.quick, flush_method="do_bench-style: 256 MB zeroed, then one call between events; median",
                    flush_max_m=args.flush_max_m, flush_reps=timer.flush_reps, interleaved=list(sections)),
        tolerances=dict(attention=ATTN_TOL, qkv=QKV_TOL),
        qkv_quant_act_dtype=args.quant_act_dtype,
        sections=sections,
        rows=[],
        plots=[],
    )

    if args.append and os.path.exists(out_path):
        try:
            with open(out_path) as f:
                old = json.load(f)
            if old.get("schema") != SCHEMA or old.get("device") != device:
                raise ValueError(f"schema {old.get('schema')!r} / device {old.get('device')!r} differ")
            kept = [r for r in old.get("rows", []) if r.get("section") not in sections]
            results["rows"] = kept
            results["sections"] = [x for x in old.get("sections", []) if x not in sections] + sections
            results["command"] = f"{old.get('command')} && {results['command']}"
            results["appended_to"] = dict(date_utc=old.get("date_utc"), rows_kept=len(kept))
            # the sections whose rows alternate their replays: the kept sections that did, and this run's
            was = [x for x in (old.get("timing") or {}).get("interleaved") or [] if x not in sections]
            results["timing"]["interleaved"] = [x for x in results["sections"] if x in was or x in sections]
            for k in ("section_errors",):
                errs = {a: b for a, b in (old.get(k) or {}).items() if a not in sections}
                if errs:
                    results[k] = errs
            # "models" also names the models of kept rows that this run's shapes files do not measure
            mine = results.get("models") or [dict(model=cfg.get("model"), shapes=results["shapes"],
                                                  geometry=results["geometry"])]
            theirs = old.get("models") or [dict(model=old.get("model"), shapes=old.get("shapes"),
                                                geometry=old.get("geometry"))]
            kept_models = {r.get("model") for r in kept}
            names = {m.get("model") for m in mine}
            extra = [m for m in theirs if m.get("model") in kept_models and m.get("model") not in names]
            if extra:
                items = [(a, b) for a, b in results.items() if a != "models"]
                at = [a for a, _ in items].index("geometry") + 1
                results = dict(items[:at] + [("models", mine + extra)] + items[at:])
                results["shapes"] = ",".join(dict.fromkeys(str(m.get("shapes")) for m in mine + extra))
            log(f"--append: kept {len(kept)} rows of sections {sorted({r['section'] for r in kept})} from {out_path}")
        except Exception as e:
            log(f"WARNING: --append: not appending to {out_path} ({err_text(e)}); writing a new file")

    def save():
        tmp = out_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f, indent=1)
        os.replace(tmp, out_path)

    log(f"device: {device} (sm_{props.major}{props.minor}, {props.multi_processor_count} SMs, L2 {l2 / 2**20:.0f} MiB),"
        f" driver {results['driver']}, torch {torch.__version__}, kerntune {ctx.version}, db {args.db}")
    log(f"timing: {samples} replays (budget {budget:.0f} ms/row), graph replay ~{args.replay_us:.0f} us,"
        f" cold L2 via rotated copies > 3x L2")
    multi = len(cfgs) > 1

    def section_error(sec, msg):
        log("ERROR: " + msg + "\n" + traceback.format_exc())
        errs = results.setdefault("section_errors", {})
        errs[sec] = f"{errs[sec]}; {msg}" if sec in errs else msg

    for sec in sections:
        log(f"\n== {sec} ==")
        fn = {"prefill": run_prefill, "decode": run_decode, "qkv": run_qkv}[sec]
        table = {"prefill": print_prefill_table, "decode": print_decode_table, "qkv": print_qkv_table}[sec]
        first_row, done = len(results["rows"]), 0
        peaks = None
        if sec == "prefill":  # the dense-matmul peak, once per run and dtype, before the first file's rows
            dtypes = prefill_peak_dtypes(cfgs)
            try:
                peaks = run_matmul_peak(timer, l2, dtypes, results["rows"])
            except Exception as e:  # run_matmul_peak keeps its failures as rows; this is a crash outside them
                del results["rows"][first_row:]
                peaks = [dict(section="prefill", impl="matmul_peak", dtype=d, error=f"matmul peak: {err_text(e)}")
                         for d in dtypes]
                results["rows"].extend(peaks)
                log(f"  .. matmul peak FAILED {short(err_text(e), 200)}")
        # every shapes file in --shapes order; with several, each file's rows are kept back from the section's
        # table, printed once over all of them (one "heads" column telling the geometries apart)
        for path, c in zip(shapes_paths, cfgs):
            if multi:
                log(f"-- {c.get('model')} ({rel_to_repo(path)})")
            try:
                if sec == "qkv":
                    fn(ctx, c, timer, l2, results["rows"], args.quant_act_dtype, args.flush_max_m, table=not multi)
                elif sec == "decode":
                    fn(ctx, c, timer, l2, results["rows"], args.decode_all, table=not multi)
                else:
                    fn(ctx, c, timer, l2, results["rows"], table=not multi, peaks=peaks)
                done += 1
            except Exception as e:  # a section that dies is recorded; the others (and the other files) still run
                section_error(sec, f"section {sec} aborted" + (f" for {c.get('model')} ({rel_to_repo(path)})"
                                                               if multi else "") + f": {err_text(e)}")
        if multi and done:
            try:
                table(results["rows"][first_row:])
            except Exception as e:
                section_error(sec, f"section {sec}: table failed: {err_text(e)}")
        save()

    plots, perr = make_plots(results["rows"], args.plots_dir, slug, os.path.dirname(out_path), device)
    results["plots"] = plots
    if perr:
        results["plots_error"] = perr
        log(perr)
    save()
    log(f"\nwrote {out_path}" + "".join(f"\nwrote {os.path.join(os.path.dirname(out_path), p)}" for p in plots))
    failed = [r for r in results["rows"] if r["impl"] == "kerntune" and r.get("error")]
    if failed or results.get("section_errors"):
        log(f"{len(failed)} kerntune row(s) failed" + (f"; aborted sections: {list(results['section_errors'])}"
                                                     if results.get("section_errors") else ""))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

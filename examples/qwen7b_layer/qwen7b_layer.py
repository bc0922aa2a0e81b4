#!/usr/bin/env python3
"""One Qwen2.5-7B attention layer (prefill, then a decode step) through kerntune, checked against float32 PyTorch,
per weight format.

    python3 examples/qwen7b_layer/qwen7b_layer.py --db qwen7b-h100.db [--seqlen 2048] [--dtype bf16|fp16]
                                                 [--formats fp16,fp16_kb64,int8,int4,nf4,mxfp4,nvfp4] [--iters 20]
                                                 [--decode-batch 16] [--decode-kv 4096] [--page-size 64]

Needs a CUDA GPU, torch, and the kerntune Python package (python/kerntune, ctypes over libkerntune.so).

The layer (Qwen2.5-7B geometry: hidden 3584, 28 query heads, 4 KV heads, head_dim 128, QKV bias, RoPE theta 1e6;
random weights: W ~ N(0, 0.02^2), bias ~ N(0, 0.1^2), x ~ N(0, 1); batch 1, S tokens at positions 0..S-1):
    [q | k | v] = x W^T + b, W = [Wq; Wk; Wv] of shape [4608, 3584]     (one fused projection)
    q, k = RoPE(q), RoPE(k)       rotate-half (HF transformers Qwen2 apply_rotary_pos_emb): pairs (i, i + D/2)
                                  rotated by pos * theta^(-2i/D)
    o = softmax(q k^T / sqrt(D), causal) v       GQA: query head h reads KV head h // 7
kerntune path, per format: pw = kt.quantize(W, format) (one concatenated [N, K] weight), rt.qkv_proj(x, pw, bias,
positions, rope_theta) -> q [S, 28, 128], k/v [S, 4, 128] (one kernel: GEMM + bias + RoPE + split), then
rt.attention(q, k, v, causal=True) on [1, S, H, D] views.

Errors (rel L2 = ||a - ref||_2 / ||ref||_2), against a float32 PyTorch implementation of the same layer that uses
the DEQUANTIZED weight (pw.dequantize(), float64 -> float32) and the same dtype-rounded x and bias, so that each
stage error measures the kernels, not the quantization: F.linear in fp32, RoPE in fp32 (angles in float64),
SDPA with the MATH backend in fp32 with enable_gqa (in query chunks with an explicit causal mask, to bound memory).
  q, k, v      after the projection (kerntune rt.qkv_proj vs the fp32 reference)       tol bf16 1e-2, fp16 5e-3
  attn stage   rt.attention on the reference q/k/v rounded to dtype vs fp32 SDPA on them tol bf16 1e-2, fp16 5e-3
  output e2e   kerntune projection + kerntune attention vs the fp32 layer              tol bf16 2e-2, fp16 1e-2
The program exits 1 if any of these exceeds its tolerance (that format is then not timed) or a kerntune call
fails. Reported, not checked:
  W quant err  ||dequantize(quantize(W)) - W|| / ||W|| (the format's own error; 4-bit formats are around 0.1)
  quant->out   the fp32 layer output with the dequantized weight vs with the original fp32 weight
  torch e2e    the plain PyTorch path below (original weight rounded to dtype) vs the fp32 layer: the error level
               a user of torch's dtype kernels already accepts.

Timing (us, CUDA events, median of --iters samples after --warmup calls, each sample = --reps back-to-back calls
divided by --reps; warm L2, inputs reused; at S >= 512 the GPU work outlasts Python's launch cost, at small S
the numbers include it): kerntune projection (bias + RoPE fused) vs the PyTorch projection (F.linear with bias on
the dtype weight + torch RoPE on q and k, cos/sin precomputed); kerntune attention vs SDPA FLASH_ATTENTION
(FlashAttention-2) on transposed views. "x" = PyTorch time / kerntune time (> 1: kerntune faster).

Decode step (per format, after the prefill checks; --decode-batch 0 skips it): B sequences, each holding kv - 1
earlier tokens (random K/V, rounded to dtype) in a paged cache (--page-size tokens per page, pages shuffled), one new
token each at position kv - 1:
    kerntune: rt.qkv_proj(x [B, 3584], kv_cache=(k_pages, v_pages), slot_mapping) -> q [B, 28, 128], and K (after
              RoPE) and V straight into the paged cache at slot = block_table[b, t // page] * page + t % page
              (quantized GEMM + bias + RoPE + cache write, one kernel);
              rt.attention_decode(q, k_pages, v_pages, seqlens_k, block_table)
    PyTorch:  F.linear + torch RoPE, K/V written into a contiguous [B, kv, 4, 128] cache, SDPA (its default backend
              choice) over it
Checked: the decode output against an fp32 step with the dequantized weight (tol = the e2e one); timed (same method
as above): the kerntune step vs the PyTorch step.

16-bit weights must match the activation dtype: with --dtype bf16 the "fp16" format runs as "bf16" (said in the
output), and the other way round; likewise "fp16_kb64" / "bf16_kb64" (the K-blocked 16-bit layout).
"""
import argparse
import os
import statistics
import sys

HIDDEN, HQ, HKV, D, THETA = 3584, 28, 4, 128, 1_000_000.0
NQ, NKV = HQ * D, HKV * D
N = NQ + 2 * NKV
ALL_FORMATS = ["fp16", "fp16_kb64", "int8", "int8_kb64", "int4", "int4_kb128", "nf4", "nf4_kb128", "mxfp4", "mxfp4_kb128",
               "nvfp4", "nvfp4_kb128"]
TOL = {  # rel L2 tolerances, see the docstring
    "bf16": dict(qkv=1e-2, attn=1e-2, e2e=2e-2),
    "fp16": dict(qkv=5e-3, attn=5e-3, e2e=1e-2),
}
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rel(a, ref):
    a, ref = a.double(), ref.double()
    den = ref.norm().item()
    num = (a - ref).norm().item()
    return num / den if den > 0 else (0.0 if num == 0 else float("inf"))


def rope_cos_sin(positions, dtype):
    """cos, sin [S, 1, D] (HF layout: the D/2 frequencies repeated twice); angles in float64."""
    import torch
    inv_freq = 1.0 / (THETA ** (torch.arange(D // 2, dtype=torch.float64, device=positions.device) * 2.0 / D))
    ang = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    return torch.cos(ang).to(dtype)[:, None, :], torch.sin(ang).to(dtype)[:, None, :]


def apply_rope(t, cos, sin):
    """t [S, H, D]: t * cos + rotate_half(t) * sin, rotate_half(t) = cat(-t[D/2:], t[:D/2])."""
    import torch
    t1, t2 = t[..., : D // 2], t[..., D // 2:]
    return t * cos + torch.cat([-t2, t1], dim=-1) * sin


def sdpa_math_fp32(q, k, v, chunk=1024):
    """Causal GQA attention in fp32 with SDPA's MATH backend. q [S, HQ, D], k/v [S, HKV, D] -> [S, HQ, D]."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    s = q.shape[0]
    qt = q.float().transpose(0, 1).unsqueeze(0)  # [1, HQ, S, D]
    kt_ = k.float().transpose(0, 1).unsqueeze(0)
    vt = v.float().transpose(0, 1).unsqueeze(0)
    keys = torch.arange(s, device=q.device)
    outs = []
    with sdpa_kernel([SDPBackend.MATH]):
        for i0 in range(0, s, chunk):
            i1 = min(s, i0 + chunk)
            mask = keys[None, :] <= torch.arange(i0, i1, device=q.device)[:, None]  # True = visible
            outs.append(F.scaled_dot_product_attention(qt[:, :, i0:i1], kt_, vt, attn_mask=mask, enable_gqa=True))
    return torch.cat(outs, dim=2)[0].transpose(0, 1).contiguous()  # [S, HQ, D]


def layer_fp32(x32, w32, b32, positions):
    """The fp32 reference layer: returns dict(q, k, v, o) with q/k after RoPE."""
    import torch.nn.functional as F
    import torch
    s = x32.shape[0]
    y = F.linear(x32, w32, b32)
    q = y[:, :NQ].reshape(s, HQ, D)
    k = y[:, NQ:NQ + NKV].reshape(s, HKV, D)
    v = y[:, NQ + NKV:].reshape(s, HKV, D).contiguous()
    cos, sin = rope_cos_sin(positions, torch.float32)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    return dict(q=q, k=k, v=v, o=sdpa_math_fp32(q, k, v))


def time_us(fn, iters, warmup, reps):
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        samples.append(a.elapsed_time(b) * 1e3 / reps)
    return statistics.median(samples)


def decode_step(rt, a, dt, tol, pwc, wdq, b_act):
    """The decode step of the docstring for one format: returns dict(err, t_kt, t_torch) or raises."""
    import torch
    import torch.nn.functional as F
    dev = "cuda"
    B, kv, page = a.decode_batch, a.decode_kv, a.page_size
    gen = torch.Generator().manual_seed(a.seed + 1)
    per = (kv + page - 1) // page
    # history: kv - 1 earlier tokens per sequence; the new token goes to position kv - 1
    hist_k = torch.randn(B, per * page, HKV, D, generator=gen).to(dev, dt)
    hist_v = torch.randn(B, per * page, HKV, D, generator=gen).to(dev, dt)
    x = torch.randn(B, HIDDEN, generator=gen).to(dev, dt)
    pos = torch.full((B,), kv - 1, dtype=torch.int32, device=dev)
    lens = torch.full((B,), kv, dtype=torch.int32, device=dev)
    perm = torch.randperm(B * per, generator=gen).to(dev)
    table = perm.view(B, per).to(torch.int32)
    k_pages = torch.empty(B * per, page, HKV, D, dtype=dt, device=dev)
    v_pages = torch.empty_like(k_pages)
    k_pages[perm] = hist_k.view(B * per, page, HKV, D)
    v_pages[perm] = hist_v.view(B * per, page, HKV, D)
    slots = (table[:, (kv - 1) // page] * page + (kv - 1) % page).to(torch.int32)  # [B]
    b_idx = torch.arange(B, device=dev)
    qkv_kw = dict(bias=b_act, positions=pos, num_heads=HQ, num_kv_heads=HKV, head_dim=D, rope_theta=THETA)
    outs = (torch.empty(B, HQ, D, dtype=dt, device=dev), None, None)  # K and V go to the cache only
    o = torch.empty(B, 1, HQ, D, dtype=dt, device=dev)

    def kt_step():
        q, _, _ = rt.qkv_proj(x, pwc, out=outs, kv_cache=(k_pages, v_pages), slot_mapping=slots, **qkv_kw)
        return rt.attention_decode(q.view(B, 1, HQ, D), k_pages, v_pages, lens, table, max_seqlen_k=kv, out=o)

    out = kt_step()
    torch.cuda.synchronize()
    # fp32 reference with the dequantized weight, on the contiguous history
    y = F.linear(x.float(), wdq.to(dev, torch.float32), b_act.float())
    cos, sin = rope_cos_sin(pos, torch.float32)
    q32 = apply_rope(y[:, :NQ].view(B, HQ, D), cos, sin)
    k32 = apply_rope(y[:, NQ:NQ + NKV].view(B, HKV, D), cos, sin)
    v32 = y[:, NQ + NKV:].view(B, HKV, D)
    kc, vc = hist_k[:, :kv].float().clone(), hist_v[:, :kv].float().clone()
    kc[:, kv - 1], vc[:, kv - 1] = k32, v32
    ref = F.scaled_dot_product_attention(q32[:, :, None], kc.transpose(1, 2), vc.transpose(1, 2), enable_gqa=True)
    err = rel(out[:, 0], ref[:, :, 0])
    r = dict(err=err)
    if not (err <= tol["e2e"]):
        return r
    # PyTorch step on a contiguous cache
    w_act = wdq.to(dev, dt)
    t_k, t_v = hist_k[:, :kv].clone(), hist_v[:, :kv].clone()
    cos_a, sin_a = rope_cos_sin(pos, dt)

    def torch_step():
        yy = F.linear(x, w_act, b_act)
        q = apply_rope(yy[:, :NQ].view(B, HQ, D), cos_a, sin_a)
        t_k[b_idx, kv - 1] = apply_rope(yy[:, NQ:NQ + NKV].view(B, HKV, D), cos_a, sin_a)
        t_v[b_idx, kv - 1] = yy[:, NQ + NKV:].view(B, HKV, D)
        return F.scaled_dot_product_attention(q[:, :, None], t_k.transpose(1, 2), t_v.transpose(1, 2),
                                              enable_gqa=True)

    r["t_kt"] = time_us(kt_step, a.iters, a.warmup, a.reps)
    r["t_torch"] = time_us(torch_step, a.iters, a.warmup, a.reps)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", default=os.environ.get("KERNTUNE_DB", ""),
                    help="tuning database from `autotune` (default $KERNTUNE_DB; empty = built-in default kernels)")
    ap.add_argument("--seqlen", type=int, default=2048, help="tokens S (default 2048)")
    ap.add_argument("--formats", nargs="+", default=[",".join(ALL_FORMATS)],
                    help="weight formats, comma or space separated (default %s)" % ",".join(ALL_FORMATS))
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16", help="activation dtype (default bf16)")
    ap.add_argument("--iters", type=int, default=20, help="timing samples (median; default 20)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls before timing (default 5)")
    ap.add_argument("--reps", type=int, default=5, help="calls per timing sample (default 5)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--decode-batch", type=int, default=16, help="decode step: sequences (default 16; 0 skips it)")
    ap.add_argument("--decode-kv", type=int, default=4096, help="decode step: tokens per sequence after the step "
                                                                 "(default 4096)")
    ap.add_argument("--page-size", type=int, default=64, help="decode step: tokens per cache page (default 64)")
    a = ap.parse_args()
    formats = [f for item in a.formats for f in item.split(",") if f]
    bad = [f for f in formats if f not in ALL_FORMATS + ["bf16", "bf16_kb64"]]
    if bad or not formats:
        print("error: --formats: unknown %s (choose from %s, bf16, bf16_kb64)" % (bad or "(empty)", ",".join(ALL_FORMATS)),
              file=sys.stderr)
        return 2
    if a.seqlen < 1:
        print("error: --seqlen must be >= 1", file=sys.stderr)
        return 2
    if a.decode_batch < 0 or a.decode_kv < 1 or a.page_size not in (16, 32, 64, 128, 256):
        print("error: --decode-batch must be >= 0, --decode-kv >= 1, --page-size 16, 32, 64, 128 or 256",
              file=sys.stderr)
        return 2

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    if not torch.cuda.is_available():
        print("error: no CUDA GPU visible to torch", file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.join(REPO, "python"))
    import kerntune as kt

    dev = "cuda"
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[a.dtype]
    tol = TOL[a.dtype]
    S = a.seqlen
    torch.empty(1, device=dev)  # torch's context first; kerntune uses the current one
    rt = kt.Runtime(a.db or None)  # None: $KERNTUNE_DB, else built-in default kernels
    print("device: %s | torch %s | db: %s | S=%d, batch 1, activations %s" % (
        torch.cuda.get_device_name(), torch.__version__, a.db or "(none: built-in defaults)", S, a.dtype), flush=True)

    gen = torch.Generator().manual_seed(a.seed)
    w = torch.randn(N, HIDDEN, generator=gen) * 0.02  # [Wq; Wk; Wv], CPU float32
    b = torch.randn(N, generator=gen) * 0.1
    x = torch.randn(S, HIDDEN, generator=gen).to(dev)
    x_act, b_act = x.to(dt), b.to(dev, dt)
    x32, b32 = x_act.float(), b_act.float()  # the rounded inputs, shared by every path
    pos = torch.arange(S, dtype=torch.int32, device=dev)

    # fp32 layer with the ORIGINAL weight (for the quantization effect and the torch path's error)
    ref_orig = layer_fp32(x32, w.to(dev), b32, pos)

    # ---- plain PyTorch path (format-independent): dtype F.linear + torch RoPE + SDPA flash ----
    w_act = w.to(dev, dt)
    cos_a, sin_a = rope_cos_sin(pos, dt)

    def torch_proj():
        y = F.linear(x_act, w_act, b_act)
        q = apply_rope(y[:, :NQ].view(S, HQ, D), cos_a, sin_a)
        k = apply_rope(y[:, NQ:NQ + NKV].view(S, HKV, D), cos_a, sin_a)
        return q, k, y[:, NQ + NKV:].view(S, HKV, D)

    tq, tk, tv = torch_proj()

    def torch_attn():
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return F.scaled_dot_product_attention(tq.unsqueeze(0).transpose(1, 2), tk.unsqueeze(0).transpose(1, 2),
                                                  tv.unsqueeze(0).transpose(1, 2), is_causal=True, enable_gqa=True)

    torch_err = rel(torch_attn()[0].transpose(0, 1), ref_orig["o"])
    t_torch_proj = time_us(torch_proj, a.iters, a.warmup, a.reps)
    t_torch_attn = time_us(torch_attn, a.iters, a.warmup, a.reps)
    print("PyTorch path (%s F.linear + torch RoPE + SDPA flash): projection %.1f us, attention %.1f us, output rel err"
          " vs fp32 layer %.2e" % (a.dtype, t_torch_proj, t_torch_attn, torch_err), flush=True)

    results, failed = [], False
    for fmt in formats:
        eff = kt.format_for_activations(fmt, a.dtype)
        if eff != fmt:
            print("note: 16-bit weights follow the activation dtype: format %s runs as %s" % (fmt, eff))
        r = dict(format=eff)
        try:
            pw = kt.quantize(w, eff)
            wdq = torch.as_tensor(pw.dequantize()).to(torch.float64)
            r["wq_err"] = rel(wdq, w)
            pwc = pw.to("cuda")
            pwc = pwc if pwc is not None else pw
            ref = layer_fp32(x32, wdq.to(dev, torch.float32), b32, pos)
            r["quant_out"] = rel(ref["o"], ref_orig["o"])
            print("[%s] %s" % (eff, rt.explain_qkv(x_act, pwc, num_heads=HQ, num_kv_heads=HKV, head_dim=D,
                                                    has_bias=True, rope=True)), flush=True)

            qkv_kw = dict(bias=b_act, positions=pos, num_heads=HQ, num_kv_heads=HKV, head_dim=D, rope_theta=THETA)
            q, k, v = rt.qkv_proj(x_act, pwc, **qkv_kw)
            q4, k4, v4 = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)  # [1, S, H, D]
            print("[%s] %s" % (eff, rt.explain_attention(q4, k4, causal=True)), flush=True)
            o = rt.attention(q4, k4, v4, causal=True)
            torch.cuda.synchronize()
            r["q"], r["k"], r["v"] = rel(q, ref["q"]), rel(k, ref["k"]), rel(v, ref["v"])
            r["e2e"] = rel(o[0], ref["o"])
            # attention stage alone: kerntune attention on the reference q/k/v rounded to dtype
            rq, rk, rv = (ref[n].to(dt).unsqueeze(0) for n in ("q", "k", "v"))
            r["attn"] = rel(rt.attention(rq, rk, rv, causal=True)[0], sdpa_math_fp32(rq[0], rk[0], rv[0]))
            del rq, rk, rv, ref

            over = [(name, key) for name, key in (("q", "qkv"), ("k", "qkv"), ("v", "qkv"), ("attn", "attn"),
                                                  ("e2e", "e2e")) if not (r[name] <= tol[key])]  # NaN fails too
            if over:  # a wrong kernel is not timed
                r["fail"] = "above tolerance: " + ", ".join("%s %.2e > %.0e" % (n, r[n], tol[key]) for n, key in over)
            else:
                outs = (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v))
                o_buf = torch.empty_like(o)
                r["t_proj"] = time_us(lambda: rt.qkv_proj(x_act, pwc, out=outs, **qkv_kw), a.iters, a.warmup, a.reps)
                r["t_attn"] = time_us(lambda: rt.attention(q4, k4, v4, causal=True, out=o_buf), a.iters, a.warmup,
                                      a.reps)
                if a.decode_batch:
                    d = decode_step(rt, a, dt, tol, pwc, wdq, b_act)
                    r.update({"dec_" + key: val for key, val in d.items()})
                    if not (d["err"] <= tol["e2e"]):
                        r["fail"] = "decode step above tolerance: %.2e > %.0e" % (d["err"], tol["e2e"])
        except Exception as e:  # reported per format; the others still run
            r["fail"] = "%s: %s" % (type(e).__name__, e)
        failed |= "fail" in r
        results.append(r)
        print("[%s] %s" % (eff, "FAIL " + r["fail"] if "fail" in r else "ok"), flush=True)
        torch.cuda.empty_cache()

    def f(r, key, spec):
        return format(r[key], spec) if key in r else "-"

    print("\nerrors (rel L2 vs the fp32 layer with the dequantized weight; tolerances %s: q/k/v %.0e, attn %.0e, "
          "e2e %.0e)" % (a.dtype, tol["qkv"], tol["attn"], tol["e2e"]))
    print("%-6s %10s %10s %10s %10s %10s %10s %11s  %s" % ("format", "W quant", "q", "k", "v", "attn stage",
                                                          "output e2e", "quant->out", "status"))
    for r in results:
        print("%-6s %10s %10s %10s %10s %10s %10s %11s  %s" % (
            r["format"], f(r, "wq_err", ".2e"), f(r, "q", ".2e"), f(r, "k", ".2e"), f(r, "v", ".2e"),
            f(r, "attn", ".2e"), f(r, "e2e", ".2e"), f(r, "quant_out", ".2e"), "FAIL" if "fail" in r else "ok"))
    print("(PyTorch %s path output vs the fp32 layer with the original weight: %.2e)" % (a.dtype, torch_err))

    print("\ntimes (us, median of %d; x = PyTorch / kerntune, > 1: kerntune faster)" % a.iters)
    print("%-6s %12s %12s %7s %12s %12s %7s %10s %10s %7s" % ("format", "kt proj", "torch proj", "x", "kt attn",
                                                             "sdpa flash", "x", "kt total", "torch tot", "x"))
    for r in results:
        if "t_proj" not in r:
            print("%-6s %s" % (r["format"], "not timed: " + r.get("fail", "")))
            continue
        kt_tot, th_tot = r["t_proj"] + r["t_attn"], t_torch_proj + t_torch_attn
        print("%-6s %12.1f %12.1f %6.2fx %12.1f %12.1f %6.2fx %10.1f %10.1f %6.2fx" % (
            r["format"], r["t_proj"], t_torch_proj, t_torch_proj / r["t_proj"], r["t_attn"], t_torch_attn,
            t_torch_attn / r["t_attn"], kt_tot, th_tot, th_tot / kt_tot))
    if a.decode_batch:
        print("\ndecode step (B %d, kv %d, paged %d): kerntune qkv_proj + cache write + attention_decode vs PyTorch "
              "F.linear + RoPE + cache write + SDPA; us, x = PyTorch / kerntune" % (a.decode_batch, a.decode_kv,
                                                                                   a.page_size))
        print("%-6s %10s %10s %10s %7s" % ("format", "rel err", "kerntune", "PyTorch", "x"))
        for r in results:
            if "dec_t_kt" in r:
                print("%-6s %10.2e %10.1f %10.1f %6.2fx" % (r["format"], r["dec_err"], r["dec_t_kt"], r["dec_t_torch"],
                                                         r["dec_t_torch"] / r["dec_t_kt"]))
            else:
                print("%-6s %10s %s" % (r["format"], f(r, "dec_err", ".2e"), "not timed"))
    for r in results:
        if "fail" in r:
            print("FAIL %s: %s" % (r["format"], r["fail"]))
    print("\n%s" % ("FAILED" if failed else "all formats within tolerance"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""GPU tests of the kerntune Python package (pytest; needs a CUDA GPU, torch and a built libkerntune.so).

    KERNTUNE_LIB=build-gpu/libkerntune.so python -m pytest -q python/tests/test_kerntune_gpu.py

The library is found as kt.load_library() says ($KERNTUNE_LIB, else the repository's build folders); the
runtime uses $KERNTUNE_DB when set, else the built-in default kernels (compiled with NVRTC on first use and
kept in the disk cache, so a second run is much faster).

- attention vs torch SDPA in float64 (GQA through repeat_interleave, bottom-right causal mask), fp16 and bf16,
  Qwen2.5-7B heads (28 / 4, head_dim 128) among the shapes, output poisoned with NaN first, LSE checked;
- qkv_proj for every weight format vs a float64 reference built from pw.dequantize() (x W^T + b, RoPE
  rotate-half with theta 1e6 on the q and k heads), M in {1, 16, 37}, rel err <= 2e-3 (fp16) / 1e-2 (bf16);
- attention_decode vs a float64 reference: paged (shuffled block table, NaN in the spare pages and past every
  length) and contiguous caches, ragged lengths incl. 0, q_len 1 / 2 / 4 / 16, GQA 7, MQA, MHA, o and lse; host
  (CPU) tables checked and giving the same bits; capture in a CUDA graph; max_seqlen_k buckets;
- qkv_proj's paged KV-cache write (kv_cache, slot_mapping) for gemv / mma / wgmma-sized M, against the same
  reference at the mapped slots, untouched slots still NaN;
- each refusal raises before any launch (the NaN-poisoned output is left untouched).
"""

import math
import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import kerntune as kt  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available())")

TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}
THETA = 1e6
DEV = "cuda"


@pytest.fixture(scope="module")
def rt():
    r = kt.Runtime(os.environ.get("KERNTUNE_DB") or None)
    yield r
    r.close()


def rel_err(out, ref):
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


def poisoned(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device=DEV)


# ---- attention ------------------------------------------------------------------------------------------------

def attention_reference(q, k, v, causal, scale):
    """float64 SDPA: o [B, Sq, Hq, D] and lse [B, Hq, Sq]. Bottom-right causal: query i sees keys
    j <= i + Sk - Sq; rows that see no key: o = 0, lse = -inf."""
    B, Sq, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    q64 = q.double().permute(0, 2, 1, 3)
    k64 = k.double().permute(0, 2, 1, 3).repeat_interleave(Hq // Hkv, dim=1)
    v64 = v.double().permute(0, 2, 1, 3).repeat_interleave(Hq // Hkv, dim=1)
    mask = None
    if causal:
        i = torch.arange(Sq, device=q.device)[:, None]
        j = torch.arange(Sk, device=q.device)[None, :]
        mask = j <= i + (Sk - Sq)
    o = torch.nn.functional.scaled_dot_product_attention(q64, k64, v64, attn_mask=mask, scale=scale)
    s = (q64 @ k64.transpose(-1, -2)) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
        empty = ~mask.any(dim=-1)  # [Sq]
        o = o.masked_fill(empty[None, None, :, None], 0.0)  # SDPA gives NaN there
    lse = torch.logsumexp(s, dim=-1)
    return o.permute(0, 2, 1, 3), lse


ATTN_CASES = [
    # B, Sq, Sk, Hq, Hkv, D, causal, dtype
    (1, 128, 128, 28, 4, 128, True, torch.float16),    # Qwen2.5-7B heads
    (1, 128, 128, 28, 4, 128, False, torch.bfloat16),
    (2, 200, 200, 28, 4, 128, True, torch.bfloat16),
    (2, 77, 77, 8, 8, 64, True, torch.float16),        # MHA, head_dim 64, ragged length
    (2, 33, 200, 28, 4, 128, True, torch.float16),     # Sq < Sk: bottom-right causal
    (1, 150, 40, 4, 1, 128, True, torch.bfloat16),     # Sq > Sk: MQA, the first rows see no key
]


@pytest.mark.parametrize("B,Sq,Sk,Hq,Hkv,D,causal,dtype", ATTN_CASES)
def test_attention_matches_sdpa(rt, B, Sq, Sk, Hq, Hkv, D, causal, dtype):
    torch.manual_seed(1000 + Sq + Sk + Hq)
    q = torch.randn(B, Sq, Hq, D, device=DEV, dtype=dtype)
    k = torch.randn(B, Sk, Hkv, D, device=DEV, dtype=dtype)
    v = torch.randn(B, Sk, Hkv, D, device=DEV, dtype=dtype)
    out = poisoned((B, Sq, Hq, D), dtype)
    o, lse = rt.attention(q, k, v, causal=causal, out=out, return_lse=True)
    assert o is out
    assert lse.shape == (B, Hq, Sq) and lse.dtype == torch.float32
    torch.cuda.synchronize()
    assert torch.isfinite(o).all(), "NaN/inf left in the output (poison not overwritten)"
    scale = 1.0 / math.sqrt(D)
    ref_o, ref_lse = attention_reference(q, k, v, causal, scale)
    assert rel_err(o, ref_o) <= TOL[dtype], rel_err(o, ref_o)
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite), "lse = -inf exactly where a row sees no key"
    assert (lse[~finite] == float("-inf")).all()
    if finite.any():
        assert (lse.double()[finite] - ref_lse[finite]).abs().max().item() <= 1e-3


def test_attention_scale_default_and_allocation(rt):
    torch.manual_seed(1)
    q = torch.randn(1, 64, 8, 128, device=DEV, dtype=torch.float16)
    k = torch.randn(1, 64, 2, 128, device=DEV, dtype=torch.float16)
    v = torch.randn(1, 64, 2, 128, device=DEV, dtype=torch.float16)
    o = rt.attention(q, k, v, causal=True)  # allocates
    o2 = rt.attention(q, k, v, causal=True, scale=0.3)
    torch.cuda.synchronize()
    assert o.shape == q.shape and o.dtype == q.dtype and o.is_contiguous()
    assert rel_err(o, attention_reference(q, k, v, True, 1 / math.sqrt(128))[0]) <= TOL[torch.float16]
    assert rel_err(o2, attention_reference(q, k, v, True, 0.3)[0]) <= TOL[torch.float16]


def test_attention_fused_qkv_views_and_side_stream(rt):
    """q, k, v as views into one [B, S, Hq + 2 Hkv, D] buffer (strided), launched on a non-default stream:
    bitwise the same as contiguous copies on the default stream."""
    torch.manual_seed(2)
    B, S, Hq, Hkv, D = 2, 96, 28, 4, 128
    qkv = torch.randn(B, S, Hq + 2 * Hkv, D, device=DEV, dtype=torch.bfloat16)
    q, k, v = qkv[:, :, :Hq], qkv[:, :, Hq:Hq + Hkv], qkv[:, :, Hq + Hkv:]
    assert not q.is_contiguous()
    ref = rt.attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        o = rt.attention(q, k, v, causal=True, out=poisoned((B, S, Hq, D), torch.bfloat16))
    s.synchronize()
    torch.cuda.synchronize()
    assert torch.equal(o, ref)


def test_explain_attention(rt):
    q = torch.empty(1, 512, 28, 128, device=DEV, dtype=torch.bfloat16)
    k = torch.empty(1, 512, 4, 128, device=DEV, dtype=torch.bfloat16)
    line = rt.explain_attention(q, k, causal=True)
    assert line.split(":")[0] in ("exact", "nearest", "default"), line
    assert "attention_prefill__bf16_d128_causal" in line, line
    assert rt.explain_attention((1, 512, 28, 128), (1, 512, 4, 128), True, dtype=torch.bfloat16) == line
    # The family-generic explain (the problem as the database stores it) answers the same line.
    problem = {"dtype": "bf16", "batch": 1, "seqlen_q": 512, "seqlen_k": 512, "num_heads": 28, "num_kv_heads": 4,
               "head_dim": 128, "causal": True}
    assert rt.explain("attention_prefill", problem) == line
    with pytest.raises(kt.KerntuneError) as ei:
        rt.explain("gemm", problem)
    assert ei.value.status == kt.KT_ERROR_INVALID_ARGUMENT and "unknown family 'gemm'" in ei.value.message
    with pytest.raises(kt.KerntuneError) as ei:
        rt.explain("attention_prefill", dict(problem, head_dim=96))
    assert ei.value.status == kt.KT_ERROR_UNSUPPORTED, ei.value.message
    with pytest.raises(TypeError):
        rt.explain("attention_prefill", "not a dict")


def test_module_level_functions():
    torch.manual_seed(3)
    q = torch.randn(1, 32, 4, 64, device=DEV, dtype=torch.float16)
    k = torch.randn(1, 32, 4, 64, device=DEV, dtype=torch.float16)
    o = kt.attention(q, k, k, causal=False)
    torch.cuda.synchronize()
    assert rel_err(o, attention_reference(q, k, k, False, 1 / 8)[0]) <= TOL[torch.float16]
    assert kt.explain_attention(q, k).split(":")[0] in ("exact", "nearest", "default")
    assert kt.default_runtime() is kt.default_runtime()


def test_library_error_becomes_kerntune_error(rt):
    q = torch.randn(1, 16, 2, 96, device=DEV, dtype=torch.float16)  # head_dim 96: no kernel
    with pytest.raises(kt.KerntuneError) as ei:
        rt.attention(q, q, q)
    assert ei.value.status == kt.KT_ERROR_UNSUPPORTED and ei.value.status_name == "KT_ERROR_UNSUPPORTED"
    assert "head_dim" in ei.value.message, ei.value.message


# ---- attention refusals: raised before any launch (the poisoned out stays NaN) ---------------------------------

def _attn_inputs(dtype=torch.float16):
    torch.manual_seed(4)
    q = torch.randn(1, 64, 8, 128, device=DEV, dtype=dtype)
    k = torch.randn(1, 64, 2, 128, device=DEV, dtype=dtype)
    v = torch.randn(1, 64, 2, 128, device=DEV, dtype=dtype)
    return q, k, v


@pytest.mark.parametrize("case", ["cpu", "wrong_dtype", "mismatched_dtype", "noncontig_last", "bad_stride",
                                  "misaligned", "wrong_rank", "shape_mismatch", "out_shape"])
def test_attention_refusals(rt, case):
    q, k, v = _attn_inputs()
    out = poisoned(q.shape, q.dtype)
    expect = ValueError
    if case == "cpu":
        q = q.cpu()
    elif case == "wrong_dtype":
        q, k, v, expect = q.float(), k.float(), v.float(), TypeError
    elif case == "mismatched_dtype":
        k, expect = k.bfloat16(), TypeError
    elif case == "noncontig_last":
        q = torch.randn(1, 64, 8, 256, device=DEV, dtype=q.dtype)[..., ::2]
        assert q.shape == (1, 64, 8, 128) and q.stride(-1) == 2
    elif case == "bad_stride":
        q = torch.randn(1, 64, 8, 132, device=DEV, dtype=q.dtype)[..., :128]  # head stride 132: not a multiple of 8
    elif case == "misaligned":
        flat = torch.randn(q.numel() + 8, device=DEV, dtype=q.dtype)
        q = flat[4:4 + q.numel()].view(q.shape)  # 8-byte offset
    elif case == "wrong_rank":
        q = q[0]
    elif case == "shape_mismatch":
        v = v[:, :32]
    elif case == "out_shape":
        out = poisoned((1, 64, 8, 64), q.dtype)
    with pytest.raises(expect):
        rt.attention(q, k, v, causal=True, out=out)
    torch.cuda.synchronize()
    assert torch.isnan(out).all(), "something was launched before the refusal"


def test_attention_refuses_tensor_on_other_device(rt):
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU")
    q, k, v = _attn_inputs()
    other = torch.device("cuda", (rt.device.index + 1) % torch.cuda.device_count())
    with pytest.raises(ValueError, match="runtime is on"):
        rt.attention(q.to(other), k, v)


# ---- qkv_proj ---------------------------------------------------------------------------------------------------

def rope_reference(t, pos, theta):
    """Rotate-half RoPE in float64: pairs (i, i + D/2), angle = pos * theta^(-2i/D). t [M, H, D], pos [M]."""
    d = t.shape[-1]
    half = d // 2
    i = torch.arange(half, dtype=torch.float64, device=t.device)
    inv = theta ** (-2.0 * i / d)
    ang = pos.reshape(-1).double()[:, None] * inv[None, :]
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    a, b = t[..., :half], t[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def qkv_reference(x, pw, bias, pos, hq, hkv, d, theta):
    """float64 reference from the exact dequantized weight: (q [M,Hq,D], k [M,Hkv,D], v [M,Hkv,D])."""
    w = pw.dequantize().to(x.device)  # float64 [N, K]
    y = x.reshape(-1, x.shape[-1]).double() @ w.t()
    if bias is not None:
        y = y + bias.double()
    m = y.shape[0]
    q = y[:, :hq * d].reshape(m, hq, d)
    k = y[:, hq * d:(hq + hkv) * d].reshape(m, hkv, d)
    v = y[:, (hq + hkv) * d:].reshape(m, hkv, d)
    if theta is not None:
        q, k = rope_reference(q, pos, theta), rope_reference(k, pos, theta)
    return q, k, v


# Activation dtype per format: fp16/bf16 weights need their own dtype; the quantized formats alternate so both
# activation dtypes are covered without doubling the kernels to compile.
QKV_DTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16, "int8": torch.bfloat16, "int4": torch.float16,
             "nf4": torch.bfloat16, "mxfp4": torch.float16, "nvfp4": torch.bfloat16, "fp16_kb64": torch.float16,
             "bf16_kb64": torch.bfloat16, "int8_kb64": torch.float16, "int4_kb128": torch.bfloat16,
             "nf4_kb128": torch.float16, "mxfp4_kb128": torch.bfloat16, "nvfp4_kb128": torch.float16}
HQ, HKV, D, K = 8, 2, 128, 512
_weights = {}


def packed(fmt, hq=HQ, hkv=HKV, d=D, k=K):
    """(pw on the GPU, bias) for a format and geometry, quantized once per module."""
    key = (fmt, hq, hkv, d, k)
    if key not in _weights:
        torch.manual_seed(5)
        n = (hq + 2 * hkv) * d
        w = torch.randn(n, k) * 0.05
        pw = kt.quantize(w, fmt)
        assert pw.device.type == "cpu" and pw.format == fmt and (pw.n, pw.k) == (n, k)
        _weights[key] = (pw, pw.to(DEV), torch.randn(n) * 0.1)
    return _weights[key]


@pytest.mark.parametrize("m", [1, 16, 37])
@pytest.mark.parametrize("fmt", list(QKV_DTYPE))
def test_qkv_proj_matches_reference(rt, fmt, m):
    dtype = QKV_DTYPE[fmt]
    pw_cpu, pw, bias32 = packed(fmt)
    assert pw.device == rt.device
    torch.manual_seed(6 + m)
    x = torch.randn(m, K, device=DEV, dtype=dtype)
    bias = bias32.to(DEV, dtype)
    pos = torch.randint(0, 32768, (m,), device=DEV, dtype=torch.int32)
    out = (poisoned((m, HQ, D), dtype), poisoned((m, HKV, D), dtype), poisoned((m, HKV, D), dtype))
    q, k, v = rt.qkv_proj(x, pw, bias, pos, num_heads=HQ, num_kv_heads=HKV, head_dim=D, rope_theta=THETA, out=out)
    assert q is out[0] and k is out[1] and v is out[2]
    torch.cuda.synchronize()
    for t in (q, k, v):
        assert torch.isfinite(t).all(), "NaN/inf left in an output"
    refs = qkv_reference(x, pw_cpu, bias, pos, HQ, HKV, D, THETA)
    for name, t, r in zip("qkv", (q, k, v), refs):
        assert rel_err(t, r) <= TOL[dtype], (fmt, m, name, rel_err(t, r))


def test_qkv_proj_no_bias_no_rope_3d_int64_positions(rt):
    """3-D x [B, S, K] -> [B, S, H, D] outputs (allocated); no bias / no RoPE; then RoPE with int64 [B, S]
    positions (converted to int32) into [B, S, H, D] views of one fused output buffer."""
    pw_cpu, pw, bias32 = packed("int4")
    torch.manual_seed(7)
    x = torch.randn(2, 8, K, device=DEV, dtype=torch.float16)
    q, k, v = rt.qkv_proj(x, pw, num_heads=HQ, num_kv_heads=HKV, head_dim=D)
    assert q.shape == (2, 8, HQ, D) and k.shape == (2, 8, HKV, D) and v.shape == (2, 8, HKV, D)
    torch.cuda.synchronize()
    refs = qkv_reference(x, pw_cpu, None, None, HQ, HKV, D, None)
    for t, r in zip((q, k, v), refs):
        assert rel_err(t.reshape(r.shape), r) <= TOL[torch.float16]

    pos = torch.arange(16, device=DEV, dtype=torch.int64).view(2, 8) * 37
    n = (HQ + 2 * HKV) * D
    fused = torch.full((2, 8, n), float("nan"), device=DEV, dtype=torch.float16)
    outs = (fused[..., :HQ * D].view(2, 8, HQ, D), fused[..., HQ * D:(HQ + HKV) * D].view(2, 8, HKV, D),
            fused[..., (HQ + HKV) * D:].view(2, 8, HKV, D))
    bias = bias32.to(DEV, torch.float16)
    rt.qkv_proj(x, pw, bias, pos, num_heads=HQ, num_kv_heads=HKV, head_dim=D, rope_theta=THETA, out=outs)
    torch.cuda.synchronize()
    assert torch.isfinite(fused).all()
    refs = qkv_reference(x, pw_cpu, bias, pos, HQ, HKV, D, THETA)
    for t, r in zip(outs, refs):
        assert rel_err(t.reshape(r.shape), r) <= TOL[torch.float16]


@pytest.mark.parametrize("fmt", ["int4", "nvfp4", "fp16_kb64", "int4_kb128"])
def test_qkv_proj_qwen_geometry(rt, fmt):
    """Qwen2.5-7B: hidden 3584, 28 query heads, 4 KV heads, head_dim 128 (N = 4608)."""
    dtype = QKV_DTYPE[fmt]
    pw_cpu, pw, bias32 = packed(fmt, 28, 4, 128, 3584)
    torch.manual_seed(8)
    x = torch.randn(37, 3584, device=DEV, dtype=dtype)
    pos = torch.arange(37, device=DEV, dtype=torch.int32) + 1000
    bias = bias32.to(DEV, dtype)
    q, k, v = rt.qkv_proj(x, pw, bias, pos, num_heads=28, num_kv_heads=4, head_dim=128, rope_theta=THETA)
    torch.cuda.synchronize()
    refs = qkv_reference(x, pw_cpu, bias, pos, 28, 4, 128, THETA)
    for t, r in zip((q, k, v), refs):
        assert rel_err(t, r) <= TOL[dtype]
    line = rt.explain_qkv(x, pw, num_heads=28, num_kv_heads=4, head_dim=128, has_bias=True, rope=True)
    assert line.split(":")[0] in ("exact", "nearest", "default") and fmt in line, line


def paged_slots(m, num_pages, page_size, gen):
    """int32 [m] slot mapping over shuffled pages, starting at offset 3 of the first page, one token in five -1."""
    pages = torch.randperm(num_pages, generator=gen)
    slots, nxt = [], 3
    for i in range(m):
        if i % 5 == 2:
            slots.append(-1)
            continue
        slots.append(int(pages[nxt // page_size]) * page_size + nxt % page_size)
        nxt += 1
    return torch.tensor(slots, dtype=torch.int32)


@pytest.mark.parametrize("fmt,m", [("int4", 1), ("int8", 16), ("int4", 37), ("fp16", 37), ("bf16", 300)])
def test_qkv_proj_writes_the_paged_kv_cache(rt, fmt, m):
    """kv_cache=(k_cache, v_cache), slot_mapping: each token's K (after RoPE) and V at its slot of the paged caches
    (poisoned with NaN first: untouched slots keep it), q as without the cache; k and v None (cache only) unless
    `out` gives them. V's cache is a FlashInfer-style [pages, heads, slots, D] permuted view: any strides work."""
    dtype = QKV_DTYPE[fmt]
    pw_cpu, pw, bias32 = packed(fmt)
    gen = torch.Generator().manual_seed(40 + m)
    x = torch.randn(m, K, generator=gen).to(DEV, dtype)
    bias = bias32.to(DEV, dtype)
    pos = torch.randint(0, 32768, (m,), generator=gen, dtype=torch.int32).to(DEV)
    page_size = 16
    num_pages = 2 * (m // page_size + 1) + 2
    slots = paged_slots(m, num_pages, page_size, gen)
    k_cache = poisoned((num_pages, page_size, HKV, D), dtype)
    v_cache = poisoned((num_pages, HKV, page_size, D), dtype).transpose(1, 2)  # [pages, slots, heads, D] view
    kw = dict(num_heads=HQ, num_kv_heads=HKV, head_dim=D, rope_theta=THETA)
    q, k, v = rt.qkv_proj(x, pw, bias, pos, kv_cache=(k_cache, v_cache), slot_mapping=slots.to(DEV), **kw)
    assert k is None and v is None and q.shape == (m, HQ, D)
    torch.cuda.synchronize()
    rq, rk, rv = qkv_reference(x, pw_cpu, bias, pos, HQ, HKV, D, THETA)
    assert rel_err(q, rq) <= TOL[dtype]
    kc, vc = k_cache.reshape(-1, HKV, D).cpu(), v_cache.reshape(-1, HKV, D).cpu()  # [slot, Hkv, D]
    mapped = slots >= 0
    assert rel_err(kc[slots[mapped].long()], rk[mapped.to(DEV)].cpu()) <= TOL[dtype]
    assert rel_err(vc[slots[mapped].long()], rv[mapped.to(DEV)].cpu()) <= TOL[dtype]
    untouched = torch.ones(num_pages * page_size, dtype=torch.bool)
    untouched[slots[mapped].long()] = False
    assert torch.isnan(kc[untouched]).all() and torch.isnan(vc[untouched]).all(), "a slot no token maps to was written"

    # The same with int64 slots (converted) and plain k / v outputs too: every token, skipped ones included; the
    # caches as before, bit for bit.
    k_first, v_first = k_cache.clone(), v_cache.clone()
    k_cache.fill_(float("nan"))
    v_cache.fill_(float("nan"))
    out = (poisoned((m, HQ, D), dtype), poisoned((m, HKV, D), dtype), poisoned((m, HKV, D), dtype))
    q2, k2, v2 = rt.qkv_proj(x, pw, bias, pos, kv_cache=(k_cache, v_cache), slot_mapping=slots.long().to(DEV),
                             out=out, **kw)
    torch.cuda.synchronize()
    assert q2 is out[0] and k2 is out[1] and v2 is out[2]
    assert torch.equal(q2, q)
    assert rel_err(k2, rk) <= TOL[dtype] and rel_err(v2, rv) <= TOL[dtype]
    assert torch.equal(k_cache.nan_to_num(7.0), k_first.nan_to_num(7.0))
    assert torch.equal(v_cache.nan_to_num(7.0), v_first.nan_to_num(7.0))


@pytest.mark.parametrize("case", ["no_slots", "no_cache", "cache_dtype", "cache_heads", "cache_pages_differ",
                                  "slots_float", "slots_shape", "cache_not_tuple", "cache_stride", "out_k_none"])
def test_qkv_proj_kv_cache_refusals(rt, case):
    """Each bad kv_cache / slot_mapping is refused, naming it, before anything is launched (the caches stay NaN)."""
    pw_cpu, pw, bias32 = packed("int4")
    x = torch.randn(16, K, device=DEV, dtype=torch.float16)
    pos = torch.arange(16, device=DEV, dtype=torch.int32)
    k_cache, v_cache = poisoned((4, 16, HKV, D), torch.float16), poisoned((4, 16, HKV, D), torch.float16)
    slots = torch.arange(16, device=DEV, dtype=torch.int32)
    kw = dict(num_heads=HQ, num_kv_heads=HKV, head_dim=D, rope_theta=THETA, kv_cache=(k_cache, v_cache),
              slot_mapping=slots)
    expect, match = ValueError, None
    if case == "no_slots":
        kw["slot_mapping"], match = None, "without slot_mapping"
    elif case == "no_cache":
        kw["kv_cache"], match = None, "without kv_cache"
    elif case == "cache_dtype":
        kw["kv_cache"], expect, match = (k_cache, v_cache.bfloat16()), TypeError, "v_cache"
    elif case == "cache_heads":
        kw["kv_cache"], match = (poisoned((4, 16, HKV + 1, D), torch.float16), v_cache), "k_cache"
    elif case == "cache_pages_differ":
        kw["kv_cache"], match = (k_cache, v_cache[:3]), "one \\[num_pages, page_size\\]"
    elif case == "slots_float":
        kw["slot_mapping"], expect, match = slots.float(), TypeError, "slot_mapping"
    elif case == "slots_shape":
        kw["slot_mapping"], match = slots[:15], "slot_mapping"
    elif case == "cache_not_tuple":
        kw["kv_cache"], expect, match = k_cache, TypeError, "kv_cache"
    elif case == "cache_stride":  # slots 4 elements apart: not a multiple of 8
        wide = poisoned((4, 16, HKV * D + 4), torch.float16)
        kw["kv_cache"], match = (wide[..., :HKV * D].view(4, 16, HKV, D), v_cache), "k_cache"
    elif case == "out_k_none":  # None outputs only with a cache
        del kw["kv_cache"], kw["slot_mapping"]
        kw["out"], expect = (poisoned((16, HQ, D), torch.float16), None, None), TypeError
    with pytest.raises(expect, match=match):
        rt.qkv_proj(x, pw, None, pos, **kw)
    torch.cuda.synchronize()
    assert torch.isnan(k_cache).all() and torch.isnan(v_cache).all(), "something was launched before the refusal"


def test_packed_weight_round_trip():
    torch.manual_seed(9)
    w = torch.randn(64, 256, device=DEV) * 0.05
    for fmt in kt.FORMATS:
        pw = kt.quantize(w, fmt)  # on w's device
        assert pw.device == w.device
        dq = pw.dequantize()
        assert dq.dtype == torch.float64 and dq.device.type == "cpu" and dq.shape == (64, 256)
        assert torch.equal(dq, pw.to("cpu").dequantize())
        assert rel_err(dq, w.cpu()) < 0.2
    fp16 = kt.quantize(w, "fp16")
    assert torch.equal(fp16.data.view(torch.float16).cpu(), w.half().cpu())


def test_packed_weight_is_read_only_and_copies(rt):
    """Issue 36: a PackedWeight's geometry cannot be reassigned (pw.n = 4096 once made dequantize() over-read);
    copies rebuild through the constructor; a buffer resized in place is refused, never read past."""
    import copy
    import pickle
    pw_cpu, _, _ = packed("int4")
    for name, value in (("n", 4096), ("k", 1024), ("format", "fp16"), ("data", pw_cpu.data[:1]), ("tensor_scale", 2.0)):
        with pytest.raises(AttributeError, match="read-only"):
            setattr(pw_cpu, name, value)
    assert pw_cpu.n == (HQ + 2 * HKV) * D and pw_cpu.k == K
    want = pw_cpu.dequantize()
    for c in (copy.copy(pw_cpu), copy.deepcopy(pw_cpu), pickle.loads(pickle.dumps(pw_cpu))):
        assert (c.format, c.n, c.k, c.tensor_scale) == (pw_cpu.format, pw_cpu.n, pw_cpu.k, pw_cpu.tensor_scale)
        assert torch.equal(c.dequantize(), want)
    bad = kt.PackedWeight("int4", pw_cpu.n, pw_cpu.k, pw_cpu.data.clone(), pw_cpu.scales.clone(), pw_cpu.zeros.clone())
    bad.data.resize_(10)
    with pytest.raises(kt.KerntuneError, match="data_bytes is 10"):
        bad.dequantize()
    bad_gpu = kt.PackedWeight("int4", pw_cpu.n, pw_cpu.k, pw_cpu.data.to(DEV), pw_cpu.scales.to(DEV),
                              pw_cpu.zeros.to(DEV))
    bad_gpu.data.resize_(10)
    x = torch.randn(1, K, device=DEV, dtype=torch.float16)
    with pytest.raises(ValueError, match="resized in place"):
        rt.qkv_proj(x, bad_gpu, None, None, num_heads=HQ, num_kv_heads=HKV, head_dim=D)


def test_quantize_nvfp4_tiny_weights_tensor_scale():
    """Issue 36: nvfp4's tensor scale is never a subnormal; tiny weights get 2^-126 and still dequantize."""
    for v, want in ((1e-40, 2.0 ** -126), (3e-35, 2.0 ** -126), (0.0, 1.0)):
        pw = kt.quantize(torch.full((4, 64), v), "nvfp4")
        assert pw.tensor_scale == want, (v, pw.tensor_scale)
        assert torch.isfinite(pw.dequantize()).all()


# ---- qkv refusals: raised before any launch -----------------------------------------------------------------------

@pytest.mark.parametrize("case", ["cpu_x", "wrong_dtype", "noncontig_last", "weight_on_cpu", "weight_not_packed",
                                  "weight_shape", "bias_dtype", "missing_positions", "fp16_weight_bf16_x",
                                  "fp16_kb64_weight_bf16_x"])
def test_qkv_proj_refusals(rt, case):
    pw_cpu, pw, bias32 = packed("int4")
    x = torch.randn(16, K, device=DEV, dtype=torch.float16)
    bias = bias32.to(DEV, torch.float16)
    pos = torch.arange(16, device=DEV, dtype=torch.int32)
    kw = dict(num_heads=HQ, num_kv_heads=HKV, head_dim=D, rope_theta=THETA)
    expect = ValueError
    if case == "cpu_x":
        x = x.cpu()
    elif case == "wrong_dtype":
        x, expect = x.float(), TypeError
    elif case == "noncontig_last":
        x = torch.randn(16, 2 * K, device=DEV, dtype=torch.float16)[:, ::2]
    elif case == "weight_on_cpu":
        pw = pw_cpu
    elif case == "weight_not_packed":
        pw, expect = torch.randn((HQ + 2 * HKV) * D, K, device=DEV, dtype=torch.float16), TypeError
    elif case == "weight_shape":
        kw["num_heads"] = 4
    elif case == "bias_dtype":
        bias, expect = bias.float(), TypeError
    elif case == "missing_positions":
        pos = None
    elif case in ("fp16_weight_bf16_x", "fp16_kb64_weight_bf16_x"):
        pw, x = packed(case[:case.index("_weight")])[1], x.bfloat16()
        bias = bias.bfloat16()
    m = x.shape[0]
    dtype = x.dtype if x.dtype in (torch.float16, torch.bfloat16) else torch.float16
    out = (poisoned((m, kw["num_heads"], D), dtype), poisoned((m, HKV, D), dtype), poisoned((m, HKV, D), dtype))
    with pytest.raises(expect):
        rt.qkv_proj(x, pw, bias, pos, out=out, **kw)
    torch.cuda.synchronize()
    for t in out:
        assert torch.isnan(t).all(), "something was launched before the refusal"


def test_closed_runtime_refuses():
    r = kt.Runtime()
    with r:
        pass
    assert r.closed
    q, k, v = _attn_inputs()
    with pytest.raises(ValueError, match="closed"):
        r.attention(q, k, v)
    r.close()  # idempotent


# ---- decode attention over a KV cache -------------------------------------------------------------------------

def decode_reference(q, k, v, lens, causal, scale):
    """float64 decode attention per sequence: o [B, q_len, Hq, D], lse [B, Hq, q_len]. Query i of sequence b sees keys
    [0, lens[b] - q_len + i] (causal) or [0, lens[b]); rows that see no key: o = 0, lse = -inf."""
    B, L, Hq, D = q.shape
    Hkv = k.shape[2]
    o = torch.zeros(B, L, Hq, D, dtype=torch.float64, device=q.device)
    lse = torch.full((B, Hq, L), float("-inf"), dtype=torch.float64, device=q.device)
    for b in range(B):
        n = int(lens[b])
        if n == 0:
            continue
        kk = k[b, :n].double().repeat_interleave(Hq // Hkv, dim=1)  # [n, Hq, D]
        vv = v[b, :n].double().repeat_interleave(Hq // Hkv, dim=1)
        s = torch.einsum("ihd,jhd->hij", q[b].double(), kk) * scale  # [Hq, L, n]
        if causal:
            hidden = torch.arange(n, device=q.device)[None, :] > (torch.arange(L, device=q.device) + n - L)[:, None]
            s = s.masked_fill(hidden, float("-inf"))
        l = torch.logsumexp(s, dim=-1)  # [Hq, L]
        p = torch.nan_to_num(torch.exp(s - l[..., None]), nan=0.0)
        o[b] = torch.einsum("hij,jhd->ihd", p, vv)
        lse[b] = l
    return o, lse


def to_pages(k, v, page, gen):
    """Contiguous K/V [B, S, Hkv, D] (S a multiple of page) as shuffled pages + the block table, plus 3 spare pages of
    NaN that no table entry names."""
    B, S, Hkv, D = k.shape
    per = S // page
    perm = torch.randperm(B * per + 3, generator=gen)
    table = perm[: B * per].view(B, per).to(torch.int32)
    kp = torch.full((B * per + 3, page, Hkv, D), float("nan"), dtype=k.dtype, device=k.device)
    vp = kp.clone()
    kp[perm[: B * per].to(k.device)] = k.reshape(B * per, page, Hkv, D)
    vp[perm[: B * per].to(k.device)] = v.reshape(B * per, page, Hkv, D)
    return kp, vp, table


@pytest.mark.parametrize("B,L,Hq,Hkv,D,S,page,dtype", [
    (4, 1, 28, 4, 128, 4160, 64, torch.bfloat16),    # Qwen2.5-7B heads, paged
    (4, 1, 28, 4, 128, 4100, 0, torch.bfloat16),     # contiguous
    (3, 4, 28, 4, 128, 1024, 16, torch.float16),     # speculative decode, small pages
    (2, 16, 8, 1, 64, 512, 256, torch.float16),      # MQA, q_len 16
    (5, 2, 4, 4, 64, 300, 0, torch.bfloat16),        # MHA
])
def test_attention_decode_matches_reference(rt, B, L, Hq, Hkv, D, S, page, dtype):
    """Ragged lengths (0, 1, a page boundary crossed by one token, the capacity), cache slots past each length NaN,
    a shuffled block table; o and lse against float64; the output poisoned first."""
    torch.manual_seed(7)
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(B, L, Hq, D, dtype=dtype, device=DEV)
    k = torch.randn(B, S, Hkv, D, dtype=dtype, device=DEV)
    v = torch.randn(B, S, Hkv, D, dtype=dtype, device=DEV)
    lens_list = [S, 0, (page or 64) + 1, 1, S - 7][:B]
    lens_list = [n if n == 0 or n >= L else L for n in lens_list]
    lens = torch.tensor(lens_list, dtype=torch.int32)
    for b, n in enumerate(lens_list):  # nothing past a sequence's length may be read
        k[b, n:] = float("nan")
        v[b, n:] = float("nan")
    scale = 1 / math.sqrt(D)
    ref_o, ref_lse = decode_reference(q, k, v, lens_list, True, scale)
    out = poisoned((B, L, Hq, D), dtype)
    if page:
        kp, vp, table = to_pages(k, v, page, gen)
        o, lse = rt.attention_decode(q, kp, vp, lens.to(DEV), table.to(DEV), out=out, return_lse=True)
    else:
        o, lse = rt.attention_decode(q, k, v, lens.to(DEV), out=out, return_lse=True)
    torch.cuda.synchronize()
    assert o is out
    assert torch.isfinite(o).all()
    assert rel_err(o, ref_o) <= TOL[dtype] * 1.5
    seen = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), seen)  # -inf exactly where a row sees no key
    assert (lse[seen].double() - ref_lse[seen]).abs().max().item() < 1e-3
    assert (o[1] == 0).all() if B > 1 and lens_list[1] == 0 else True
    # Host tables (CPU tensors) are checked, copied and give the same bits.
    o2 = rt.attention_decode(q, kp, vp, lens, table) if page else rt.attention_decode(q, k, v, lens)
    torch.cuda.synchronize()
    assert torch.equal(o2, o)


def test_attention_decode_cuda_graph_and_bucket(rt):
    """Captured in a CUDA graph after one eager call (device-resident lengths: no host sync), replays give the eager
    bits; max_seqlen_k between buckets rounds up to the same resolved problem."""
    torch.manual_seed(3)
    q = torch.randn(16, 1, 28, 128, dtype=torch.bfloat16, device=DEV)
    k = torch.randn(16, 2048, 4, 128, dtype=torch.bfloat16, device=DEV)
    v = torch.randn_like(k)
    lens = torch.randint(1, 2049, (16,), dtype=torch.int32, device=DEV)
    out = torch.empty_like(q)
    rt.attention_decode(q, k, v, lens, max_seqlen_k=2048, out=out)
    eager = out.clone()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        rt.attention_decode(q, k, v, lens, max_seqlen_k=2048, out=out)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        rt.attention_decode(q, k, v, lens, max_seqlen_k=2048, out=out)
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
    o1 = rt.attention_decode(q, k, v, lens, max_seqlen_k=1500)  # rounds up to 2048: same problem, same bits
    assert torch.equal(o1, eager)


@pytest.mark.parametrize("case", ["q_len", "page_size", "heads", "dtype", "capacity", "block_table", "seqlens",
                                  "table_device_shape"])
def test_attention_decode_refusals(rt, case):
    """Every bad input of a decode call raises naming the argument, before any launch (the poisoned output stays)."""
    q = torch.randn(2, 1, 8, 64, dtype=torch.float16, device=DEV)
    kp = torch.randn(10, 16, 2, 64, dtype=torch.float16, device=DEV)
    vp = torch.randn_like(kp)
    table = torch.tensor([[0, 1, 2], [3, 4, 5]], dtype=torch.int32)
    lens = torch.tensor([40, 48], dtype=torch.int32)
    out = poisoned((2, 1, 8, 64), torch.float16)
    kwargs = dict(out=out)
    args = [q, kp, vp, lens, table]
    word = case
    if case == "q_len":
        args[0] = torch.randn(2, 17, 8, 64, dtype=torch.float16, device=DEV)
        kwargs = {}
    elif case == "page_size":
        args[1] = torch.randn(10, 48, 2, 64, dtype=torch.float16, device=DEV)
        args[2] = torch.randn_like(args[1])
    elif case == "heads":
        args[0] = torch.randn(2, 1, 7, 64, dtype=torch.float16, device=DEV)
        kwargs = {}
    elif case == "dtype":
        args[1] = kp.to(torch.bfloat16)
        word = "k_cache.dtype"
    elif case == "capacity":
        kwargs["max_seqlen_k"] = 49  # 3 pages of 16 hold 48
        word = "max_seqlen_k"
    elif case == "block_table":
        args[4] = torch.tensor([[0, 1, 2], [3, 10, 5]], dtype=torch.int32)  # page 10 of 10
        word = "block_table[1][1]"
    elif case == "seqlens":
        args[3] = torch.tensor([40, 49], dtype=torch.int32)
        word = "seqlens_k[1]"
    elif case == "table_device_shape":
        args[4] = table[:, :2].to(DEV).contiguous()[:1]
        word = "block_table"
    with pytest.raises((ValueError, TypeError, kt.KerntuneError)) as e:
        rt.attention_decode(*args, **kwargs)
    assert word in str(e.value), str(e.value)
    assert torch.isnan(out).all()

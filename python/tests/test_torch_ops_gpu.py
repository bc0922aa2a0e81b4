"""GPU tests of kerntune.ops, the torch custom operators (pytest; needs a CUDA GPU, torch >= 2.4 and a built
libkerntune.so):

    KERNTUNE_LIB=build-gpu/libkerntune.so python -m pytest -q python/tests/test_torch_ops_gpu.py

- torch.library.opcheck on each operator (schema, fake implementation against the real one, dispatch);
- a small attention layer (quantized fused Q/K/V projection with bias and RoPE, then prefill attention) compiled
  with torch.compile(fullgraph=True) gives the eager outputs bit for bit, and they match a float64 reference;
- the layer and a paged decode step captured in CUDA graphs replay to the eager outputs of new inputs bit for bit.
Every output buffer the tests compare is poisoned with NaN first (eager outputs are fresh tensors: the operators
return new tensors, and a NaN in them fails the comparisons).
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

if torch.cuda.is_available():
    import kerntune.ops as kops  # noqa: E402

DEV = "cuda"
H, HKV, D = 28, 4, 128  # Qwen2.5-7B's attention geometry
HIDDEN = 3584
THETA = 1e6


@pytest.fixture(scope="module", autouse=True)
def runtime():
    rt = kt.Runtime(os.environ.get("KERNTUNE_DB") or None)
    kops.use_runtime(rt)
    yield rt


def rope_ref(t, pos):
    """Rotate-half RoPE in float64: t [M, heads, D], pos [M]."""
    half = t.shape[-1] // 2
    inv = THETA ** (-torch.arange(half, dtype=torch.float64, device=t.device) * 2 / t.shape[-1])
    ang = pos.double()[:, None, None] * inv[None, None, :]
    c, s = torch.cos(ang), torch.sin(ang)
    a, b = t[..., :half], t[..., half:]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


class Layer(torch.nn.Module):
    """x [S, hidden] -> fused Q/K/V (int4 weight, bias, RoPE) -> causal GQA prefill -> o [S, H * D]; the
    elementwise ops around the kernels give torch.compile something of its own to fuse."""

    def __init__(self, weight, bias):
        super().__init__()
        self.weight, self.bias = weight, bias

    def forward(self, x, positions):
        q, k, v = kops.qkv_proj(x * 1.0, self.weight, self.bias, positions, num_heads=H, num_kv_heads=HKV,
                                head_dim=D, rope_theta=THETA)
        o = kops.attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), causal=True)
        return o.reshape(x.shape[0], H * D) + 0.0


def make_layer(dtype, fmt="int4", seed=0):
    g = torch.Generator().manual_seed(seed)
    n = (H + 2 * HKV) * D
    w = torch.randn(n, HIDDEN, generator=g) / math.sqrt(HIDDEN)
    bias = (torch.randn(n, generator=g) * 0.1).to(dtype).to(DEV)
    return Layer(kt.quantize(w, fmt).to(DEV), bias)


def layer_reference(layer, x, positions):
    """float64: the dequantized weight, bias, RoPE, causal GQA softmax attention."""
    w = layer.weight.dequantize().double().to(DEV)
    y = x.double() @ w.T + layer.bias.double()
    S = x.shape[0]
    q = rope_ref(y[:, :H * D].reshape(S, H, D), positions)
    k = rope_ref(y[:, H * D:(H + HKV) * D].reshape(S, HKV, D), positions)
    v = y[:, (H + HKV) * D:].reshape(S, HKV, D)
    k = k.repeat_interleave(H // HKV, dim=1)
    v = v.repeat_interleave(H // HKV, dim=1)
    s = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(D)
    mask = torch.ones(S, S, dtype=torch.bool, device=DEV).tril()
    s = s.masked_fill(~mask, float("-inf"))
    o = torch.einsum("hqk,khd->qhd", torch.softmax(s, dim=-1), v)
    return o.reshape(S, H * D)


def rel_err(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("op", ["attention", "attention_decode", "qkv_proj"])
def test_opcheck(op):
    """torch.library.opcheck: the schema, the fake implementation's shapes / dtypes / strides against the real
    one's, and the dispatch registrations."""
    dt = torch.bfloat16
    if op == "attention":
        q = torch.randn(2, 37, H, D, dtype=dt, device=DEV)
        k = torch.randn(2, 53, HKV, D, dtype=dt, device=DEV)
        args = (q, k, torch.randn_like(k), True, None)
    elif op == "attention_decode":
        q = torch.randn(3, 2, H, D, dtype=dt, device=DEV)
        kc = torch.randn(12, 64, HKV, D, dtype=dt, device=DEV)
        table = torch.randperm(12, device=DEV, dtype=torch.int32)[:12].reshape(3, 4)
        lens = torch.tensor([200, 0, 65], dtype=torch.int32, device=DEV)
        args = (q, kc, torch.randn_like(kc), lens, table, True, None, None)
    else:
        layer = make_layer(dt, "nf4")
        x = torch.randn(16, HIDDEN, dtype=dt, device=DEV)
        pos = torch.arange(16, dtype=torch.int32, device=DEV)
        w = layer.weight
        args = (x, w.data, w.scales, w.zeros, w.format, w.n, w.k, w.tensor_scale, layer.bias, pos, H, HKV, D, THETA)
    torch.library.opcheck(getattr(torch.ops.kerntune, op).default, args)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_torch_compile_fullgraph_gives_eager_outputs(dtype):
    layer = make_layer(dtype)
    S = 300
    x = torch.randn(S, HIDDEN, dtype=dtype, device=DEV)
    positions = torch.arange(S, dtype=torch.int32, device=DEV)
    eager = layer(x, positions)
    assert not torch.isnan(eager).any()
    err = rel_err(eager, layer_reference(layer, x, positions))
    assert err < 2e-2, err
    torch._dynamo.reset()
    compiled = torch.compile(layer, fullgraph=True)
    out = compiled(x, positions)
    assert torch.equal(out, eager)
    # New values, same shapes: the compiled graph runs again and still matches eager.
    x2 = torch.randn_like(x)
    assert torch.equal(compiled(x2, positions), layer(x2, positions))


def test_cuda_graph_replays_the_layer():
    dtype = torch.bfloat16
    layer = make_layer(dtype, "int4_kb128", seed=1)
    S = 256
    x = torch.randn(S, HIDDEN, dtype=dtype, device=DEV)
    positions = torch.arange(S, dtype=torch.int32, device=DEV)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: resolves both problems outside the capture
        for _ in range(2):
            layer(x, positions)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = layer(x, positions)
    for seed in (5, 6):
        torch.manual_seed(seed)
        x.copy_(torch.randn_like(x))
        positions.copy_(torch.randperm(4096, device=DEV)[:S].to(torch.int32))
        static_out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_out, layer(x, positions))


def test_cuda_graph_replays_paged_decode():
    dtype = torch.bfloat16
    B, Lq, page, pages_per_seq = 4, 1, 64, 40
    num_pages = B * pages_per_seq + 7
    q = torch.randn(B, Lq, H, D, dtype=dtype, device=DEV)
    kc = torch.randn(num_pages, page, HKV, D, dtype=dtype, device=DEV)
    vc = torch.randn_like(kc)
    table = torch.randperm(num_pages, device=DEV)[:B * pages_per_seq].to(torch.int32).reshape(B, pages_per_seq)
    lens = torch.tensor([2560, 1, 0, 1999], dtype=torch.int32, device=DEV)

    def step():
        return kops.attention_decode(q, kc, vc, lens, table, causal=True, max_seqlen_k=pages_per_seq * page)

    eager = step()
    assert torch.isnan(eager).sum() == 0
    assert torch.count_nonzero(eager[2]) == 0  # a sequence of length 0 gives o = 0
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = step()
    for seed in (7, 8):
        torch.manual_seed(seed)
        q.copy_(torch.randn_like(q))
        lens.copy_(torch.randint(0, pages_per_seq * page + 1, (B,), device=DEV, dtype=torch.int32))
        table.copy_(torch.randperm(num_pages, device=DEV)[:B * pages_per_seq].to(torch.int32).reshape(B, -1))
        static_out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_out, step())

"""kerntune's kernels as torch custom operators, for torch.compile and CUDA graphs.

Importing this module (it needs torch >= 2.4; `import kerntune` alone does not import torch) registers, through
torch.library.custom_op, each with a fake (meta) implementation that gives the output shapes without running
anything, so torch.compile(fullgraph=True) traces a module that calls them:

    torch.ops.kerntune.attention(q, k, v, causal, scale) -> o
    torch.ops.kerntune.attention_decode(q, k_cache, v_cache, seqlens_k, block_table, causal, softmax_scale,
                                        max_seqlen_k) -> o
    torch.ops.kerntune.qkv_proj(x, w_data, w_scales, w_zeros, w_format, w_n, w_k, w_tensor_scale, bias, positions,
                                num_heads, num_kv_heads, head_dim, rope_theta) -> (q, k, v)

and the Python wrappers attention(), attention_decode() and qkv_proj() below, which take the arguments of
kt.Runtime's methods (a kt.PackedWeight for qkv_proj) and call those operators. Each operator returns new tensors
(no input is written) and runs on torch's current stream, through the runtime of its input's device:
use_runtime(rt) sets it (e.g. one with a tuning database), else the first call on a device creates Runtime(device=...)
($KERNTUNE_DB, else the built-in defaults).

CUDA graphs: a call after the first one of the same problem (same shapes, dtypes, flags) is a lookup and a kernel
launch: no allocation in kerntune, no synchronization, no host-device copy, so torch.cuda.graph captures it and
replays it. The first call of a problem resolves it (database lookup, possibly an NVRTC compile, the split-K /
split-KV workspace allocation) and creating a runtime synchronizes the device: run each problem once before
capturing (torch's usual warm-up). attention_decode under capture needs seqlens_k and block_table on the GPU as
int32 and max_seqlen_k given or None (None sizes the grid for the cache's capacity; a CPU table is copied, which a
capture refuses).
"""

import threading
from typing import List, Optional, Tuple

import torch

from ._quant import PackedWeight
from ._runtime import Runtime

if not hasattr(torch, "library") or not hasattr(torch.library, "custom_op"):
    raise ImportError(f"kerntune.ops needs torch >= 2.4 (torch.library.custom_op); this is torch {torch.__version__}")

Tensor = torch.Tensor

_runtimes = {}
_runtimes_lock = threading.Lock()


def use_runtime(rt):
    """Makes the operators run on `rt` (a kt.Runtime) for inputs on rt.device. Returns the runtime it replaces on
    that device, or None."""
    if not isinstance(rt, Runtime):
        raise TypeError(f"use_runtime needs a kt.Runtime, got {type(rt).__name__}")
    with _runtimes_lock:
        old = _runtimes.get(rt.device.index)
        _runtimes[rt.device.index] = rt
    return old


def runtime_for(device):
    """The runtime the operators use for tensors on `device` (a CUDA torch.device): the one use_runtime() set, else
    one created on first use with Runtime(device=device)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    with _runtimes_lock:
        rt = _runtimes.get(index)
        if rt is None or rt.closed:
            rt = _runtimes[index] = Runtime(device=torch.device("cuda", index))
        return rt


# ---- attention -------------------------------------------------------------------------------------------------

@torch.library.custom_op("kerntune::attention", mutates_args=(), device_types="cuda")
def _attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: Optional[float]) -> Tensor:
    return runtime_for(q.device).attention(q, k, v, causal=causal, scale=scale)


@_attention.register_fake
def _(q, k, v, causal, scale):
    return q.new_empty(q.shape)


def attention(q, k, v, causal=False, scale=None):
    """torch.ops.kerntune.attention: kt.Runtime.attention (prefill; q [B, S_q, H_q, D], k / v [B, S_k, H_kv, D],
    fp16 / bf16) without `out` and LSE. Returns o [B, S_q, H_q, D], contiguous."""
    return torch.ops.kerntune.attention(q, k, v, bool(causal), None if scale is None else float(scale))


# ---- attention_decode ------------------------------------------------------------------------------------------

@torch.library.custom_op("kerntune::attention_decode", mutates_args=(), device_types="cuda")
def _attention_decode(q: Tensor, k_cache: Tensor, v_cache: Tensor, seqlens_k: Tensor, block_table: Optional[Tensor],
                      causal: bool, softmax_scale: Optional[float], max_seqlen_k: Optional[int]) -> Tensor:
    return runtime_for(q.device).attention_decode(q, k_cache, v_cache, seqlens_k, block_table, causal=causal,
                                                  softmax_scale=softmax_scale, max_seqlen_k=max_seqlen_k)


@_attention_decode.register_fake
def _(q, k_cache, v_cache, seqlens_k, block_table, causal, softmax_scale, max_seqlen_k):
    return q.new_empty(q.shape)


def attention_decode(q, k_cache, v_cache, seqlens_k, block_table=None, causal=True, softmax_scale=None,
                     max_seqlen_k=None):
    """torch.ops.kerntune.attention_decode: kt.Runtime.attention_decode (q [B, q_len, H_q, D]; contiguous cache
    [B, S_max, H_kv, D] or paged [num_pages, page_size, H_kv, D] with block_table [B, max_pages_per_seq] int32)
    without `out` and LSE. Returns o [B, q_len, H_q, D], contiguous."""
    return torch.ops.kerntune.attention_decode(q, k_cache, v_cache, seqlens_k, block_table, bool(causal),
                                               None if softmax_scale is None else float(softmax_scale),
                                               None if max_seqlen_k is None else int(max_seqlen_k))


# ---- qkv_proj --------------------------------------------------------------------------------------------------

@torch.library.custom_op("kerntune::qkv_proj", mutates_args=(), device_types="cuda")
def _qkv_proj(x: Tensor, w_data: Tensor, w_scales: Tensor, w_zeros: Tensor, w_format: str, w_n: int, w_k: int,
              w_tensor_scale: float, bias: Optional[Tensor], positions: Optional[Tensor], num_heads: int,
              num_kv_heads: int, head_dim: int, rope_theta: Optional[float]) -> Tuple[Tensor, Tensor, Tensor]:
    weight = PackedWeight(w_format, w_n, w_k, w_data, w_scales, w_zeros, w_tensor_scale)
    return runtime_for(x.device).qkv_proj(x, weight, bias, positions, num_heads=num_heads, num_kv_heads=num_kv_heads,
                                          head_dim=head_dim, rope_theta=rope_theta)


@_qkv_proj.register_fake
def _(x, w_data, w_scales, w_zeros, w_format, w_n, w_k, w_tensor_scale, bias, positions, num_heads, num_kv_heads,
      head_dim, rope_theta):
    lead: List[int] = list(x.shape[:-1])
    return (x.new_empty(lead + [num_heads, head_dim]), x.new_empty(lead + [num_kv_heads, head_dim]),
            x.new_empty(lead + [num_kv_heads, head_dim]))


def qkv_proj(x, weight, bias=None, positions=None, *, num_heads, num_kv_heads, head_dim, rope_theta=None):
    """torch.ops.kerntune.qkv_proj: kt.Runtime.qkv_proj (x [M, K] or [B, S, K], weight a kt.PackedWeight [N, K] on
    x's device, bias [N], positions [M] int32 for RoPE) without `out` and the KV-cache write. Returns (q, k, v):
    [M, H, D] (or [B, S, H, D]) each, H = num_heads for q and num_kv_heads for k and v."""
    if not isinstance(weight, PackedWeight):
        raise TypeError(f"weight must be a kt.PackedWeight, got {type(weight).__name__}")
    return torch.ops.kerntune.qkv_proj(x, weight.data, weight.scales, weight.zeros, weight.format, weight.n, weight.k,
                                       weight.tensor_scale, bias, positions, int(num_heads), int(num_kv_heads),
                                       int(head_dim), None if rope_theta is None else float(rope_theta))


__all__ = ["attention", "attention_decode", "qkv_proj", "use_runtime", "runtime_for"]

"""kerntune from Python: autotuned attention prefill, decode attention over a KV cache and fused (quantized) Q/K/V
projection on torch CUDA tensors.

A pure-Python package over libkerntune.so's C ABI (include/kerntune/kerntune.h) through ctypes: nothing to
compile. torch is imported only by the functions that take tensors, so `import kerntune` works without it.

    import torch, kerntune as kt
    rt = kt.Runtime("qwen7b-h100.db")                      # or Runtime() -> $KERNTUNE_DB / built-in defaults
    o = rt.attention(q, k, v, causal=True)                 # q [B,S,Hq,D], k/v [B,S,Hkv,D] fp16/bf16 CUDA
    pw = kt.quantize(w, "int4").to("cuda")                 # w [N, K] float
    q, k, v = rt.qkv_proj(x, pw, bias, positions, num_heads=28, num_kv_heads=4, head_dim=128, rope_theta=1e6)
    o = rt.attention_decode(q, k_cache, v_cache, seqlens_k, block_table)  # q [B,q_len,Hq,D], paged or contiguous

Install with `pip install .` at the repository root (the library is built into the package), or use a source
checkout with PYTHONPATH=python. The library is found by kt.load_library(): its argument, else $KERNTUNE_LIB, else
the package's own copy, <repo>/build-gpu/libkerntune.so, <repo>/build-rel/runtime/libkerntune.so,
<repo>/build/runtime/libkerntune.so. See python/README.md.
"""

from ._lib import (KT_DTYPE_BF16, KT_DTYPE_FP16, KT_ERROR_CUDA, KT_ERROR_DATABASE, KT_ERROR_INTERNAL,
                   KT_ERROR_INVALID_ARGUMENT, KT_ERROR_LIBRARY, KT_ERROR_NO_TORCH, KT_ERROR_UNSUPPORTED, KT_OK,
                   WEIGHT_FORMATS, KerntuneError, TorchNotInstalledError, format_for_activations, kt_attention_args,
                   kt_attention_decode_args, kt_attention_decode_problem, kt_attention_problem, kt_kv_cache_args,
                   kt_qkv_args, kt_qkv_problem, library_path, load_library, quantize_sizes, version,
                   weight_element_dtype)
from ._quant import PackedWeight, quantize
from ._runtime import Runtime, attention, attention_decode, default_runtime, explain_attention, explain_qkv, qkv_proj

#: Version of this Python package: the wheel's (written from CMakeLists.txt's project(VERSION) when it is built),
#: else, in a source checkout, CMakeLists.txt's itself. The library's is kt.version(); they agree.
try:
    from ._version import __version__
except ImportError:  # a source checkout (PYTHONPATH=python)
    from ._lib import source_version as _source_version
    __version__ = _source_version()

#: Weight format names accepted by quantize() and PackedWeight.
FORMATS = tuple(WEIGHT_FORMATS)

__all__ = [
    "KerntuneError", "TorchNotInstalledError", "load_library", "library_path", "version", "Runtime", "default_runtime",
    "attention", "attention_decode", "explain_attention", "qkv_proj", "explain_qkv", "PackedWeight", "quantize", "quantize_sizes",
    "FORMATS", "weight_element_dtype", "format_for_activations", "kt_attention_problem", "kt_attention_args",
    "kt_qkv_problem", "kt_qkv_args", "kt_kv_cache_args", "kt_attention_decode_problem", "kt_attention_decode_args",
    "KT_OK", "KT_ERROR_INVALID_ARGUMENT", "KT_ERROR_UNSUPPORTED", "KT_ERROR_CUDA", "KT_ERROR_DATABASE",
    "KT_ERROR_INTERNAL", "KT_ERROR_LIBRARY", "KT_ERROR_NO_TORCH", "KT_DTYPE_FP16", "KT_DTYPE_BF16",
]

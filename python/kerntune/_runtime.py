"""kt.Runtime: attention prefill, decode attention and the fused Q/K/V projection on torch CUDA tensors (torch imported lazily)."""

import atexit
import ctypes
import json
import math
import os
import threading
import weakref

from ._lib import (KT_DTYPE_BF16, KT_DTYPE_FP16, KT_ERROR_CUDA, KT_ERROR_DATABASE, KT_OK,
                   KV_CACHE_ARGS_PACK as _KV_CACHE_ARGS_PACK, QKV_ARGS_PACK as _QKV_ARGS_PACK,
                   QKV_PROBLEM_PACK as _QKV_PROBLEM_PACK, KerntuneError, check, format_id, import_torch,
                   kt_attention_args, kt_attention_decode_args, kt_attention_decode_problem, kt_attention_problem,
                   kt_qkv_problem, library,
                   raw_function, TorchNotInstalledError, WEIGHT_ELEMENT_DTYPES)
from ._quant import PackedWeight

__all__ = ["Runtime", "default_runtime", "attention", "attention_decode", "qkv_proj", "explain_attention", "explain_qkv"]

_EXPLAIN_BUF = 4096


def _torch():
    return import_torch("kerntune's tensor functions (kt.Runtime, attention, qkv_proj, explain_*)")


def _check_database_first(lib, db_path):
    """Opens the database the way kt_runtime_create does, before torch or CUDA are needed, so that a missing or bad
    database is reported as KT_ERROR_DATABASE on any machine (with or without torch or a GPU). kt_runtime_create checks
    the database before it looks for a GPU: its KT_ERROR_DATABASE is raised; a runtime it could create (a GPU without
    torch) is destroyed again; any other failure (no GPU) is left to the caller's own error."""
    handle = ctypes.c_void_p()
    path = None if db_path is None else os.fsencode(db_path)
    st = lib.kt_runtime_create(path, ctypes.byref(handle))
    if st == KT_OK:
        lib.kt_runtime_destroy(handle)
    elif st == KT_ERROR_DATABASE:
        check(lib, st)


# ---- argument checks (all raise before anything reaches the library) -----------------------------------------

def _check_tensor(torch, name, t, device):
    """t is a torch tensor on `device` (the runtime's CUDA device)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cuda":
        raise ValueError(f"{name} is on {t.device}; it must be a CUDA tensor on the runtime's device {device}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device}, but the runtime is on {device}")


def _kt_dtype(torch, name, dt):
    """torch.float16 / torch.bfloat16 (or "fp16"/"float16"/"bf16"/"bfloat16") -> kt_dtype; TypeError otherwise."""
    if dt in (torch.float16, "fp16", "float16"):
        return KT_DTYPE_FP16
    if dt in (torch.bfloat16, "bf16", "bfloat16"):
        return KT_DTYPE_BF16
    raise TypeError(f"{name} must be torch.float16 or torch.bfloat16, got {dt}")


def _i32(v, name, minimum=1):
    """A Python int in [minimum, 2^31) (ValueError otherwise; TypeError for a non-integer)."""
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    iv = int(v)
    if iv < minimum or iv >= 2 ** 31:
        raise ValueError(f"{name} must be in [{minimum}, 2^31), got {iv}")
    return iv


_I32_LIMIT = 2 ** 31
_OUT_NAMES = ("out[0] (q)", "out[1] (k)", "out[2] (v)")


def _head_int(v, name):
    """_i32(v, name) with a fast path for a plain int in range (the launch path calls it per call)."""
    if type(v) is int and 0 < v < _I32_LIMIT:
        return v
    return _i32(v, name)


def _row_stride(shape, strides, nlead, inner):
    """Stride of the rows when the first `nlead` dimensions of a tensor (shape, strides) are viewed as one (what
    t.view(rows, ...) would give): the stride of the innermost of them that is not of size 1; `inner` when all are of
    size 1; None when they cannot be merged (torch's view would fail)."""
    rs = None
    span = 0
    for i in range(nlead - 1, -1, -1):
        n = shape[i]
        if n == 1:
            continue
        if rs is None:
            rs = strides[i]
        elif strides[i] != span:
            return None
        span = n * strides[i]
    return inner if rs is None else rs


def _check_out(t, name, xdt, xs, M, H, D):
    """One preallocated qkv_proj output (already known to be a tensor on the runtime's device): dtype, shape [M, H, D]
    or x's leading dims + [H, D], [H, D] packed, rows of one stride (a multiple of 8, not overlapping), 16-byte
    aligned. Returns (row stride in elements, data pointer)."""
    if t.dtype is not xdt:
        raise TypeError(f"{name}.dtype is {t.dtype} but x.dtype is {xdt}")
    ts = t.shape
    n = len(ts)
    if not ((n == 3 and ts[0] == M and ts[1] == H and ts[2] == D) or
            (n == len(xs) + 1 and ts[-2] == H and ts[-1] == D and ts[:-2] == xs[:-1])):
        lead = tuple(xs[:-1])
        raise ValueError(f"{name} must be [{M}, {H}, {D}]" + (f" or {list(lead + (H, D))}" if len(lead) > 1 else "") +
                         f", got shape {tuple(ts)}")
    tst = t.stride()
    if tst[-1] != 1 or (H > 1 and tst[-2] != D):
        raise ValueError(f"{name}: the last two dimensions [H, D] must be contiguous, got strides {tuple(tst)}")
    rs = _row_stride(ts, tst, n - 2, H * D)
    if rs is None:
        raise ValueError(f"{name} of strides {tuple(tst)} cannot be viewed as [{M}, {H}, {D}] rows of one stride")
    if rs % 8 != 0:
        raise ValueError(f"{name}: row stride {rs} is not a multiple of 8 elements")
    if rs < H * D:
        raise ValueError(f"{name}: row stride {rs} is smaller than H * D = {H * D} (overlapping rows)")
    ptr = t.data_ptr()
    if ptr % 16 != 0:
        raise ValueError(f"{name}: data pointer {ptr:#x} is not 16-byte aligned")
    return rs, ptr


def _effective_strides(t):
    """Strides in elements, with the stride of every size-1 dimension (never stepped along) replaced by the
    contiguous value, so that e.g. a batch of 1 never fails the multiple-of-8 rule."""
    sizes, strides = list(t.shape), list(t.stride())
    out = [0] * len(sizes)
    nxt = 1
    for i in reversed(range(len(sizes))):
        out[i] = strides[i] if sizes[i] != 1 else nxt
        nxt = out[i] * sizes[i]
    return out


def _check_layout(name, t, written=False):
    """Last dimension contiguous, every other stride a multiple of 8 elements, data pointer 16-byte aligned;
    an output (written=True) must not be a broadcast view. Returns the effective strides."""
    if t.shape[-1] != 1 and t.stride(-1) != 1:
        raise ValueError(f"{name}: the last dimension must be contiguous (stride(-1) == 1), got strides "
                         f"{tuple(t.stride())} for shape {tuple(t.shape)}")
    eff = _effective_strides(t)
    for i, s in enumerate(eff[:-1]):
        if s % 8 != 0:
            raise ValueError(f"{name}: stride({i}) = {s} is not a multiple of 8 elements (the kernels use 16-byte "
                             f"loads); shape {tuple(t.shape)}, strides {tuple(t.stride())}")
        if written and s == 0 and t.shape[i] > 1:
            raise ValueError(f"{name}: stride({i}) is 0 (a broadcast view); an output needs distinct elements")
    if t.data_ptr() % 16 != 0:
        raise ValueError(f"{name}: data pointer {t.data_ptr():#x} is not 16-byte aligned (a view at element "
                         f"offset {t.storage_offset()})")
    return eff


def _shape_of(torch, name, t, ndim, dtype, what):
    """(shape tuple, kt_dtype) of a tensor or of a shape sequence with dtype= (explain_* functions)."""
    if isinstance(t, torch.Tensor):
        shape, dt = tuple(int(s) for s in t.shape), (t.dtype if dtype is None else dtype)
    else:
        try:
            shape = tuple(int(s) for s in t)
        except TypeError:
            raise TypeError(f"{name} must be a torch.Tensor or a shape, got {type(t).__name__}") from None
        if dtype is None:
            raise TypeError(f"{name} is a shape: pass dtype=torch.float16 or torch.bfloat16")
        dt = dtype
    if isinstance(ndim, int):
        ndim = (ndim,)
    if len(shape) not in ndim:
        raise ValueError(f"{name} must be {what}, got shape {shape}")
    return shape, _kt_dtype(torch, f"{name}.dtype", dt)


def _bind_primary_context(ordinal):
    """Makes device `ordinal`'s primary context (torch's) current on this thread, through the driver API, in
    case torch left no context (or another one) current here. Best effort: does nothing without libcuda."""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
        release = getattr(cu, "cuDevicePrimaryCtxRelease_v2", None) or cu.cuDevicePrimaryCtxRelease
    except (OSError, AttributeError):
        return
    cur, prim, dev = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_int()
    cu.cuCtxGetCurrent.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    cu.cuDeviceGet.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    cu.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    cu.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
    release.argtypes = [ctypes.c_int]
    if cu.cuCtxGetCurrent(ctypes.byref(cur)) != 0 or cu.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
        return
    if cu.cuDevicePrimaryCtxRetain(ctypes.byref(prim), dev) != 0:
        return
    try:
        if cur.value != prim.value:
            cu.cuCtxSetCurrent(prim)
    finally:
        release(dev)  # torch's runtime holds its own reference to the primary context


_live_runtimes = weakref.WeakSet()


class Runtime:
    """A kerntune runtime (kt_runtime_create): the tuning database, the device and the loaded kernels.

    Args:
        db_path: a tuning database written by `autotune` (str or path-like, opened read-only); None -> $KERNTUNE_DB
            if set, else no database (built-in default kernels, compiled with NVRTC on first use).
        device: (keyword) the CUDA device; None -> torch.cuda.current_device().

    The runtime lives in torch's primary CUDA context of that device (torch initialises CUDA first), so torch
    tensors are valid kernel arguments, and every launch goes on torch.cuda.current_stream(device). It may be
    shared by threads; close() must not race with calls. Use as a context manager or call close(); it is
    also closed when garbage collected and at interpreter exit (after synchronizing its device).

    Raises KerntuneError, checked in this order: KT_ERROR_LIBRARY (libkerntune.so cannot be loaded),
    KT_ERROR_DATABASE (missing or bad database: checked before torch is needed, so on any machine), KT_ERROR_NO_TORCH
    (torch not installed; the error is also a ModuleNotFoundError), KT_ERROR_CUDA (no GPU, or torch sees no CUDA
    device), KT_ERROR_UNSUPPORTED (GPU older than sm_80).
    """

    def __init__(self, db_path=None, *, device=None):
        self._handle = None
        self._lib = library()
        try:
            torch, no_torch = import_torch("kt.Runtime"), None
        except TorchNotInstalledError as e:
            torch, no_torch = None, e
        if no_torch is not None:
            _check_database_first(self._lib, db_path)
            raise no_torch
        if not torch.cuda.is_available():
            _check_database_first(self._lib, db_path)
            raise KerntuneError(KT_ERROR_CUDA, "kt.Runtime: torch sees no CUDA device (torch.cuda.is_available() "
                                               "is False)")
        torch.cuda.init()
        if device is None:
            index = torch.cuda.current_device()
        else:
            d = torch.device(device)
            if d.type != "cuda":
                raise ValueError(f"device must be a CUDA device, got {d}")
            index = d.index if d.index is not None else torch.cuda.current_device()
        self.device = torch.device("cuda", index)
        self._index = index
        # kt_qkv_proj with the structs passed as bytes (struct_packer): the launch path builds no ctypes Structure.
        self._qkv_raw = raw_function(self._lib, "kt_qkv_proj", ctypes.c_int,
                                     [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p])
        self._qkv_kv_raw = raw_function(self._lib, "kt_qkv_proj_kv_cache", ctypes.c_int,
                                        [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                         ctypes.c_void_p])
        # torch's current stream as an int without building a torch.cuda.Stream (about 0.1 us against 3-5 us);
        # a private torch function (triton uses it too), so torch.cuda.current_stream() stays the fallback.
        self._raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self.db_path = None if db_path is None else os.fspath(db_path)
        with torch.cuda.device(index):
            torch.cuda.synchronize(index)  # torch's primary context exists and is current on this thread
            _bind_primary_context(index)
            handle = ctypes.c_void_p()
            path = None if db_path is None else os.fsencode(db_path)
            check(self._lib, self._lib.kt_runtime_create(path, ctypes.byref(handle)))
            self._handle = handle.value
        _live_runtimes.add(self)

    # ---- lifetime ----

    @property
    def closed(self):
        return self._handle is None

    def close(self):
        """Synchronizes the device (kernels already queued must finish) and destroys the runtime. Idempotent."""
        h = getattr(self, "_handle", None)
        if h is None:
            return
        self._handle = None
        ctx = None
        try:
            torch = _torch()
            torch.cuda.synchronize(self.device)
            ctx = torch.cuda.device(self.device)
            ctx.__enter__()
        except Exception:
            ctx = None
        try:
            self._lib.kt_runtime_destroy(h)
        finally:
            if ctx is not None:
                try:
                    ctx.__exit__(None, None, None)
                except Exception:
                    pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        state = "closed" if self.closed else f"device={self.device}"
        return f"kt.Runtime(db_path={self.db_path!r}, {state})"

    def _live(self):
        h = self._handle
        if h is None:
            raise ValueError("this kt.Runtime is closed")
        return h

    def _stream(self, torch):
        """torch's current stream on the runtime's device (a CUstream as an int)."""
        if self._raw_stream is not None:
            return self._raw_stream(self._index)
        return torch.cuda.current_stream(self.device).cuda_stream

    def _launch(self, torch, fn, *args):
        """fn(*args, stream) on torch's current stream of the runtime's device, with that device current (a
        device guard only when torch's current device is another one). Returns fn's kt_status."""
        if torch.cuda.current_device() == self._index:
            return fn(*args, self._stream(torch))
        with torch.cuda.device(self._index):
            return fn(*args, self._stream(torch))

    # ---- attention ----

    def attention(self, q, k, v, causal=False, scale=None, out=None, return_lse=False):
        """o = softmax(scale * q k^T [causal mask]) v (FlashAttention-2 forward), launched on
        torch.cuda.current_stream(); asynchronous like any CUDA op.

        Args:
            q: [B, S_q, H_q, D] torch.float16 or torch.bfloat16 on the runtime's device.
            k, v: [B, S_k, H_kv, D], q's dtype and device. H_q must be a multiple of H_kv (grouped-query
                attention: query head h reads key/value head h // (H_q // H_kv)); D 64 or 128 (the library
                says KT_ERROR_UNSUPPORTED otherwise).
                Layout of q, k, v (and out): the last dimension contiguous (stride(-1) == 1), every other stride
                a multiple of 8 elements, data pointers 16-byte aligned; views into a fused QKV buffer work.
            causal: bottom-right aligned mask: query i sees keys j <= i + S_k - S_q (for S_q == S_k the usual
                lower triangle); a query row that sees no key gets o = 0 and lse = -inf.
            scale: softmax scale (finite, > 0); None -> 1 / sqrt(D).
            out: optional preallocated output [B, S_q, H_q, D], q's dtype and device (same layout rules).
            return_lse: also return lse, float32 [B, H_q, S_q] (natural-log log-sum-exp of the scaled scores).

        Returns:
            o, or (o, lse) when return_lse. o is `out` when given, else a new contiguous tensor.

        Raises:
            TypeError: an argument not a tensor; dtype not fp16/bf16; q, k, v, out of different dtypes.
            ValueError: a tensor not on the runtime's CUDA device; wrong rank or shape; empty dimension;
                H_q not a multiple of H_kv; last dimension not contiguous; stride not a multiple of 8; pointer
                not 16-byte aligned; scale not finite and > 0; closed runtime.
            KerntuneError: refused or failed in the library (KT_ERROR_UNSUPPORTED head_dim, KT_ERROR_CUDA, ...).
        """
        torch = _torch()
        h = self._live()
        dev = self.device
        for name, t in (("q", q), ("k", k), ("v", v)):
            _check_tensor(torch, name, t, dev)
        dtype = _kt_dtype(torch, "q.dtype", q.dtype)
        for name, t in (("k", k), ("v", v)):
            if t.dtype != q.dtype:
                raise TypeError(f"{name}.dtype is {t.dtype} but q.dtype is {q.dtype}: q, k and v must share one dtype")
        for name, t, desc in (("q", q, "[B, S_q, H_q, D]"), ("k", k, "[B, S_k, H_kv, D]"), ("v", v, "[B, S_k, H_kv, D]")):
            if t.dim() != 4:
                raise ValueError(f"{name} must be 4-D {desc}, got shape {tuple(t.shape)}")
        B, Sq, Hq, D = (int(s) for s in q.shape)
        Bk, Sk, Hkv, Dk = (int(s) for s in k.shape)
        if tuple(v.shape) != tuple(k.shape):
            raise ValueError(f"v must have k's shape {tuple(k.shape)}, got {tuple(v.shape)}")
        if Bk != B:
            raise ValueError(f"k has batch {Bk} but q has batch {B}")
        if Dk != D:
            raise ValueError(f"k has head_dim {Dk} but q has head_dim {D}")
        for name, val in (("batch", B), ("seqlen_q", Sq), ("num_heads", Hq), ("head_dim", D), ("seqlen_k", Sk),
                          ("num_kv_heads", Hkv)):
            _i32(val, name)
        if Hq % Hkv != 0:
            raise ValueError(f"q's {Hq} heads must be a multiple of k/v's {Hkv} heads (grouped-query attention)")
        if scale is None:
            softmax_scale = 0.0  # the library's 1 / sqrt(head_dim)
        else:
            softmax_scale = float(scale)
            if not (math.isfinite(softmax_scale) and softmax_scale > 0):
                raise ValueError(f"scale must be finite and > 0 (or None for 1/sqrt(D)), got {scale}")
        if out is None:
            out = torch.empty((B, Sq, Hq, D), dtype=q.dtype, device=dev)
        else:
            _check_tensor(torch, "out", out, dev)
            if out.dtype != q.dtype:
                raise TypeError(f"out.dtype is {out.dtype} but q.dtype is {q.dtype}")
            if tuple(out.shape) != (B, Sq, Hq, D):
                raise ValueError(f"out must have q's shape {(B, Sq, Hq, D)}, got {tuple(out.shape)}")
        sq = _check_layout("q", q)
        sk = _check_layout("k", k)
        sv = _check_layout("v", v)
        so = _check_layout("out", out, written=True)
        lse = torch.empty((B, Hq, Sq), dtype=torch.float32, device=dev) if return_lse else None

        p = kt_attention_problem(dtype, B, Sq, Sk, Hq, Hkv, D, 1 if causal else 0)
        a = kt_attention_args(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                              lse.data_ptr() if lse is not None else None,
                              sq[0], sq[1], sq[2], sk[0], sk[1], sk[2], sv[0], sv[1], sv[2], so[0], so[1], so[2],
                              softmax_scale)
        st = self._launch(torch, self._lib.kt_attention_prefill, h, ctypes.byref(p), ctypes.byref(a))
        check(self._lib, st)
        return (out, lse) if return_lse else out

    def explain(self, family, problem):
        """Which kernel the runtime would use for a problem of any registered family, and why: one line
        "<step>: <variant>: <why>". family: "attention_prefill", "qkv_proj", ...; problem: a dict as the tuning
        database stores it (e.g. {"dtype": "bf16", "batch": 1, "seqlen_q": 512, "seqlen_k": 512, "num_heads": 28,
        "num_kv_heads": 4, "head_dim": 128, "causal": True}). No GPU work.
        Raises TypeError (family not a str, problem not a dict), KerntuneError (KT_ERROR_INVALID_ARGUMENT for an
        unknown family or a missing field, KT_ERROR_UNSUPPORTED, ...)."""
        if not isinstance(family, str):
            raise TypeError(f"family must be a str, got {type(family).__name__}")
        if not isinstance(problem, dict):
            raise TypeError(f"problem must be a dict, got {type(problem).__name__}")
        h = self._live()
        buf = ctypes.create_string_buffer(_EXPLAIN_BUF)
        check(self._lib, self._lib.kt_explain(h, family.encode(), json.dumps(problem).encode(), buf, _EXPLAIN_BUF))
        return buf.value.decode("utf-8", "replace")

    def explain_attention(self, q, k, causal=False, *, dtype=None):
        """Which kernel attention(q, k, v, causal) would use, and why: one line "<step>: <variant>: <why>"
        (step = exact | nearest | default). q, k: tensors (only shape and dtype are read; no GPU work) or shapes
        [B, S_q, H_q, D] / [B, S_k, H_kv, D] with dtype= (torch.float16 / torch.bfloat16).
        Raises TypeError / ValueError (bad shapes or dtype), KerntuneError (KT_ERROR_UNSUPPORTED, ...)."""
        torch = _torch()
        h = self._live()
        qs, dt = _shape_of(torch, "q", q, 4, dtype, "[B, S_q, H_q, D]")
        ks, kdt = _shape_of(torch, "k", k, 4, dtype, "[B, S_k, H_kv, D]")
        if kdt != dt:
            raise TypeError("q and k must have one dtype")
        if ks[0] != qs[0] or ks[3] != qs[3]:
            raise ValueError(f"k {ks} does not match q {qs} (batch and head_dim must agree)")
        B, Sq, Hq, D = (_i32(v, n) for v, n in zip(qs, ("batch", "seqlen_q", "num_heads", "head_dim")))
        Sk, Hkv = _i32(ks[1], "seqlen_k"), _i32(ks[2], "num_kv_heads")
        p = kt_attention_problem(dt, B, Sq, Sk, Hq, Hkv, D, 1 if causal else 0)
        buf = ctypes.create_string_buffer(_EXPLAIN_BUF)
        check(self._lib, self._lib.kt_attention_explain(h, ctypes.byref(p), buf, _EXPLAIN_BUF))
        return buf.value.decode("utf-8", "replace")

    # ---- decode attention over a KV cache ----

    def attention_decode(self, q, k_cache, v_cache, seqlens_k, block_table=None, causal=True, softmax_scale=None,
                         return_lse=False, max_seqlen_k=None, out=None):
        """Decode attention over a KV cache (split-KV flash decoding, the query heads of one KV head packed into one
        tile), launched on torch.cuda.current_stream(); asynchronous.

        For sequence b, new token i and query head h: o[b, i, h] = softmax(scale * q[b, i, h] K_b^T) V_b over the
        first seqlens_k[b] tokens of KV head h // (H_q // H_kv) of sequence b's cache.

        Args:
            q: [B, q_len, H_q, D] torch.float16 / torch.bfloat16 on the runtime's device; q_len 1..16 (1 for
                decode, 2..16 for speculative / multi-token decode); D 64 or 128; H_q a multiple of H_kv.
            k_cache, v_cache: q's dtype and device, one shape:
                contiguous (block_table None): [B, S_max, H_kv, D];
                paged: [num_pages, page_size, H_kv, D], page_size 16, 32, 64, 128 or 256 (the vLLM / FlashInfer
                layout).
            seqlens_k: [B] int32 (int64 is converted): tokens of each sequence in the cache, the q_len new tokens
                included. On the device it is trusted (each value in [0, capacity], capacity = S_max or
                max_pages_per_seq * page_size); on the CPU it is checked here, then copied to the device.
            block_table: None (contiguous) or [B, max_pages_per_seq] int32 (int64 is converted): token t of sequence
                b lies in page block_table[b, t // page_size]. On the device its entries are trusted (those a
                length reaches in [0, num_pages)); on the CPU they are checked (with seqlens_k on the CPU too),
                then copied.
            causal: the q_len new tokens are the last q_len tokens of each sequence, causal among themselves
                (query i sees keys [0, seqlens_k[b] - q_len + i]); False: every query sees the whole sequence.
                A query that sees no key (a sequence of length 0) gets o = 0 and lse = -inf.
            softmax_scale: finite and > 0; None -> 1 / sqrt(D).
            return_lse: also return lse, float32 [B, H_q, q_len] (natural log).
            max_seqlen_k: the longest sequence (an int, at most the capacity), or None: the maximum of seqlens_k
                when it is on the CPU, else the capacity. The launch grid is sized for it rounded up to a power of
                two (at most the capacity), so that growing lengths resolve at most log2(capacity) problems.
            out: optional preallocated output [B, q_len, H_q, D] in q's dtype on the device.
            Layout of q, k_cache, v_cache, out: the last dimension contiguous, every other stride a multiple of 8
            elements, data pointers 16-byte aligned. seqlens_k and block_table: last dimension contiguous.

        Returns:
            o [B, q_len, H_q, D] (`out` when given), or (o, lse) when return_lse.

        Raises:
            TypeError: a tensor argument not a tensor; q's dtype not fp16/bf16; q, k_cache, v_cache, out of
                different dtypes; seqlens_k / block_table not int32 or int64.
            ValueError (naming the argument): a tensor not on the runtime's device (seqlens_k and block_table may
                be on the CPU); wrong rank or shape; q_len outside 1..16; head counts; an unsupported page size;
                a layout rule; softmax_scale not finite and > 0; max_seqlen_k outside [1, capacity]; a CPU
                seqlens_k value outside [0, capacity] or a CPU block-table entry outside [0, num_pages); closed
                runtime.
            KerntuneError: refused or failed in the library (KT_ERROR_UNSUPPORTED head_dim, KT_ERROR_CUDA, ...).
        """
        torch = _torch()
        h = self._live()
        dev = self.device
        for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
            _check_tensor(torch, name, t, dev)
        dtype = _kt_dtype(torch, "q.dtype", q.dtype)
        for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
            if t.dtype != q.dtype:
                raise TypeError(f"{name}.dtype is {t.dtype} but q.dtype is {q.dtype}: q and the caches must share "
                                f"one dtype")
        paged = block_table is not None
        cache_desc = "[num_pages, page_size, H_kv, D]" if paged else "[B, S_max, H_kv, D]"
        for name, t, desc in (("q", q, "[B, q_len, H_q, D]"), ("k_cache", k_cache, cache_desc),
                              ("v_cache", v_cache, cache_desc)):
            if t.dim() != 4:
                raise ValueError(f"{name} must be 4-D {desc}, got shape {tuple(t.shape)}")
        B, Lq, Hq, D = (int(s) for s in q.shape)
        C0, C1, Hkv, Dk = (int(s) for s in k_cache.shape)
        if tuple(v_cache.shape) != tuple(k_cache.shape):
            raise ValueError(f"v_cache must have k_cache's shape {tuple(k_cache.shape)}, got {tuple(v_cache.shape)}")
        if Dk != D:
            raise ValueError(f"k_cache has head_dim {Dk} but q has head_dim {D}")
        for name, val in (("batch (q.shape[0])", B), ("q_len (q.shape[1])", Lq), ("num_heads (q.shape[2])", Hq),
                          ("head_dim", D), ("num_kv_heads (k_cache.shape[2])", Hkv), ("k_cache.shape[0]", C0),
                          ("k_cache.shape[1]", C1)):
            _i32(val, name)
        if Lq > 16:
            raise ValueError(f"q_len (q.shape[1]) must be 1..16 (new tokens per sequence), got {Lq}")
        if Hq % Hkv != 0:
            raise ValueError(f"q's {Hq} heads must be a multiple of the cache's {Hkv} KV heads (grouped-query "
                             f"attention)")
        if paged:
            num_pages, page_size = C0, C1
            if page_size not in (16, 32, 64, 128, 256):
                raise ValueError(f"page_size (k_cache.shape[1]) must be 16, 32, 64, 128 or 256, got {page_size}")
        else:
            if C0 != B:
                raise ValueError(f"k_cache has batch {C0} but q has batch {B} (a contiguous cache is "
                                 f"[B, S_max, H_kv, D]; pass block_table for a paged one)")
            num_pages, page_size = 0, 0

        def index_tensor(name, t, ndim, shape):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if t.dtype not in (torch.int32, torch.int64):
                raise TypeError(f"{name} must be torch.int32 or torch.int64, got {t.dtype}")
            if t.dim() != ndim or int(t.shape[0]) != B:
                raise ValueError(f"{name} must be {shape}, got shape {tuple(t.shape)}")
            if t.device.type == "cuda" and t.device != dev:
                raise ValueError(f"{name} is on {t.device}, but the runtime is on {dev}")
            if t.device.type not in ("cuda", "cpu"):
                raise ValueError(f"{name} must be a CPU or CUDA tensor, got {t.device}")
            return t

        index_tensor("seqlens_k", seqlens_k, 1, f"[B] = [{B}]")
        if paged:
            index_tensor("block_table", block_table, 2, f"[B, max_pages_per_seq] = [{B}, ...]")
            max_pages = _i32(int(block_table.shape[1]), "max_pages_per_seq (block_table.shape[1])")
            capacity = max_pages * page_size
        else:
            max_pages = 0
            capacity = C1
        if capacity >= _I32_LIMIT:
            raise ValueError(f"the cache's capacity {capacity} tokens must be < 2^31")

        host_lengths = seqlens_k.device.type == "cpu"
        if host_lengths:
            lens = seqlens_k.to(torch.int64)
            bad = ((lens < 0) | (lens > capacity)).nonzero()
            if bad.numel():
                b = int(bad[0, 0])
                raise ValueError(f"seqlens_k[{b}] = {int(lens[b])} is outside [0, {capacity}], the cache's capacity")
            if paged and block_table.device.type == "cpu":
                need = (lens + page_size - 1) // page_size  # pages each sequence's length reaches
                cols = torch.arange(max_pages).unsqueeze(0)
                reached = cols < need.unsqueeze(1)
                bt = block_table.to(torch.int64)
                bad = (reached & ((bt < 0) | (bt >= num_pages))).nonzero()
                if bad.numel():
                    b, j = int(bad[0, 0]), int(bad[0, 1])
                    raise ValueError(f"block_table[{b}][{j}] = {int(bt[b, j])} is outside [0, num_pages = {num_pages})"
                                     f" (sequence {b} holds {int(lens[b])} tokens)")
        if max_seqlen_k is None:
            longest = max(1, int(seqlens_k.max())) if host_lengths else capacity
        else:
            longest = _i32(max_seqlen_k, "max_seqlen_k")
            if longest > capacity:
                raise ValueError(f"max_seqlen_k {longest} exceeds the cache's capacity of {capacity} tokens")
        kv_len = min(capacity, 1 << (longest - 1).bit_length())

        seq32 = seqlens_k
        if seq32.dtype is not torch.int32 or seq32.device != dev or not seq32.is_contiguous():
            seq32 = seq32.to(device=dev, dtype=torch.int32).contiguous()  # kept alive until the launch is queued
        bt32, bt_stride = None, 0
        if paged:
            bt32 = block_table
            if bt32.dtype is not torch.int32 or bt32.device != dev or bt32.stride(-1) != 1:
                bt32 = bt32.to(device=dev, dtype=torch.int32).contiguous()
            bt_stride = bt32.stride(0) if B > 1 else max_pages

        if softmax_scale is None:
            scale = 0.0  # the library's 1 / sqrt(head_dim)
        else:
            scale = float(softmax_scale)
            if not (math.isfinite(scale) and scale > 0):
                raise ValueError(f"softmax_scale must be finite and > 0 (or None for 1/sqrt(D)), got {softmax_scale}")
        if out is None:
            out = torch.empty((B, Lq, Hq, D), dtype=q.dtype, device=dev)
        else:
            _check_tensor(torch, "out", out, dev)
            if out.dtype != q.dtype:
                raise TypeError(f"out.dtype is {out.dtype} but q.dtype is {q.dtype}")
            if tuple(out.shape) != (B, Lq, Hq, D):
                raise ValueError(f"out must have q's shape {(B, Lq, Hq, D)}, got {tuple(out.shape)}")
        sq = _check_layout("q", q)
        sk = _check_layout("k_cache", k_cache)
        sv = _check_layout("v_cache", v_cache)
        so = _check_layout("out", out, written=True)
        lse = torch.empty((B, Hq, Lq), dtype=torch.float32, device=dev) if return_lse else None

        p = kt_attention_decode_problem(dtype, B, Lq, Hq, Hkv, D, kv_len, 1 if paged else 0, page_size,
                                        1 if causal else 0)
        a = kt_attention_decode_args(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr(),
                                     lse.data_ptr() if lse is not None else None, seq32.data_ptr(),
                                     bt32.data_ptr() if paged else None,
                                     sq[0], sq[1], sq[2], sk[0], sk[1], sk[2], sv[0], sv[1], sv[2], so[0], so[1], so[2],
                                     bt_stride, 0 if paged else C1, num_pages, max_pages, scale)
        st = self._launch(torch, self._lib.kt_attention_decode, h, ctypes.byref(p), ctypes.byref(a))
        check(self._lib, st)
        return (out, lse) if return_lse else out

    # ---- fused Q/K/V projection ----

    def qkv_proj(self, x, weight, bias=None, positions=None, *, num_heads, num_kv_heads, head_dim, rope_theta=None,
                 out=None, kv_cache=None, slot_mapping=None):
        """Fused Q/K/V projection: y = x W^T (+ bias), RoPE on the query and key heads when rope_theta is given,
        split into q, k, v. One kernel (dequantization of the packed weight inside the GEMM), launched on
        torch.cuda.current_stream(); asynchronous.

        Args:
            x: [M, K] or [B, S, K] torch.float16 / torch.bfloat16 on the runtime's device; last dimension
                contiguous, row stride a multiple of 8 elements ([B, S, K] must be viewable as [B*S, K]), data
                16-byte aligned. K a multiple of 64 and of the weight format's group.
            weight: a PackedWeight [N, K] on the runtime's device, N = (num_heads + 2 * num_kv_heads) * head_dim,
                rows = query heads, then key heads, then value heads. fp16/bf16 weights must match x's dtype.
            bias: None or [N] in x's dtype on the device, contiguous.
            positions: token positions for RoPE, int32 or int64, [M] (or [B, S]) on the device; required when
                rope_theta is given, ignored otherwise. int64 is converted to int32 (a copy).
            num_heads, num_kv_heads, head_dim: head geometry (head_dim 64 or 128; num_heads a multiple of
                num_kv_heads).
            rope_theta: RoPE base (e.g. 1e6 for Qwen2.5), finite and > 0; None = no RoPE. Rotate-half (Llama/
                Qwen): pairs (i, i + D/2), angle = pos * theta^(-2i/D).
            out: optional (q, k, v) preallocated in x's dtype on the device: [M, H, D] or [B, S, H, D] (H =
                num_heads for q, num_kv_heads for k and v); the last two dimensions packed ([H, D] contiguous),
                the row stride a multiple of 8 (larger strides address a KV cache or a fused buffer). With kv_cache,
                k and v may be None (only the cache receives K and V).
            kv_cache: optional (k_cache, v_cache), paged caches [num_pages, page_size, num_kv_heads, head_dim] in
                x's dtype on the device (the vLLM layout; any strides whose elements do not overlap, each a
                multiple of 8 but the last, which is 1; data 16-byte aligned; both of one num_pages and
                page_size). Token i's K (after RoPE) and V heads are written, in the same kernel, to slot
                slot_mapping[i] = page * page_size + offset; slots no token maps to are not touched. The cache
                write is its own kernel class (compiled in, so calls without it carry none of its code): it runs
                the config tuned for the same problem without it (the runtime's nearest step), compiled by NVRTC
                on first use unless the database holds it.
            slot_mapping: int32 or int64 [M] (or [B, S]) on the device, required with kv_cache (and only with
                it): each entry -1 (skip the token, e.g. padding) or in [0, num_pages * page_size), no slot twice.
                The values are NOT checked (device memory): a slot out of range writes outside the cache. int64
                is converted to int32 (a copy).

        Returns:
            (q, k, v): q [M, num_heads, head_dim], k and v [M, num_kv_heads, head_dim] (or [B, S, H, D] when x
            is 3-D); the `out` tensors when given. With kv_cache and no `out`, k and v are None (not computed
            outside the cache).

        Raises:
            TypeError: x / bias / positions / out not tensors or of the wrong dtype; weight not a PackedWeight;
                a head count not an int.
            ValueError: a tensor not on the runtime's CUDA device (weight included: use weight.to(device));
                wrong rank or shape (weight's n/k, bias, positions, out); layout (contiguity, multiple-of-8
                strides, 16-byte alignment); rope_theta not finite and > 0; positions missing with rope_theta;
                kv_cache without slot_mapping or the reverse, a cache or slot_mapping of the wrong shape / dtype /
                device / layout; closed runtime.
            KerntuneError: refused or failed in the library (KT_ERROR_UNSUPPORTED head_dim / K, KT_ERROR_CUDA, ...).
        """
        torch = _torch()
        h = self._live()
        idx = self._index
        Tensor = torch.Tensor
        if not (isinstance(x, Tensor) and x.is_cuda and x.get_device() == idx):
            _check_tensor(torch, "x", x, self.device)
        xdt = x.dtype
        if xdt is torch.float16:
            dtype = KT_DTYPE_FP16
        elif xdt is torch.bfloat16:
            dtype = KT_DTYPE_BF16
        else:
            raise TypeError(f"x.dtype must be torch.float16 or torch.bfloat16, got {xdt}")
        xs = x.shape
        nd = len(xs)
        if nd != 2 and nd != 3:
            raise ValueError(f"x must be [M, K] or [B, S, K], got shape {tuple(xs)}")
        K = xs[-1]
        M = xs[0] if nd == 2 else xs[0] * xs[1]
        if M < 1 or K < 1:
            raise ValueError(f"x must not be empty, got shape {tuple(xs)}")
        if M >= _I32_LIMIT:
            _i32(M, "m (tokens)")
        if K >= _I32_LIMIT:
            _i32(K, "k (x.shape[-1])")
        Hq, Hkv, D = _head_int(num_heads, "num_heads"), _head_int(num_kv_heads, "num_kv_heads"), \
            _head_int(head_dim, "head_dim")
        if Hq % Hkv != 0:
            raise ValueError(f"num_heads ({Hq}) must be a multiple of num_kv_heads ({Hkv})")
        N = (Hq + 2 * Hkv) * D

        xst = x.stride()
        if xst[-1] != 1:
            raise ValueError(f"x: the last dimension must be contiguous (stride(-1) == 1), got strides {tuple(xst)}")
        x_rs = _row_stride(xs, xst, nd - 1, K)
        if x_rs is None:
            raise ValueError(f"x of shape {tuple(xs)} and strides {tuple(xst)} cannot be viewed as "
                             f"[{M}, {K}] rows of one stride")
        if x_rs % 8 != 0:
            raise ValueError(f"x: row stride {x_rs} is not a multiple of 8 elements")
        if x_rs < K:
            raise ValueError(f"x: row stride {x_rs} is smaller than K = {K} (overlapping rows)")
        x_ptr = x.data_ptr()
        if x_ptr % 16 != 0:
            raise ValueError(f"x: data pointer {x_ptr:#x} is not 16-byte aligned")

        if not isinstance(weight, PackedWeight):
            raise TypeError(f"weight must be a kt.PackedWeight (kt.quantize(w, format)), got {type(weight).__name__}")
        wd, wsc, wz = weight.data, weight.scales, weight.zeros
        if (wd.numel(), wsc.numel(), wz.numel()) != weight._nbytes:
            raise ValueError(f"weight buffers hold {wd.numel()}, {wsc.numel()}, {wz.numel()} bytes, but "
                             f"{weight.format} [{weight.n}, {weight.k}] needs {weight._nbytes} (resized in place?)")
        if not (wd.is_cuda and wd.get_device() == idx):
            raise ValueError(f"weight is on {weight.device}, but the runtime is on {self.device}: use "
                             f"weight.to({str(self.device)!r})")
        if weight.n != N or weight.k != K:
            raise ValueError(f"weight is [{weight.n}, {weight.k}], expected [N, K] = [{N}, {K}] with N = "
                             f"(num_heads + 2 * num_kv_heads) * head_dim and K = x.shape[-1]")
        wfmt = weight.format
        # 16-bit formats: the activation dtype they need (a plain lookup: format_id below checks the name once)
        welem = WEIGHT_ELEMENT_DTYPES.get(wfmt)
        if welem is not None and welem != ("fp16" if dtype == KT_DTYPE_FP16 else "bf16"):
            raise ValueError(f"{wfmt} weights need {welem} activations, but x is {xdt}")
        for name, t in (("data", wd), ("scales", wsc), ("zeros", wz)):
            if not t.is_contiguous():
                raise ValueError(f"weight.{name} must be contiguous")
        wd_ptr = wd.data_ptr()
        if wd_ptr % 16 != 0:
            raise ValueError(f"weight.data: data pointer {wd_ptr:#x} is not 16-byte aligned")

        bias_ptr = 0
        if bias is not None:
            if not (isinstance(bias, Tensor) and bias.is_cuda and bias.get_device() == idx):
                _check_tensor(torch, "bias", bias, self.device)
            if bias.dtype is not xdt:
                raise TypeError(f"bias.dtype is {bias.dtype} but x.dtype is {xdt}")
            if len(bias.shape) != 1 or bias.shape[0] != N:
                raise ValueError(f"bias must be [N] = [{N}], got shape {tuple(bias.shape)}")
            if N > 1 and bias.stride(0) != 1:
                raise ValueError(f"bias must be contiguous, got stride {bias.stride(0)}")
            bias_ptr = bias.data_ptr()

        rope = rope_theta is not None
        theta = 0.0
        pos32 = None
        pos_ptr = 0
        if rope:
            theta = float(rope_theta)
            if not (math.isfinite(theta) and theta > 0):
                raise ValueError(f"rope_theta must be finite and > 0 (or None for no RoPE), got {rope_theta}")
            if positions is None:
                raise ValueError("positions is required when rope_theta is given (int32/int64 [M] token positions)")
            if not (isinstance(positions, Tensor) and positions.is_cuda and positions.get_device() == idx):
                _check_tensor(torch, "positions", positions, self.device)
            pdt = positions.dtype
            if pdt is not torch.int32 and pdt is not torch.int64:
                raise TypeError(f"positions must be torch.int32 or torch.int64, got {pdt}")
            ps = positions.shape
            if not ((len(ps) == 1 and ps[0] == M) or ps == xs[:-1]):
                lead = tuple(xs[:-1])
                raise ValueError(f"positions must be [{M}]" + (f" or {list(lead)}" if len(lead) > 1 else "") +
                                 f", got shape {tuple(ps)}")
            if pdt is torch.int32 and positions.is_contiguous():
                pos_ptr = positions.data_ptr()
            else:
                pos32 = positions.to(torch.int32).contiguous()  # kept alive until the launch is queued
                pos_ptr = pos32.data_ptr()

        kv = slot32 = None  # slot32: the int32 slot mapping, kept alive until the launch is queued
        if kv_cache is not None or slot_mapping is not None:
            kv, slot32 = self._kv_cache_args(torch, kv_cache, slot_mapping, xdt, xs, M, Hkv, D)
        if out is None and kv is not None:
            q = torch.empty((M, Hq, D), dtype=xdt, device=self.device)
            rows = (Hq * D, 0, 0)
            ptrs = (q.data_ptr(), 0, 0)
            result = (q if nd == 2 else q.view(*xs[:-1], Hq, D), None, None)
        elif out is None:
            lead = tuple(xs[:-1])
            q = torch.empty((M, Hq, D), dtype=xdt, device=self.device)
            k = torch.empty((M, Hkv, D), dtype=xdt, device=self.device)
            v = torch.empty((M, Hkv, D), dtype=xdt, device=self.device)
            rows = (Hq * D, Hkv * D, Hkv * D)
            ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr())
            result = (q, k, v) if nd == 2 else (q.view(*lead, Hq, D), k.view(*lead, Hkv, D), v.view(*lead, Hkv, D))
        else:
            if not isinstance(out, (tuple, list)) or len(out) != 3:
                raise TypeError("out must be a tuple (q, k, v) of preallocated tensors")
            rows = [0, 0, 0]
            ptrs = [0, 0, 0]
            for i in range(3):
                t = out[i]
                if t is None and i > 0 and kv is not None:
                    continue  # K / V into the cache only
                H = Hq if i == 0 else Hkv
                if not (isinstance(t, Tensor) and t.is_cuda and t.get_device() == idx):
                    _check_tensor(torch, _OUT_NAMES[i], t, self.device)
                rows[i], ptrs[i] = _check_out(t, _OUT_NAMES[i], xdt, xs, M, H, D)
            result = tuple(out)

        pb = _QKV_PROBLEM_PACK.pack(dtype, format_id(wfmt), M, K, Hq, Hkv, D, 0 if bias is None else 1, 1 if rope else 0)
        ab = _QKV_ARGS_PACK.pack(x_ptr, wd_ptr, wsc.data_ptr() if wsc.numel() else 0,
                                 wz.data_ptr() if wz.numel() else 0, bias_ptr, pos_ptr, ptrs[0], ptrs[1], ptrs[2],
                                 x_rs, rows[0], rows[1], rows[2], float(weight.tensor_scale), theta)
        if kv is None:
            st = self._launch(torch, self._qkv_raw, h, pb, ab)
        else:
            st = self._launch(torch, self._qkv_kv_raw, h, pb, ab, kv)
        if st != KT_OK:
            check(self._lib, st)
        return result

    def _kv_cache_args(self, torch, kv_cache, slot_mapping, xdt, xs, M, Hkv, D):
        """qkv_proj's kv_cache / slot_mapping checked and packed as kt_kv_cache_args bytes; returns (bytes, the int32
        slot mapping tensor to keep alive until the launch)."""
        if kv_cache is None:
            raise ValueError("slot_mapping is given without kv_cache=(k_cache, v_cache)")
        if slot_mapping is None:
            raise ValueError("kv_cache is given without slot_mapping (int32 [M] cache slot per token, -1 = skip)")
        if not isinstance(kv_cache, (tuple, list)) or len(kv_cache) != 2:
            raise TypeError("kv_cache must be a tuple (k_cache, v_cache) of tensors")
        dims = None
        fields = []
        for name, t in zip(("kv_cache[0] (k_cache)", "kv_cache[1] (v_cache)"), kv_cache):
            _check_tensor(torch, name, t, self.device)
            if t.dtype is not xdt:
                raise TypeError(f"{name}.dtype is {t.dtype} but x.dtype is {xdt}")
            ts = tuple(t.shape)
            if len(ts) != 4 or ts[2] != Hkv or ts[3] != D or ts[0] < 1 or ts[1] < 1:
                raise ValueError(f"{name} must be [num_pages, page_size, {Hkv}, {D}] (num_kv_heads, head_dim), got "
                                 f"shape {ts}")
            if dims is None:
                dims = ts[:2]
            elif ts[:2] != dims:
                raise ValueError(f"k_cache and v_cache must have one [num_pages, page_size], got {list(dims)} and "
                                 f"{list(ts[:2])}")
            eff = _check_layout(name, t, written=True)
            fields.append((t.data_ptr(), eff[0], eff[1], eff[2]))
        num_pages, page_size = _i32(dims[0], "num_pages (kv_cache.shape[0])"), _i32(dims[1], "page_size")
        _check_tensor(torch, "slot_mapping", slot_mapping, self.device)
        sdt = slot_mapping.dtype
        if sdt is not torch.int32 and sdt is not torch.int64:
            raise TypeError(f"slot_mapping must be torch.int32 or torch.int64, got {sdt}")
        ss = tuple(slot_mapping.shape)
        if not ((len(ss) == 1 and ss[0] == M) or ss == tuple(xs[:-1])):
            raise ValueError(f"slot_mapping must be [{M}] (one slot per token), got shape {ss}")
        slot32 = slot_mapping
        if sdt is not torch.int32 or not slot_mapping.is_contiguous():
            slot32 = slot_mapping.to(torch.int32).contiguous()
        (kp, k0, k1, k2), (vp, v0, v1, v2) = fields
        return _KV_CACHE_ARGS_PACK.pack(slot32.data_ptr(), kp, vp, k0, k1, k2, v0, v1, v2, num_pages,
                                        page_size), slot32

    def explain_qkv(self, x, weight, *, num_heads, num_kv_heads, head_dim, has_bias, rope, dtype=None):
        """Which kernel qkv_proj would use, and why: one line "<step>: <variant>: <why>". x: a tensor [M, K] /
        [B, S, K] (only shape and dtype are read; no GPU work) or a shape with dtype=; weight: a PackedWeight or
        a format name. has_bias, rope: bools. Raises TypeError / ValueError, KerntuneError."""
        torch = _torch()
        h = self._live()
        xs, dt = _shape_of(torch, "x", x, (2, 3), dtype, "[M, K] or [B, S, K]")
        M = 1
        for s in xs[:-1]:
            M *= s
        fmt = weight.format if isinstance(weight, PackedWeight) else weight
        p = kt_qkv_problem(dt, format_id(fmt), _i32(M, "m (tokens)"), _i32(xs[-1], "k (x.shape[-1])"),
                           _i32(num_heads, "num_heads"), _i32(num_kv_heads, "num_kv_heads"),
                           _i32(head_dim, "head_dim"), 1 if has_bias else 0, 1 if rope else 0)
        buf = ctypes.create_string_buffer(_EXPLAIN_BUF)
        check(self._lib, self._lib.kt_qkv_explain(h, ctypes.byref(p), buf, _EXPLAIN_BUF))
        return buf.value.decode("utf-8", "replace")


# ---- the default runtime and module-level functions ----------------------------------------------------------

_default = None
_default_lock = threading.Lock()


def default_runtime():
    """The runtime the module-level functions use: created on first use with Runtime() (database from
    $KERNTUNE_DB, the current CUDA device at that moment)."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = Runtime()
        return _default


def attention(q, k, v, causal=False, scale=None, out=None, return_lse=False):
    """default_runtime().attention(...): see Runtime.attention."""
    return default_runtime().attention(q, k, v, causal=causal, scale=scale, out=out, return_lse=return_lse)


def attention_decode(q, k_cache, v_cache, seqlens_k, block_table=None, **kwargs):
    """default_runtime().attention_decode(...): see Runtime.attention_decode."""
    return default_runtime().attention_decode(q, k_cache, v_cache, seqlens_k, block_table, **kwargs)


def qkv_proj(x, weight, bias=None, positions=None, **kwargs):
    """default_runtime().qkv_proj(...): see Runtime.qkv_proj."""
    return default_runtime().qkv_proj(x, weight, bias, positions, **kwargs)


def explain_attention(q, k, causal=False, **kwargs):
    """default_runtime().explain_attention(...): see Runtime.explain_attention."""
    return default_runtime().explain_attention(q, k, causal, **kwargs)


def explain_qkv(x, weight, **kwargs):
    """default_runtime().explain_qkv(...): see Runtime.explain_qkv."""
    return default_runtime().explain_qkv(x, weight, **kwargs)


@atexit.register
def _close_all():
    """Destroys every live runtime while CUDA is still up (Python's atexit runs before the CUDA runtime's)."""
    for rt in list(_live_runtimes):
        try:
            rt.close()
        except Exception:
            pass

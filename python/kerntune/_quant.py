"""Packed weights for the Q/K/V projection: kt.quantize and kt.PackedWeight (torch imported lazily)."""

import ctypes
import math
import numbers
import sys

from ._lib import check, element_format, format_arg, format_id, import_torch, int_arg, library, quantize_sizes

__all__ = ["PackedWeight", "quantize"]

#: The smallest normal fp32 (2^-126): the lower bound of nvfp4's tensor scale (a subnormal one is refused).
FLT_MIN = 2.0 ** -126


def _ptr(t):
    """Address of a tensor's data, or None for an empty tensor."""
    return t.data_ptr() if t.numel() > 0 else None


def _row_shape(n, nbytes):
    """[n, nbytes / n] for a non-empty buffer, [0] for an empty one."""
    return (n, nbytes // n) if nbytes > 0 else (0,)


class PackedWeight:
    """A weight W [n, k] (n = output features, k = input features) in kerntune's packed layout
    (templates/qkv_proj/quant_format.h), as kt_qkv_proj reads it.

    Attributes:
        format (str): "fp16", "bf16", "int8", "int4", "nf4", "mxfp4", "nvfp4", "fp16_kb64", "bf16_kb64" or a K-blocked
            packed format "int8_kb64", "int4_kb128", "nf4_kb128", "mxfp4_kb128", "nvfp4_kb128".
        n, k (int): the logical shape of W.
        data (torch.uint8 tensor): [n, k * bits / 8] bytes, row-major. fp16/bf16: little-endian 16-bit values
            (data.view(torch.float16) is W); int8: two's complement; 4-bit formats: element k in byte k // 2,
            LOW nibble for even k. fp16_kb64 / bf16_kb64: the same n * k 16-bit values K-blocked, [k / 64][n][64]
            (element (r, c) at ((c // 64) * n + r) * 64 + c % 64; read by the TMA kernels, wgmma_ws and
            wgmma_pairs, on sm_90a). The K-blocked packed formats: the row-major format's bytes as
            [k bytes / 64][n][64 bytes] (byte b of row r at ((b // 64) * n + r) * 64 + b % 64; read by gemv
            stages 0, 2 and 3 and wgmma_ws); scales and zeros as the row-major format's.
        scales (torch.uint8 tensor): [n, (k / group) * scale_bytes] bytes, row-major little-endian entries: int4
            fp16 per 128, nf4 fp32 absmax per 64, mxfp4 E8M0 per 32, nvfp4 E4M3 per 16; int8 [n, 4] (one fp32 per
            row). Empty (shape [0]) for fp16/bf16.
        zeros (torch.uint8 tensor): int4 only, [n, k / 128] zero points 0..15; empty (shape [0]) otherwise.
        tensor_scale (float): nvfp4 per-tensor fp32 scale (finite, >= 2^-126: a normal fp32); 1.0 for every other
            format.
    data, scales and zeros live on one device (`device`); kt_qkv_proj needs them on the runtime's GPU
    (pw.to("cuda")) with data 16-byte aligned, which freshly allocated tensors are.

    The attributes are read-only (assigning one raises AttributeError): the geometry (format, n, k) always matches
    the buffers' sizes, so dequantize() and qkv_proj never read past them. Make a new PackedWeight instead.

    The constructor wraps existing buffers (e.g. from an importer) and checks their sizes with
    kt_quantize_sizes; kt.quantize() is the usual way to make one.
    Raises TypeError (a buffer not a torch.uint8 tensor, format not a str, n or k not an int), ValueError (unknown
    format, buffers of the wrong size or on different devices, tensor_scale not finite and >= 2^-126 for nvfp4 or
    not 1 for another format), KerntuneError (n/k invalid for the format; KT_ERROR_NO_TORCH without torch).
    """

    __slots__ = ("format", "n", "k", "data", "scales", "zeros", "tensor_scale", "_nbytes")

    def __init__(self, format, n, k, data, scales, zeros, tensor_scale=1.0):
        torch = import_torch("kt.PackedWeight")
        fid = format_id(format)
        n, k = int_arg(n, "n"), int_arg(k, "k")
        want = quantize_sizes(fid, n, k)
        for name, t, nbytes in (("data", data, want[0]), ("scales", scales, want[1]), ("zeros", zeros, want[2])):
            if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8:
                raise TypeError(f"PackedWeight.{name} must be a torch.uint8 tensor, got "
                                f"{t.dtype if isinstance(t, torch.Tensor) else type(t).__name__}")
            if t.numel() != nbytes:
                raise ValueError(f"PackedWeight({format}, n={n}, k={k}).{name} has {t.numel()} bytes, expected {nbytes}")
        if not (data.device == scales.device == zeros.device):
            raise ValueError(f"PackedWeight data, scales and zeros must be on one device, got {data.device}, "
                             f"{scales.device}, {zeros.device}")
        tensor_scale = float(tensor_scale)
        if element_format(format) == "nvfp4":
            if not (math.isfinite(tensor_scale) and tensor_scale >= FLT_MIN):
                raise ValueError(f"PackedWeight({format}).tensor_scale must be finite and >= 2^-126 (a normal fp32), "
                                 f"got {tensor_scale}")
        elif tensor_scale != 1.0:
            raise ValueError(f"PackedWeight({format}).tensor_scale must be 1.0, got {tensor_scale}")
        init = object.__setattr__
        for name, value in (("format", format), ("n", n), ("k", k), ("data", data), ("scales", scales),
                            ("zeros", zeros), ("tensor_scale", tensor_scale), ("_nbytes", want)):
            init(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError(f"PackedWeight is read-only (cannot set {name!r}): its format, shape and buffers are fixed "
                             f"when it is made; make a new PackedWeight")

    def __delattr__(self, name):
        raise AttributeError(f"PackedWeight is read-only (cannot delete {name!r})")

    def __reduce__(self):
        """copy, deepcopy and pickle rebuild through the constructor (which checks the sizes again)."""
        return (PackedWeight, (self.format, self.n, self.k, self.data, self.scales, self.zeros, self.tensor_scale))

    @property
    def device(self):
        """The torch.device of data, scales and zeros."""
        return self.data.device

    @property
    def nbytes(self):
        """Bytes of data + scales + zeros."""
        return self.data.numel() + self.scales.numel() + self.zeros.numel()

    def to(self, device, non_blocking=False, copy=False):
        """A PackedWeight with data, scales and zeros moved to `device` (torch's Tensor.to semantics: tensors
        already there are shared unless copy=True). The original is left as it is."""
        return PackedWeight(self.format, self.n, self.k,
                            self.data.to(device, non_blocking=non_blocking, copy=copy),
                            self.scales.to(device, non_blocking=non_blocking, copy=copy),
                            self.zeros.to(device, non_blocking=non_blocking, copy=copy),
                            self.tensor_scale)

    def cuda(self, device=None):
        """self.to(device or the current CUDA device)."""
        torch = import_torch("PackedWeight.cuda")
        return self.to(torch.device("cuda", torch.cuda.current_device()) if device is None else device)

    def cpu(self):
        return self.to("cpu")

    def dequantize(self):
        """Exact values of the packed weight (kt_dequantize): a torch.float64 CPU tensor [n, k] = decode(q) *
        scale [* tensor_scale], the value the kernel decodes before rounding to its fp16/bf16 MMA operand.
        Raises KerntuneError (KT_ERROR_INVALID_ARGUMENT) for a corrupt weight (zero point > 15, NaN scale, NaN or
        infinite fp16/bf16 value, a buffer resized in place since construction, ...)."""
        torch = import_torch("PackedWeight.dequantize")
        lib = library()
        d, s, z = (t.detach().to("cpu").contiguous() for t in (self.data, self.scales, self.zeros))
        out = torch.empty((self.n, self.k), dtype=torch.float64)
        check(lib, lib.kt_dequantize(format_id(self.format), self.n, self.k, _ptr(d), d.numel(), _ptr(s), s.numel(),
                                     _ptr(z), z.numel(), self.tensor_scale, out.data_ptr(), out.numel() * 8))
        return out

    def __repr__(self):
        return (f"PackedWeight(format={self.format!r}, n={self.n}, k={self.k}, device={self.device}, "
                f"nbytes={self.nbytes}, tensor_scale={self.tensor_scale!r})")


def quantize(w, format):
    """Quantizes a float weight to kerntune's packed layout (kt_quantize = kt::quant::quantize).

    Args:
        w: torch tensor [N, K] of any floating dtype on any device (N = output features, K = input features;
            for the fused Q/K/V projection N = (num_heads + 2 * num_kv_heads) * head_dim, rows ordered query
            heads, key heads, value heads). It is converted to float32 on the CPU for the library.
        format: "fp16", "bf16" (round-to-nearest-even conversion), "int8" (per-row absmax), "int4" (asymmetric,
            group 128, fp16 scales), "nf4" (absmax per 64), "mxfp4" (E8M0 per 32), "nvfp4" (E4M3 per 16 + fp32
            tensor scale), "fp16_kb64" / "bf16_kb64" (the 16-bit values K-blocked, [K / 64][N][64]: faster weight
            streaming for the sm_90a TMA kernels). quant/quant.h documents each rule.

    Returns:
        PackedWeight on w's device (pw.to(device) moves it).

    Raises:
        TypeError: w not a torch tensor or not floating point; format not a str.
        ValueError: w not 2-D or empty; unknown format.
        KerntuneError: rejected by the library (KT_ERROR_INVALID_ARGUMENT): K not a multiple of 64 or of the
            format's group, a non-finite element, a value that overflows fp16.
    """
    torch = import_torch("kt.quantize")
    fid = format_id(format)
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"w must be a torch.Tensor, got {type(w).__name__}")
    if not w.is_floating_point():
        raise TypeError(f"w must be a floating-point tensor, got {w.dtype}")
    if w.dim() != 2:
        raise ValueError(f"w must be 2-D [N, K] (output features, input features), got shape {tuple(w.shape)}")
    n, k = (int(v) for v in w.shape)
    if n < 1 or k < 1:
        raise ValueError(f"w must not be empty, got shape {tuple(w.shape)}")
    db, sb, zb = quantize_sizes(fid, n, k)
    w32 = w.detach().to(device="cpu", dtype=torch.float32).contiguous()
    data = torch.empty(_row_shape(n, db), dtype=torch.uint8)
    scales = torch.empty(_row_shape(n, sb), dtype=torch.uint8)
    zeros = torch.empty(_row_shape(n, zb), dtype=torch.uint8)
    ts = ctypes.c_float(0.0)
    lib = library()
    check(lib, lib.kt_quantize(fid, w32.data_ptr(), w32.numel() * 4, n, k, _ptr(data), db, _ptr(scales), sb,
                               _ptr(zeros), zb, ctypes.byref(ts)))
    pw = PackedWeight(format, n, k, data, scales, zeros, ts.value)
    return pw if w.device.type == "cpu" else pw.to(w.device)


# ---- torch-free helpers (used by python/tests/test_kerntune_cpu.py) ------------------------------------------

_FLOAT32_CODES = ("f", "<f", "=f", "@f") if sys.byteorder == "little" else ("f", ">f", "=f", "@f")


def _float32_items(w, count):
    """A C-contiguous buffer of exactly `count` float32 items -> a ctypes c_float array holding a copy of it.
    TypeError for anything that is not a buffer of float32 items (a list, array('d'), a ctypes c_double array, raw
    bytes: no reinterpretation), ValueError for another item count."""
    try:
        mv = memoryview(w)
    except TypeError:
        raise TypeError(f"w must be a buffer of float32 values (array.array('f'), a ctypes c_float array, a float32 "
                        f"numpy array or memoryview), got {type(w).__name__}; for a list use array.array('f', w)") from None
    with mv:
        if mv.format not in _FLOAT32_CODES or mv.itemsize != 4:
            hint = "; raw bytes of float32 values: memoryview(b).cast('f')" if mv.format in ("B", "b", "c") else ""
            raise TypeError(f"w must hold float32 items, got a {type(w).__name__} of item format {mv.format!r} "
                            f"({mv.itemsize} bytes per item){hint}")
        if not mv.c_contiguous:
            raise ValueError("w must be C-contiguous")
        if mv.nbytes != count * 4:
            raise ValueError(f"w has {mv.nbytes // 4} float32 values, expected n * k = {count}")
        return (ctypes.c_float * count).from_buffer_copy(mv)


def _byte_buffer(name, b, nbytes):
    """A C-contiguous buffer of exactly `nbytes` bytes (any item type: packed weight buffers are bytes) -> a ctypes
    char array holding a copy (None when nbytes is 0). TypeError for a non-buffer, ValueError for another length."""
    try:
        mv = memoryview(b)
    except TypeError:
        raise TypeError(f"{name} must be a bytes-like object, got {type(b).__name__}") from None
    with mv:
        if not mv.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous")
        if mv.nbytes != nbytes:
            raise ValueError(f"{name} has {mv.nbytes} bytes, expected {nbytes} (kt.quantize_sizes)")
        return (ctypes.c_char * nbytes).from_buffer_copy(mv) if nbytes else None


def quantize_buffer(fmt, w, n, k):
    """kt_quantize on host memory without torch.

    Args:
        fmt: a format name (kt.FORMATS) or an int kt_weight_format.
        w: W [n, k] row-major as exactly n * k float32 values in a C-contiguous buffer: array.array('f'), a ctypes
            c_float array, a float32 numpy array or memoryview (raw bytes: memoryview(b).cast('f')). It is copied
            and only read.
        n, k: ints, the output and input features.

    Returns:
        (data, scales, zeros, tensor_scale): bytes of kt.quantize_sizes(fmt, n, k)'s lengths (b"" for an empty
        one) and a float (nvfp4's tensor scale, a normal fp32; 1.0 for every other format).

    Raises:
        TypeError: w not a buffer of float32 items (a list, array('d'), a c_double array, bytes); fmt, n or k of
            the wrong type.
        ValueError: w not of n * k values or not C-contiguous; an unknown format name.
        KerntuneError: the library's errors (KT_ERROR_INVALID_ARGUMENT: a bad shape, a non-finite value, ...).
    """
    lib = library()
    fid = format_arg(fmt)
    n, k = int_arg(n, "n"), int_arg(k, "k")
    db, sb, zb = quantize_sizes(fid, n, k)
    wbuf = _float32_items(w, n * k)
    d, s, z = (ctypes.create_string_buffer(nb) if nb else None for nb in (db, sb, zb))
    ts = ctypes.c_float(0.0)
    check(lib, lib.kt_quantize(fid, ctypes.cast(wbuf, ctypes.c_void_p), n * k * 4, n, k,
                               ctypes.cast(d, ctypes.c_void_p), db,
                               ctypes.cast(s, ctypes.c_void_p) if s is not None else None, sb,
                               ctypes.cast(z, ctypes.c_void_p) if z is not None else None, zb, ctypes.byref(ts)))
    return d.raw, s.raw if s is not None else b"", z.raw if z is not None else b"", ts.value


def dequantize_buffer(fmt, n, k, data, scales, zeros, tensor_scale):
    """kt_dequantize on host memory without torch: the exact values of a packed weight.

    Args:
        fmt: a format name (kt.FORMATS) or an int kt_weight_format.
        n, k: ints, the output and input features.
        data, scales, zeros: bytes-like objects of exactly kt.quantize_sizes(fmt, n, k)'s lengths (b"" for an empty
            one), as quantize_buffer returns them.
        tensor_scale: float, nvfp4's tensor scale (finite, >= 2^-126); 1.0 for every other format.

    Returns:
        a list of n * k floats, W [n, k] row-major.

    Raises:
        TypeError: a buffer that is not bytes-like; fmt, n, k or tensor_scale of the wrong type.
        ValueError: a buffer of another length than the format and shape need, or not C-contiguous.
        KerntuneError: the library's errors (KT_ERROR_INVALID_ARGUMENT: a bad shape, a NaN/infinite 16-bit value or
            scale, a zero point above 15, a negative int8/nf4 scale, a bad tensor_scale).
    """
    lib = library()
    fid = format_arg(fmt)
    n, k = int_arg(n, "n"), int_arg(k, "k")
    sizes = quantize_sizes(fid, n, k)
    bufs = [_byte_buffer(name, b, nb) for name, b, nb in zip(("data", "scales", "zeros"), (data, scales, zeros), sizes)]
    ptrs = [ctypes.cast(b, ctypes.c_void_p) if b is not None else None for b in bufs]
    if isinstance(tensor_scale, bool) or not isinstance(tensor_scale, numbers.Real):
        raise TypeError(f"tensor_scale must be a float, got {type(tensor_scale).__name__} {tensor_scale!r}")
    out = (ctypes.c_double * (n * k))()
    check(lib, lib.kt_dequantize(fid, n, k, ptrs[0], sizes[0], ptrs[1], sizes[1], ptrs[2], sizes[2],
                                 float(tensor_scale), ctypes.cast(out, ctypes.c_void_p), n * k * 8))
    return list(out)

#!/usr/bin/env python3
"""CPU tests of the kerntune Python package: no GPU and no torch needed (ctypes + libkerntune.so only).

Runs under pytest, or as a plain script (`python3 python/tests/test_kerntune_cpu.py`, exit status 1 on a failure).
The library: $KERNTUNE_LIB if set, else <repo>/build/runtime/libkerntune.so (cmake --build build).

Checks: the package imports without torch; version(); kt_quantize_sizes for every format; kt_quantize /
kt_dequantize through the torch-free helpers (exact values, errors with the library's message, exact buffer
lengths and float32 items required, NaN/inf and negative scales refused, nvfp4's tensor scale never subnormal);
Runtime() without torch (the database checked first, then KT_ERROR_NO_TORCH); the ctypes structs against
include/kerntune/kerntune.h (field names, offsets and sizes computed from the header's field list with the x86-64
System V layout rules); the enum values; every KT_API function declared with the header's parameters.
"""

import array
import ctypes
import math
import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

_torch_was_loaded = "torch" in sys.modules
import kerntune as kt  # noqa: E402
from kerntune import _lib, _quant  # noqa: E402

HEADER = (REPO / "include" / "kerntune" / "kerntune.h").read_text()
LIB_PATH = os.environ.get("KERNTUNE_LIB") or str(REPO / "build" / "runtime" / "libkerntune.so")
LIB = kt.load_library(LIB_PATH)

FORMATS = ("fp16", "bf16", "int8", "int4", "nf4", "mxfp4", "nvfp4", "fp16_kb64", "bf16_kb64", "int8_kb64", "int4_kb128",
           "nf4_kb128", "mxfp4_kb128", "nvfp4_kb128")
GROUP = {"fp16": 0, "bf16": 0, "int8": -1, "int4": 128, "nf4": 64, "mxfp4": 32, "nvfp4": 16, "fp16_kb64": 0,
         "bf16_kb64": 0, "int8_kb64": -1, "int4_kb128": 128, "nf4_kb128": 64, "mxfp4_kb128": 32, "nvfp4_kb128": 16}
SCALE_BYTES = {"fp16": 0, "bf16": 0, "int8": 4, "int4": 2, "nf4": 4, "mxfp4": 1, "nvfp4": 1, "fp16_kb64": 0,
               "bf16_kb64": 0, "int8_kb64": 4, "int4_kb128": 2, "nf4_kb128": 4, "mxfp4_kb128": 1, "nvfp4_kb128": 1}
BITS = {"fp16": 16, "bf16": 16, "int8": 8, "int4": 4, "nf4": 4, "mxfp4": 4, "nvfp4": 4, "fp16_kb64": 16,
        "bf16_kb64": 16, "int8_kb64": 8, "int4_kb128": 4, "nf4_kb128": 4, "mxfp4_kb128": 4, "nvfp4_kb128": 4}


def raises(exc_type, fn, *args, **kwargs):
    """Calls fn and returns the exception it raised; fails if it raised nothing or another type."""
    try:
        fn(*args, **kwargs)
    except exc_type as e:
        return e
    raise AssertionError(f"{getattr(fn, '__name__', fn)} did not raise {exc_type.__name__}")


# ---- import, library, version ------------------------------------------------------------------------------

def test_imports_without_torch():
    if not _torch_was_loaded:
        assert "torch" not in sys.modules, "importing kerntune imported torch"
    for name in ("load_library", "version", "Runtime", "attention", "qkv_proj", "explain_attention", "explain_qkv",
                 "quantize", "PackedWeight", "KerntuneError"):
        assert hasattr(kt, name), name


def test_version():
    v = kt.version()
    assert re.fullmatch(r"\d+\.\d+\.\d+", v), v
    project = re.search(r"project\(kerntune VERSION (\d+\.\d+\.\d+)", (REPO / "CMakeLists.txt").read_text())
    assert project and v == project.group(1), (v, project and project.group(1))
    assert kt.library_path() is not None and Path(kt.library_path()).resolve() == Path(LIB_PATH).resolve()


def test_package_version_is_the_library_version():
    # One source: CMakeLists.txt's project(VERSION), through the wheel's _version.py or the source checkout.
    assert kt.__version__ == kt.version(), (kt.__version__, kt.version())
    assert _lib.DEFAULT_LIBRARY_PATHS[0] == _lib.PACKAGE_DIR / "libkerntune.so"  # a wheel's own copy first


def test_find_nvrtc_wheel_looks_in_the_wheels_layout():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        assert _lib.find_nvrtc_wheel([d]) is None
        lib = Path(d) / "nvidia" / "cu13" / "lib"
        lib.mkdir(parents=True)
        (lib / "libnvrtc.so.13").write_bytes(b"")
        assert _lib.find_nvrtc_wheel(["/nonexistent", d]) == lib / "libnvrtc.so.13"


def test_load_library_errors_name_the_paths():
    e = raises(kt.KerntuneError, kt.load_library, "/nonexistent/libkerntune.so")
    assert e.status == kt.KT_ERROR_LIBRARY and e.status_name == "KT_ERROR_LIBRARY"
    assert "/nonexistent/libkerntune.so (not found)" in str(e), str(e)
    # The library loaded before is still the one in use.
    assert kt.version()
    old = os.environ.get("KERNTUNE_LIB")
    os.environ["KERNTUNE_LIB"] = "/nonexistent/env/libkerntune.so"
    try:
        saved = _lib._lib
        _lib._lib = None
        try:
            e = raises(kt.KerntuneError, kt.load_library)
            assert "$KERNTUNE_LIB" in str(e) and "/nonexistent/env/libkerntune.so" in str(e), str(e)
        finally:
            _lib._lib = saved
    finally:
        if old is None:
            del os.environ["KERNTUNE_LIB"]
        else:
            os.environ["KERNTUNE_LIB"] = old


# ---- quantization sizes and round trips (no torch) ----------------------------------------------------------

def test_quantize_sizes_every_format():
    for fmt in FORMATS:
        for n, k in ((1, 128), (5, 256), (4608, 3584)):
            d, s, z = kt.quantize_sizes(fmt, n, k)
            assert d == n * k * BITS[fmt] // 8, (fmt, n, k, d)
            g = GROUP[fmt]
            groups = 0 if g == 0 else 1 if g < 0 else k // g
            assert s == n * groups * SCALE_BYTES[fmt], (fmt, n, k, s)
            assert z == (n * (k // 128) if fmt in ("int4", "int4_kb128") else 0), (fmt, n, k, z)
        # by kt_weight_format value too
        assert kt.quantize_sizes(kt.WEIGHT_FORMATS[fmt], 2, 128) == kt.quantize_sizes(fmt, 2, 128)


def test_quantize_sizes_errors():
    cases = [(("int4", 4, 64), "group size 128"), (("fp16", 4, 96), "multiple of 64"),
             (("int8", 0, 128), "n must be >= 1"), ((14, 4, 128), "unknown weight_format 14"),
             (("nf4_kb128", 4, 64), "multiple of 128")]
    for args, words in cases:
        e = raises(kt.KerntuneError, kt.quantize_sizes, *args)
        assert e.status == kt.KT_ERROR_INVALID_ARGUMENT and e.status_name == "KT_ERROR_INVALID_ARGUMENT", e
        assert words in e.message and "kt_quantize_sizes" in e.message, e.message
    assert "unknown weight format 'int3'" in str(raises(ValueError, kt.quantize_sizes, "int3", 4, 128))


def _weights(n, k, seed=1):
    """Deterministic pseudo-random float32 weights (an LCG), some exact zeros."""
    x, out = seed, array.array("f")
    for i in range(n * k):
        x = (1103515245 * x + 12345) % (2 ** 31)
        out.append(0.0 if i % 17 == 0 else (x / 2 ** 31 - 0.5) * 0.2)
    return out


def test_quantize_round_trip_every_format():
    n, k = 6, 256
    w = _weights(n, k)
    norm = math.sqrt(sum(v * v for v in w))
    limits = {"fp16": 1e-3, "bf16": 5e-3, "int8": 2e-2, "int4": 0.15, "nf4": 0.15, "mxfp4": 0.25, "nvfp4": 0.2,
              "fp16_kb64": 1e-3, "bf16_kb64": 5e-3, "int8_kb64": 2e-2, "int4_kb128": 0.15, "nf4_kb128": 0.15,
              "mxfp4_kb128": 0.25, "nvfp4_kb128": 0.2}
    for fmt in FORMATS:
        data, scales, zeros, ts = _quant.quantize_buffer(fmt, w, n, k)
        assert (len(data), len(scales), len(zeros)) == kt.quantize_sizes(fmt, n, k), fmt
        assert ts == 1.0 or fmt in ("nvfp4", "nvfp4_kb128"), (fmt, ts)
        back = _quant.dequantize_buffer(fmt, n, k, data, scales, zeros, ts)
        err = math.sqrt(sum((a - b) ** 2 for a, b in zip(back, w))) / norm
        assert err < limits[fmt], (fmt, err)
        # Quantizing the exact dequantized values again is a fixed point for the scale-free formats.
        if fmt in ("fp16", "bf16"):
            again = _quant.quantize_buffer(fmt, array.array("f", back), n, k)
            assert again[0] == data, fmt


def test_quantize_exact_values():
    # fp16: every value here is representable -> bit-exact little-endian fp16 and exact round trip.
    vals = array.array("f", [(i - 64) / 8.0 for i in range(128)])
    data, scales, zeros, ts = _quant.quantize_buffer("fp16", vals, 1, 128)
    assert scales == b"" and zeros == b"" and ts == 1.0
    assert data[:2] == b"\x00\xc8"  # -8.0 = fp16 0xC800, little-endian
    assert data[128:130] == b"\x00\x00"  # element 64: 0.0
    assert _quant.dequantize_buffer("fp16", 1, 128, data, scales, zeros, ts) == list(vals)


def test_quantize_k_blocked_layout():
    # fp16_kb64 holds the fp16 bytes of W [n, k] as [k / 64][n][64]: element (r, c) at ((c // 64) * n + r) * 64 + c % 64.
    n, k = 3, 128
    w = _weights(n, k)
    for fmt, twin in (("fp16_kb64", "fp16"), ("bf16_kb64", "bf16")):
        rm = _quant.quantize_buffer(twin, w, n, k)[0]
        kb, scales, zeros, ts = _quant.quantize_buffer(fmt, w, n, k)
        assert scales == b"" and zeros == b"" and ts == 1.0 and len(kb) == len(rm) == 2 * n * k
        for r in range(n):
            for c in range(k):
                a, b = 2 * (r * k + c), 2 * (((c // 64) * n + r) * 64 + c % 64)
                assert kb[b:b + 2] == rm[a:a + 2], (fmt, r, c)
        assert kb != rm
        assert _quant.dequantize_buffer(fmt, n, k, kb, scales, zeros, ts) == _quant.dequantize_buffer(
            twin, n, k, rm, b"", b"", 1.0)


def test_weight_element_dtype_and_format_for_activations():
    # A format's element dtype exists exactly for the 16-bit formats, and the twin picked for an activation dtype keeps
    # the layout (row-major or K-blocked: the same packed bytes as quantize() of that twin) and has that element dtype.
    n, k = 2, 128
    w = _weights(n, k)
    for fmt in FORMATS:
        el = kt.weight_element_dtype(fmt)
        assert (el is not None) == (BITS[fmt] == 16), fmt
        for act in ("fp16", "bf16"):
            twin = kt.format_for_activations(fmt, act)
            assert twin in FORMATS, (fmt, act, twin)
            if el is None:
                assert twin == fmt
                continue
            assert kt.weight_element_dtype(twin) == act and twin.endswith("_kb64") == fmt.endswith("_kb64")
            assert (twin == fmt) == (el == act)
            # the twin holds the same bytes as the row-major 16-bit format of that dtype, in its own layout
            rm = _quant.quantize_buffer(act, w, n, k)[0]
            tb = _quant.quantize_buffer(twin, w, n, k)[0]
            assert (tb == rm) == (not twin.endswith("_kb64")), (fmt, act)
    assert kt.weight_element_dtype("fp16_kb64") == "fp16" and kt.format_for_activations("fp16_kb64", "bf16") == "bf16_kb64"
    e = raises(ValueError, kt.format_for_activations, "int4", "fp32")
    assert "act_dtype must be 'fp16' or 'bf16'" in str(e), e
    e = raises(ValueError, kt.weight_element_dtype, "fp8")
    assert "unknown weight format 'fp8'" in str(e), e
    raises(TypeError, kt.weight_element_dtype, 7)


def test_quantize_errors_carry_the_library_message():
    w = _weights(4, 128)
    bad = array.array("f", w)
    bad[2 * 128 + 5] = float("nan")
    e = raises(kt.KerntuneError, _quant.quantize_buffer, "int8", bad, 4, 128)
    assert e.status == kt.KT_ERROR_INVALID_ARGUMENT and "w[2, 5] is not finite" in e.message, e.message
    e = raises(kt.KerntuneError, _quant.quantize_buffer, "nvfp4", w, 4, 120)
    assert "multiple of 64" in e.message, e.message
    data, scales, zeros, ts = _quant.quantize_buffer("int4", w, 4, 128)
    e = raises(kt.KerntuneError, _quant.dequantize_buffer, "int4", 4, 128, data, scales, bytes([16]) + zeros[1:], ts)
    assert "zeros[0] = 16" in e.message, e.message
    e = raises(ValueError, _quant.dequantize_buffer, "int4", 4, 128, data, b"", zeros, ts)
    assert "scales has 0 bytes, expected 8" in str(e), e


# ---- issue 36: buffer sizes and element types, validation, Runtime without torch ---------------------------------

def test_dequantize_buffer_requires_exact_lengths():
    """Every buffer must have exactly the length the format and shape need: a short buffer, a long one, or an n * k
    far beyond it (once a segfault, or 1 MiB of process memory returned from a 1 KiB buffer) is refused by name
    before the library is called."""
    n, k = 4, 128
    data, scales, zeros, ts = _quant.quantize_buffer("int4", _weights(n, k), n, k)
    assert (len(data), len(scales), len(zeros)) == (256, 8, 4)
    cases = [
        (("int8", n, k, data[:10], b"\0" * 16, b"", 1.0), "data has 10 bytes, expected 512"),
        (("int8", n, k, bytes(512 + 1000), b"\0" * 16, b"", 1.0), "data has 1512 bytes, expected 512"),
        (("int4", n, k, data, scales[:2], zeros, ts), "scales has 2 bytes, expected 8"),
        (("int4", n, k, data, scales, b"", ts), "zeros has 0 bytes, expected 4"),
        (("fp16", n, k, bytes(1024), b"\0", b"", 1.0), "scales has 1 bytes, expected 0"),
        (("fp16", 4096, 128, bytes(1024), b"", b"", 1.0), "data has 1024 bytes, expected 1048576"),
        (("fp16", 1 << 20, 1 << 10, bytes(2048), b"", b"", 1.0), "data has 2048 bytes, expected 2147483648"),
    ]
    for args, words in cases:
        e = raises(ValueError, _quant.dequantize_buffer, *args)
        assert words in str(e), (args[:3], str(e))
    raises(TypeError, _quant.dequantize_buffer, "int4", n, k, list(data), scales, zeros, ts)
    raises(TypeError, _quant.dequantize_buffer, "int4", n, k, data, scales, zeros, "1.0")
    # Other byte containers of the right length are fine (the values are bytes).
    assert _quant.dequantize_buffer("int4", n, k, bytearray(data), memoryview(scales), array.array("B", zeros),
                                    ts) == _quant.dequantize_buffer("int4", n, k, data, scales, zeros, ts)


def test_c_abi_checks_byte_lengths():
    """The C ABI itself refuses a length that does not match (what protects every other caller)."""
    n, k = 4, 128
    out = (ctypes.c_double * (n * k))()
    d = ctypes.create_string_buffer(1024)
    st = LIB.kt_dequantize(kt.WEIGHT_FORMATS["fp16"], 4096, 128, ctypes.cast(d, ctypes.c_void_p), 1024, None, 0, None,
                           0, 1.0, ctypes.cast(out, ctypes.c_void_p), ctypes.sizeof(out))
    assert st == kt.KT_ERROR_INVALID_ARGUMENT
    msg = LIB.kt_last_error().decode()
    assert "kt_dequantize: data_bytes is 1024" in msg and "exactly 1048576" in msg, msg
    st = LIB.kt_dequantize(kt.WEIGHT_FORMATS["fp16"], n, k, ctypes.cast(d, ctypes.c_void_p), 1024, None, 0, None, 0,
                           1.0, ctypes.cast(out, ctypes.c_void_p), ctypes.sizeof(out) - 8)
    assert st == kt.KT_ERROR_INVALID_ARGUMENT and "out_bytes is 4088" in LIB.kt_last_error().decode()
    w = (ctypes.c_double * (n * k))()
    st = LIB.kt_quantize(kt.WEIGHT_FORMATS["fp16"], ctypes.cast(w, ctypes.c_void_p), ctypes.sizeof(w), n, k,
                         ctypes.cast(d, ctypes.c_void_p), 1024, None, 0, None, 0, ctypes.byref(ctypes.c_float()))
    assert st == kt.KT_ERROR_INVALID_ARGUMENT
    msg = LIB.kt_last_error().decode()
    assert "w_bytes is 4096" in msg and "exactly 2048 bytes of float32" in msg, msg


def test_quantize_buffer_requires_float32_items_and_exact_count():
    n, k = 4, 128
    ones = [1.0] * (n * k)
    # Not float32 items: refused, never reinterpreted (array('d') once quantized 1.0 as [0.0, 1.875]).
    for w, words in ((array.array("d", ones), "item format 'd'"), (array.array("i", [1] * (n * k)), "item format 'i'"),
                     ((ctypes.c_double * (n * k))(*ones), "item format '<d'"), (bytes(2048), "memoryview(b).cast('f')"),
                     (ones, "array.array('f', w)")):
        e = raises(TypeError, _quant.quantize_buffer, "fp16", w, n, k)
        assert words in str(e), (type(w).__name__, str(e))
    # The wrong count: a short ctypes array (once read 4 MiB past its end), a long array.
    e = raises(ValueError, _quant.quantize_buffer, "fp16", (ctypes.c_float * 4)(1, 2, 3, 4), 1024, 1024)
    assert "w has 4 float32 values, expected n * k = 1048576" in str(e), e
    e = raises(ValueError, _quant.quantize_buffer, "int4", array.array("f", [0.0] * (n * k + 100)), n, k)
    assert "w has 612 float32 values, expected n * k = 512" in str(e), e
    # float32 in any buffer: array('f'), c_float arrays, read-only bytes cast to 'f' -> the same packed weight.
    a = array.array("f", ones)
    want = _quant.quantize_buffer("fp16", a, n, k)
    assert want[0][:2] == b"\x00\x3c"  # 1.0 = fp16 0x3C00
    assert _quant.quantize_buffer("fp16", (ctypes.c_float * (n * k))(*ones), n, k) == want
    assert _quant.quantize_buffer("fp16", memoryview(a.tobytes()).cast("f"), n, k) == want
    assert a == array.array("f", ones)  # only read


def test_integer_and_format_arguments_are_not_coerced():
    for args in ((3.7, 64, 128), (True, 64, 64), (None, 64, 128), ("fp16", 64.9, 64), ("fp16", "64", 64),
                 ("fp16", 64, True)):
        e = raises(TypeError, kt.quantize_sizes, *args)
        assert "must be" in str(e), (args, str(e))
    assert kt.quantize_sizes(kt.WEIGHT_FORMATS["int4"], 64, 128) == kt.quantize_sizes("int4", 64, 128)
    raises(TypeError, _quant.quantize_buffer, "fp16", array.array("f", [0.0] * 128), 1.0, 128)


def test_dequantize_refuses_nan_inf_16bit_and_negative_absmax_scales():
    n, k = 2, 64
    w = array.array("f", [0.25] * (n * k))
    for fmt in ("fp16", "bf16", "fp16_kb64", "bf16_kb64"):
        data = bytearray(_quant.quantize_buffer(fmt, w, n, k)[0])
        half = fmt.startswith("fp16")
        for bits, what in ((0x7E00 if half else 0x7FC0, "is NaN"), (0x7C00 if half else 0x7F80, "is infinite")):
            d = bytearray(data)
            d[(64 + 5) * 2:(64 + 5) * 2 + 2] = bits.to_bytes(2, "little")  # element (1, 5), both layouts here
            e = raises(kt.KerntuneError, _quant.dequantize_buffer, fmt, n, k, bytes(d), b"", b"", 1.0)
            assert "data element w[1, 5]" in e.message and what in e.message, (fmt, e.message)
    for fmt in ("int8", "nf4"):
        data, scales, zeros, ts = _quant.quantize_buffer(fmt, w, n, k)
        bad = scales[:4] + array.array("f", [-1.0]).tobytes() + scales[8:]
        e = raises(kt.KerntuneError, _quant.dequantize_buffer, fmt, n, k, data, bad, zeros, ts)
        assert "scales entry 1 is negative (-1)" in e.message, e.message


def test_nvfp4_tiny_weights_get_a_normal_tensor_scale():
    """quantize never produces a tensor scale that dequantize (or a flush-to-zero kernel) refuses: weights whose
    absmax / 2688 is below 2^-126 get exactly 2^-126; an all-zero weight gets 1."""
    n, k = 2, 64
    for v in (1e-40, 1e-38, 3e-35, 0.0):
        for fmt in ("nvfp4", "nvfp4_kb128"):
            kk = 128 if fmt == "nvfp4_kb128" else k
            w = array.array("f", [v] * (n * kk))
            data, scales, zeros, ts = _quant.quantize_buffer(fmt, w, n, kk)
            assert ts == (1.0 if v == 0 else 2.0 ** -126), (fmt, v, ts)
            back = _quant.dequantize_buffer(fmt, n, kk, data, scales, zeros, ts)
            assert all(abs(x - w[0]) <= 0.25 * w[0] for x in back), (fmt, v, back[:4])
    data, scales, zeros, ts = _quant.quantize_buffer("nvfp4", array.array("f", [1e-40] * (n * k)), n, k)
    e = raises(kt.KerntuneError, _quant.dequantize_buffer, "nvfp4", n, k, data, scales, zeros, 3.78e-44)
    assert "tensor_scale must be finite and >= 2^-126" in e.message, e.message


def test_packed_weight_is_read_only():
    pw = object.__new__(kt.PackedWeight)  # no torch needed to check the class itself
    for name in ("n", "k", "format", "data", "scales", "zeros", "tensor_scale", "extra"):
        e = raises(AttributeError, setattr, pw, name, 4096)
        assert "read-only" in str(e), e
    raises(AttributeError, delattr, pw, "n")


class _NoTorch:
    """Makes `import torch` fail inside the block, whether or not torch is installed."""

    def __enter__(self):
        self.saved = sys.modules.get("torch", _NoTorch)
        sys.modules["torch"] = None
        return self

    def __exit__(self, *exc):
        if self.saved is _NoTorch:
            del sys.modules["torch"]
        else:
            sys.modules["torch"] = self.saved
        return False


def test_runtime_without_torch_checks_the_database_then_names_torch():
    with _NoTorch():
        e = raises(kt.KerntuneError, kt.Runtime, "/nonexistent/kerntune.db")
        assert e.status == kt.KT_ERROR_DATABASE and "/nonexistent/kerntune.db" in e.message, e
        old = os.environ.pop("KERNTUNE_DB", None)
        try:
            e = raises(kt.KerntuneError, kt.Runtime)
        finally:
            if old is not None:
                os.environ["KERNTUNE_DB"] = old
        assert e.status == kt.KT_ERROR_NO_TORCH and e.status_name == "KT_ERROR_NO_TORCH", e
        assert isinstance(e, ModuleNotFoundError) and e.name == "torch", e
        assert "kt.Runtime needs torch" in str(e), e
        for fn, args in ((kt.quantize, (None, "int4")), (kt.PackedWeight, ("int4", 4, 128, None, None, None))):
            e = raises(kt.TorchNotInstalledError, fn, *args)
            assert e.status == kt.KT_ERROR_NO_TORCH and "needs torch" in str(e), e


def test_runtime_create_without_gpu_reports_cuda():
    """kt_runtime_create through ctypes (no torch): OK on a GPU machine, KT_ERROR_CUDA with a message otherwise."""
    h = ctypes.c_void_p()
    st = LIB.kt_runtime_create(None, ctypes.byref(h))
    if st == kt.KT_OK:
        LIB.kt_runtime_destroy(h)
    else:
        assert st in (kt.KT_ERROR_CUDA, kt.KT_ERROR_DATABASE), st
        assert LIB.kt_last_error().decode(), "empty kt_last_error"
        assert LIB.kt_status_string(st).decode().startswith("KT_ERROR_")
    st = LIB.kt_runtime_create(b"/nonexistent/kerntune.db", ctypes.byref(h))
    assert st == kt.KT_ERROR_DATABASE, (st, LIB.kt_last_error())
    assert b"/nonexistent/kerntune.db" in LIB.kt_last_error()


# ---- ABI: structs, enums, functions against the header ----------------------------------------------------

# x86-64 System V (LP64): (size, alignment)
_CTYPES = {"int32_t": (4, 4), "int64_t": (8, 8), "float": (4, 4), "double": (8, 8), "size_t": (8, 8),
           "char": (1, 1), "int": (4, 4)}
_POINTER = (8, 8)


def _strip_comments(text):
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", text, flags=re.S))


def header_structs():
    """{name: [(field, size, align)]} for every `typedef struct { ... } name;` of the header."""
    out = {}
    for body, name in re.findall(r"typedef\s+struct\s*\{(.*?)\}\s*(\w+)\s*;", _strip_comments(HEADER), flags=re.S):
        fields = []
        for decl in body.split(";"):
            decl = " ".join(decl.replace("const ", " ").split())
            if not decl:
                continue
            m = re.fullmatch(r"(\w+)\s*(\*?)\s*(\w+)((?:\s*,\s*\*?\s*\w+)*)", decl)
            assert m, f"cannot parse field declaration {decl!r} of {name}"
            base = m.group(1)
            decls = [(m.group(2), m.group(3))] + [(d.count("*") and "*", d.replace("*", "").strip())
                                                  for d in m.group(4).split(",")[1:]]
            for star, field in decls:
                size_align = _POINTER if star else _CTYPES[base]
                fields.append((field, *size_align))
        out[name] = fields
    return out


def layout(fields):
    """Offsets and total size with the standard rules: each field at the next multiple of its alignment, the
    struct padded to a multiple of its largest alignment."""
    off, offsets, max_align = 0, {}, 1
    for name, size, align in fields:
        off = (off + align - 1) // align * align
        offsets[name] = (off, size)
        off += size
        max_align = max(max_align, align)
    return offsets, (off + max_align - 1) // max_align * max_align, max_align


def test_structs_match_header():
    structs = header_structs()
    assert set(structs) == {"kt_attention_problem", "kt_attention_args", "kt_qkv_problem", "kt_qkv_args",
                            "kt_attention_decode_problem", "kt_attention_decode_args", "kt_kv_cache_args"}, set(structs)
    expected_sizes = {"kt_attention_problem": 32, "kt_attention_args": 144, "kt_qkv_problem": 36, "kt_qkv_args": 120,
                      "kt_attention_decode_problem": 40, "kt_attention_decode_args": 176, "kt_kv_cache_args": 80}
    for name, fields in structs.items():
        cls = getattr(kt, name)
        offsets, size, align = layout(fields)
        assert [f for f, *_ in fields] == [f for f, _ in cls._fields_], (name, fields, cls._fields_)
        for field, (off, fsize) in offsets.items():
            desc = getattr(cls, field)
            assert (desc.offset, desc.size) == (off, fsize), (name, field, desc.offset, desc.size, off, fsize)
        assert ctypes.sizeof(cls) == size == expected_sizes[name], (name, ctypes.sizeof(cls), size)
        assert ctypes.alignment(cls) == align, (name, ctypes.alignment(cls), align)


def test_struct_packers_give_the_structs_bytes():
    """The launch path packs kt_qkv_problem / kt_qkv_args with struct_packer instead of building the Structures:
    the bytes must be the Structure's, padding included, with distinct values in every field (NULL as 0)."""
    for cls in (kt.kt_qkv_problem, kt.kt_qkv_args, kt.kt_kv_cache_args, kt.kt_attention_problem, kt.kt_attention_args,
                kt.kt_attention_decode_problem, kt.kt_attention_decode_args):
        packer = _lib.struct_packer(cls)
        vals = []
        for i, (name, ctype) in enumerate(cls._fields_):
            if ctype in (ctypes.c_float, ctypes.c_double):
                vals.append(0.5 + i)
            elif ctype is ctypes.c_void_p:
                vals.append(0x7f0000001000 + 16 * i)
            else:
                vals.append(-3 - i if ctype is ctypes.c_int64 else 1000 + i)
        assert packer.pack(*vals) == bytes(cls(*vals)), cls.__name__
        assert packer.size == ctypes.sizeof(cls), cls.__name__
    a = kt.kt_qkv_args(1, 2, None, None, 5, None, 7, 8, 9, 10, 11, 12, 13, 1.5, 1e6)
    assert _lib.QKV_ARGS_PACK.pack(1, 2, 0, 0, 5, 0, 7, 8, 9, 10, 11, 12, 13, 1.5, 1e6) == bytes(a)
    c = kt.kt_kv_cache_args(16, 32, 48, -1, -2, -3, -4, -5, -6, 100, 16)
    assert _lib.KV_CACHE_ARGS_PACK.pack(16, 32, 48, -1, -2, -3, -4, -5, -6, 100, 16) == bytes(c)
    assert (kt.kt_kv_cache_args.num_pages.offset, kt.kt_kv_cache_args.page_size.offset) == (72, 76)


def test_qkv_proj_kv_cache_refuses_null_arguments_by_name():
    """kt_qkv_proj_kv_cache's argument checks that need no GPU: a NULL kv or runtime, each named."""
    p = kt.kt_qkv_problem(kt.KT_DTYPE_BF16, kt.WEIGHT_FORMATS["int8"], 4, 3584, 28, 4, 128, 1, 1)
    a = kt.kt_qkv_args()
    kv = kt.kt_kv_cache_args()
    st = LIB.kt_qkv_proj_kv_cache(None, ctypes.byref(p), ctypes.byref(a), None, None)
    assert st == kt.KT_ERROR_INVALID_ARGUMENT and b"kt_qkv_proj_kv_cache: kv is NULL" in LIB.kt_last_error()
    st = LIB.kt_qkv_proj_kv_cache(None, ctypes.byref(p), ctypes.byref(a), ctypes.byref(kv), None)
    assert st == kt.KT_ERROR_INVALID_ARGUMENT and b"kt_qkv_proj_kv_cache: rt is NULL" in LIB.kt_last_error()


def test_row_stride_merges_like_view():
    """_row_stride (the qkv launch path's stand-in for t.view(rows, ...)): the innermost non-1 leading stride; the
    given inner size when every leading dim is 1; None when the leading dims do not merge."""
    from kerntune._runtime import _row_stride
    assert _row_stride((5, 64), (64, 1), 1, 64) == 64
    assert _row_stride((5, 64), (72, 1), 1, 64) == 72
    assert _row_stride((1, 64), (999, 1), 1, 64) == 64
    assert _row_stride((2, 8, 64), (512, 64, 1), 2, 64) == 64
    assert _row_stride((2, 8, 64), (1024, 128, 1), 2, 64) == 128
    assert _row_stride((2, 8, 64), (2048, 128, 1), 2, 64) is None  # batch stride is not 8 rows
    assert _row_stride((1, 8, 64), (7, 128, 1), 2, 64) == 128
    assert _row_stride((2, 1, 64), (96, 5, 1), 2, 64) == 96
    assert _row_stride((1, 1, 64), (3, 5, 1), 2, 64) == 64
    assert _row_stride((2, 8, 4, 128), (8 * 1536, 1536, 128, 1), 2, 512) == 1536  # [B, S, H, D] into a fused buffer


def test_enums_match_header():
    values = {k: int(v) for k, v in re.findall(r"\b(KT_\w+)\s*=\s*(\d+)", _strip_comments(HEADER))}
    assert values, "no enum values parsed"
    for name, v in values.items():
        if name.startswith("KT_WEIGHT_"):
            assert kt.WEIGHT_FORMATS[name[len("KT_WEIGHT_"):].lower()] == v, name
        else:
            assert getattr(_lib, name) == v, name
        if name.startswith(("KT_OK", "KT_ERROR_")):
            assert LIB.kt_status_string(v).decode() == name
    assert len([n for n in values if n.startswith("KT_WEIGHT_")]) == len(kt.FORMATS)


def _param_kind(decl):
    """A C parameter declaration of the header -> "ptr", "i32", "size", "f32" or "f64"."""
    decl = decl.strip()
    if "*" in decl:
        return "ptr"
    base = decl.replace("const ", "").split()[0]
    return {"int32_t": "i32", "kt_status": "i32", "size_t": "size", "float": "f32", "double": "f64"}[base]


def _ctype_kind(t):
    if t in (ctypes.c_void_p, ctypes.c_char_p) or hasattr(t, "_type_") and isinstance(t._type_, type):
        return "ptr"
    return {ctypes.c_int32: "i32", ctypes.c_int: "i32", ctypes.c_size_t: "size", ctypes.c_float: "f32",
            ctypes.c_double: "f64"}[t]


def test_every_api_function_is_declared():
    """Every KT_API function has a prototype with the header's parameters, in number and kind (a changed
    signature, e.g. the byte lengths added to kt_quantize, must reach the ctypes declaration)."""
    protos = re.findall(r"KT_API\s+[\w\s\*]+?\b(kt_\w+)\s*\(([^)]*)\)", _strip_comments(HEADER))
    names = [n for n, _ in protos]
    assert "kt_quantize" in names and "kt_dequantize" in names and "kt_quantize_sizes" in names, names
    assert set(names) == set(_lib._PROTOTYPES), set(names) ^ set(_lib._PROTOTYPES)
    for n, params in protos:
        assert getattr(LIB, n).argtypes is not None, n
        want = [] if params.strip() in ("", "void") else [_param_kind(p) for p in params.split(",")]
        got = [_ctype_kind(t) for t in _lib._PROTOTYPES[n][1]]
        assert got == want, (n, got, want)
    # The loader's probe tells this build (byte lengths in kt_quantize / kt_dequantize) from an older one.
    assert _lib._has_buffer_lengths(LIB)


def _decode_call(problem=None, args=None, **changes):
    """kt_attention_decode with rt NULL on a valid paged bf16 problem (B 2, q_len 4, 28/4 heads, D 128, kv_len 300,
    page 64) whose fields `changes` override (problem or args fields by name); returns (status, message). The
    problem and the arguments are checked before the runtime handle, so no GPU is needed."""
    p = problem or kt.kt_attention_decode_problem(kt.KT_DTYPE_BF16, 2, 4, 28, 4, 128, 300, 1, 64, 1)
    base = 0x7f0000000000
    a = args or kt.kt_attention_decode_args(base, base + 0x100000, base + 0x200000, base + 0x300000, None,
                                            base + 0x400000, base + 0x500000,
                                            4 * 28 * 128, 28 * 128, 128, 64 * 4 * 128, 4 * 128, 128,
                                            64 * 4 * 128, 4 * 128, 128, 4 * 28 * 128, 28 * 128, 128,
                                            8, 0, 40, 8, 0.0)
    for k, v in changes.items():
        setattr(p if hasattr(p, k) and k not in ("q", "k", "v", "o") else a, k, v)
    st = LIB.kt_attention_decode(None, ctypes.byref(p), ctypes.byref(a), None)
    return st, LIB.kt_last_error().decode()


def test_attention_decode_c_abi_names_the_bad_argument():
    """Every bad input of a decode call is refused before launch with a message naming the argument: q_len above
    16, an unsupported page size, head counts, an unknown dtype, null and misaligned pointers, strides, kv_len past
    the cache's capacity, the block table's geometry. A valid call reaches the runtime check (rt is NULL)."""
    st, msg = _decode_call()
    assert st == kt.KT_ERROR_INVALID_ARGUMENT and "rt is NULL" in msg, (st, msg)
    cases = [
        (dict(q_len=17), kt.KT_ERROR_UNSUPPORTED, "q_len"),
        (dict(page_size=48), kt.KT_ERROR_UNSUPPORTED, "page_size"),
        (dict(page_size=512), kt.KT_ERROR_UNSUPPORTED, "page_size"),
        (dict(num_kv_heads=5), kt.KT_ERROR_UNSUPPORTED, "num_kv_heads"),
        (dict(head_dim=96), kt.KT_ERROR_UNSUPPORTED, "head_dim"),
        (dict(dtype=7), kt.KT_ERROR_INVALID_ARGUMENT, "dtype"),
        (dict(batch=0), kt.KT_ERROR_INVALID_ARGUMENT, "batch"),
        (dict(kv_len=0), kt.KT_ERROR_INVALID_ARGUMENT, "kv_len"),
        (dict(kv_len=8 * 64 + 1), kt.KT_ERROR_INVALID_ARGUMENT, "capacity"),
        (dict(seqlens_k=None), kt.KT_ERROR_INVALID_ARGUMENT, "seqlens_k"),
        (dict(block_table=None), kt.KT_ERROR_INVALID_ARGUMENT, "block_table"),
        (dict(q=None), kt.KT_ERROR_INVALID_ARGUMENT, "q"),
        (dict(max_pages_per_seq=0), kt.KT_ERROR_INVALID_ARGUMENT, "max_pages_per_seq"),
        (dict(block_table_stride=4), kt.KT_ERROR_INVALID_ARGUMENT, "block_table_stride"),
        (dict(num_pages=0), kt.KT_ERROR_INVALID_ARGUMENT, "num_pages"),
        (dict(k_stride_row=4 * 128 + 4), kt.KT_ERROR_INVALID_ARGUMENT, "k_row_stride"),
        (dict(softmax_scale=float("inf")), kt.KT_ERROR_INVALID_ARGUMENT, "softmax_scale"),
    ]
    for change, want_status, word in cases:
        st, msg = _decode_call(**change)
        assert st == want_status and word in msg, (change, st, msg)
    # a misaligned pointer is named
    p = kt.kt_attention_decode_problem(kt.KT_DTYPE_BF16, 2, 4, 28, 4, 128, 300, 1, 64, 1)
    st0, _ = _decode_call(problem=p)
    assert st0 == kt.KT_ERROR_INVALID_ARGUMENT
    a = kt.kt_attention_decode_args(0x7f0000000008, 0x7f0000100000, 0x7f0000200000, 0x7f0000300000, None,
                                    0x7f0000400000, 0x7f0000500000, 4 * 28 * 128, 28 * 128, 128, 64 * 4 * 128,
                                    4 * 128, 128, 64 * 4 * 128, 4 * 128, 128, 4 * 28 * 128, 28 * 128, 128, 8, 0, 40, 8,
                                    0.0)
    st, msg = _decode_call(problem=p, args=a)
    assert st == kt.KT_ERROR_INVALID_ARGUMENT and "q must be 16-byte aligned" in msg, (st, msg)
    # contiguous: a page size is refused, and kv_len past S_max names the capacity
    p = kt.kt_attention_decode_problem(kt.KT_DTYPE_FP16, 2, 1, 8, 8, 64, 100, 0, 16, 0)
    st, msg = _decode_call(problem=p)
    assert st == kt.KT_ERROR_UNSUPPORTED and "page_size" in msg, (st, msg)
    p.page_size = 0
    a = kt.kt_attention_decode_args(0x7f0000000000, 0x7f0000100000, 0x7f0000200000, 0x7f0000300000, None,
                                    0x7f0000400000, None, 8 * 64, 8 * 64, 64, 64 * 8 * 64, 8 * 64, 64,
                                    64 * 8 * 64, 8 * 64, 64, 8 * 64, 8 * 64, 64, 0, 64, 0, 0, 0.0)
    st, msg = _decode_call(problem=p, args=a)
    assert st == kt.KT_ERROR_INVALID_ARGUMENT and "capacity" in msg and "S_max" in msg, (st, msg)
    a.s_max = 100
    a.k_stride_batch = a.v_stride_batch = 100 * 8 * 64
    st, msg = _decode_call(problem=p, args=a)
    assert st == kt.KT_ERROR_INVALID_ARGUMENT and "rt is NULL" in msg, (st, msg)


# ---- runner -------------------------------------------------------------------------------------------------

def test_element_format_of_every_format():
    """element_format maps the K-blocked layouts to the row-major format whose values they hold (as
    kt::quant::format_element) and rejects unknown names."""
    from kerntune._lib import element_format
    want = {f: f for f in ("fp16", "bf16", "int8", "int4", "nf4", "mxfp4", "nvfp4")}
    want.update({"fp16_kb64": "fp16", "bf16_kb64": "bf16", "int8_kb64": "int8", "int4_kb128": "int4",
                 "nf4_kb128": "nf4", "mxfp4_kb128": "mxfp4", "nvfp4_kb128": "nvfp4"})
    assert set(want) == set(FORMATS)
    for fmt in FORMATS:
        assert element_format(fmt) == want[fmt], fmt
    raises(ValueError, element_format, "int4_kb64")


def main():
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_") and callable(f)]
    failed = 0
    for name, fn in tests:
        try:
            fn()
            print(f"PASS {name}")
        except Exception as e:  # noqa: BLE001
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")
    print(f"{len(tests) - failed} passed, {failed} failed (library {LIB_PATH})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())


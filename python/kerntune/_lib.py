"""Loading libkerntune.so and the ctypes mirror of include/kerntune/kerntune.h (no torch here).

Every struct below matches the C header field for field (x86-64 / LP64 layout); python/tests/
test_kerntune_cpu.py parses the header and checks names, offsets and sizes.
"""

import ctypes
import os
import struct
import threading
from pathlib import Path

# ---- kt_status / kt_dtype / kt_weight_format (values as in the header) ----------------------------------------
KT_OK = 0
KT_ERROR_INVALID_ARGUMENT = 1
KT_ERROR_UNSUPPORTED = 2
KT_ERROR_CUDA = 3
KT_ERROR_DATABASE = 4
KT_ERROR_INTERNAL = 5
#: Not a kt_status: the status of a KerntuneError raised because libkerntune.so could not be loaded (or lacks
#: a function this package needs).
KT_ERROR_LIBRARY = -1
#: Not a kt_status: the status of the KerntuneError (also a ModuleNotFoundError) raised when a function that takes
#: torch tensors (Runtime, attention, qkv_proj, quantize, PackedWeight, ...) is called without torch installed.
KT_ERROR_NO_TORCH = -2

_STATUS_NAMES = {
    KT_OK: "KT_OK",
    KT_ERROR_INVALID_ARGUMENT: "KT_ERROR_INVALID_ARGUMENT",
    KT_ERROR_UNSUPPORTED: "KT_ERROR_UNSUPPORTED",
    KT_ERROR_CUDA: "KT_ERROR_CUDA",
    KT_ERROR_DATABASE: "KT_ERROR_DATABASE",
    KT_ERROR_INTERNAL: "KT_ERROR_INTERNAL",
    KT_ERROR_LIBRARY: "KT_ERROR_LIBRARY",
    KT_ERROR_NO_TORCH: "KT_ERROR_NO_TORCH",
}

KT_DTYPE_FP16 = 0
KT_DTYPE_BF16 = 1

KT_WEIGHT_FP16 = 0
KT_WEIGHT_BF16 = 1
KT_WEIGHT_INT8 = 2
KT_WEIGHT_INT4 = 3
KT_WEIGHT_NF4 = 4
KT_WEIGHT_MXFP4 = 5
KT_WEIGHT_NVFP4 = 6
KT_WEIGHT_FP16_KB64 = 7
KT_WEIGHT_BF16_KB64 = 8
KT_WEIGHT_INT8_KB64 = 9
KT_WEIGHT_INT4_KB128 = 10
KT_WEIGHT_NF4_KB128 = 11
KT_WEIGHT_MXFP4_KB128 = 12
KT_WEIGHT_NVFP4_KB128 = 13

#: Weight format names (kt::quant::format_name) -> kt_weight_format.
WEIGHT_FORMATS = {
    "fp16": KT_WEIGHT_FP16,
    "bf16": KT_WEIGHT_BF16,
    "int8": KT_WEIGHT_INT8,
    "int4": KT_WEIGHT_INT4,
    "nf4": KT_WEIGHT_NF4,
    "mxfp4": KT_WEIGHT_MXFP4,
    "nvfp4": KT_WEIGHT_NVFP4,
    "fp16_kb64": KT_WEIGHT_FP16_KB64,
    "bf16_kb64": KT_WEIGHT_BF16_KB64,
    "int8_kb64": KT_WEIGHT_INT8_KB64,
    "int4_kb128": KT_WEIGHT_INT4_KB128,
    "nf4_kb128": KT_WEIGHT_NF4_KB128,
    "mxfp4_kb128": KT_WEIGHT_MXFP4_KB128,
    "nvfp4_kb128": KT_WEIGHT_NVFP4_KB128,
}


class KerntuneError(Exception):
    """A failure reported by libkerntune (or the library could not be loaded).

    Attributes:
        status (int): the kt_status (1 INVALID_ARGUMENT, 2 UNSUPPORTED, 3 CUDA, 4 DATABASE, 5 INTERNAL), or
            -1 (KT_ERROR_LIBRARY) when libkerntune.so could not be loaded or lacks a needed function, or
            -2 (KT_ERROR_NO_TORCH) when torch is not installed (then the error is a TorchNotInstalledError).
        status_name (str): kt_status_string(status), e.g. "KT_ERROR_UNSUPPORTED".
        message (str): kt_last_error() of the failing call (the library's message).
    """

    def __init__(self, status, message, status_name=None):
        self.status = int(status)
        self.status_name = status_name or _STATUS_NAMES.get(self.status, "KT_ERROR_UNKNOWN_STATUS")
        self.message = message
        super().__init__(f"{self.status_name}: {message}")


class TorchNotInstalledError(KerntuneError, ModuleNotFoundError):
    """KerntuneError (status KT_ERROR_NO_TORCH = -2) raised by a function that takes torch tensors when torch cannot
    be imported. Also a ModuleNotFoundError (name "torch"), so `except ImportError` keeps working."""

    def __init__(self, what, cause):
        super().__init__(KT_ERROR_NO_TORCH, f"{what} needs torch, which cannot be imported ({cause}); install PyTorch "
                                            f"(with CUDA for the kernels). The torch-free parts of kerntune (version, "
                                            f"quantize_sizes, load_library) work without it.")
        self.name = "torch"


def import_torch(what):
    """The torch module; TorchNotInstalledError naming `what` (e.g. "kt.Runtime") when it cannot be imported."""
    try:
        import torch
    except ImportError as e:
        raise TorchNotInstalledError(what, e) from e
    return torch


# ---- structs ------------------------------------------------------------------------------------------------

class kt_attention_problem(ctypes.Structure):
    """include/kerntune/kerntune.h: kt_attention_problem (8 x int32, 32 bytes)."""
    _fields_ = [
        ("dtype", ctypes.c_int32),
        ("batch", ctypes.c_int32),
        ("seqlen_q", ctypes.c_int32),
        ("seqlen_k", ctypes.c_int32),
        ("num_heads", ctypes.c_int32),
        ("num_kv_heads", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("causal", ctypes.c_int32),
    ]


class kt_attention_args(ctypes.Structure):
    """include/kerntune/kerntune.h: kt_attention_args (device pointers + strides in elements, 144 bytes)."""
    _fields_ = [
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("o", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),  # float*
        ("q_stride_batch", ctypes.c_int64),
        ("q_stride_row", ctypes.c_int64),
        ("q_stride_head", ctypes.c_int64),
        ("k_stride_batch", ctypes.c_int64),
        ("k_stride_row", ctypes.c_int64),
        ("k_stride_head", ctypes.c_int64),
        ("v_stride_batch", ctypes.c_int64),
        ("v_stride_row", ctypes.c_int64),
        ("v_stride_head", ctypes.c_int64),
        ("o_stride_batch", ctypes.c_int64),
        ("o_stride_row", ctypes.c_int64),
        ("o_stride_head", ctypes.c_int64),
        ("softmax_scale", ctypes.c_float),
    ]


class kt_qkv_problem(ctypes.Structure):
    """include/kerntune/kerntune.h: kt_qkv_problem (9 x int32, 36 bytes)."""
    _fields_ = [
        ("dtype", ctypes.c_int32),
        ("weight_format", ctypes.c_int32),
        ("m", ctypes.c_int32),
        ("k", ctypes.c_int32),
        ("num_heads", ctypes.c_int32),
        ("num_kv_heads", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("has_bias", ctypes.c_int32),
        ("rope", ctypes.c_int32),
    ]


class kt_qkv_args(ctypes.Structure):
    """include/kerntune/kerntune.h: kt_qkv_args (device pointers, row strides in elements, 120 bytes)."""
    _fields_ = [
        ("x", ctypes.c_void_p),
        ("w_data", ctypes.c_void_p),
        ("w_scales", ctypes.c_void_p),
        ("w_zeros", ctypes.c_void_p),
        ("bias", ctypes.c_void_p),
        ("positions", ctypes.c_void_p),  # const int32_t*
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("x_row_stride", ctypes.c_int64),
        ("q_row_stride", ctypes.c_int64),
        ("k_row_stride", ctypes.c_int64),
        ("v_row_stride", ctypes.c_int64),
        ("tensor_scale", ctypes.c_float),
        ("rope_theta", ctypes.c_double),
    ]


class kt_attention_decode_problem(ctypes.Structure):
    """include/kerntune/kerntune.h: kt_attention_decode_problem (10 x int32, 40 bytes)."""
    _fields_ = [
        ("dtype", ctypes.c_int32),
        ("batch", ctypes.c_int32),
        ("q_len", ctypes.c_int32),
        ("num_heads", ctypes.c_int32),
        ("num_kv_heads", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("kv_len", ctypes.c_int32),
        ("paged", ctypes.c_int32),
        ("page_size", ctypes.c_int32),
        ("causal", ctypes.c_int32),
    ]


class kt_attention_decode_args(ctypes.Structure):
    """include/kerntune/kerntune.h: kt_attention_decode_args (device pointers, strides in elements, cache sizes,
    176 bytes)."""
    _fields_ = [
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("o", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),  # float*
        ("seqlens_k", ctypes.c_void_p),  # const int32_t*
        ("block_table", ctypes.c_void_p),  # const int32_t*
        ("q_stride_batch", ctypes.c_int64),
        ("q_stride_row", ctypes.c_int64),
        ("q_stride_head", ctypes.c_int64),
        ("k_stride_batch", ctypes.c_int64),
        ("k_stride_row", ctypes.c_int64),
        ("k_stride_head", ctypes.c_int64),
        ("v_stride_batch", ctypes.c_int64),
        ("v_stride_row", ctypes.c_int64),
        ("v_stride_head", ctypes.c_int64),
        ("o_stride_batch", ctypes.c_int64),
        ("o_stride_row", ctypes.c_int64),
        ("o_stride_head", ctypes.c_int64),
        ("block_table_stride", ctypes.c_int64),
        ("s_max", ctypes.c_int32),
        ("num_pages", ctypes.c_int32),
        ("max_pages_per_seq", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
    ]


class kt_kv_cache_args(ctypes.Structure):
    """include/kerntune/kerntune.h: kt_kv_cache_args (slot mapping, paged K/V caches, strides in elements, 80 bytes)."""
    _fields_ = [
        ("slot_mapping", ctypes.c_void_p),  # const int32_t*
        ("k_cache", ctypes.c_void_p),
        ("v_cache", ctypes.c_void_p),
        ("k_stride_page", ctypes.c_int64),
        ("k_stride_slot", ctypes.c_int64),
        ("k_stride_head", ctypes.c_int64),
        ("v_stride_page", ctypes.c_int64),
        ("v_stride_slot", ctypes.c_int64),
        ("v_stride_head", ctypes.c_int64),
        ("num_pages", ctypes.c_int32),
        ("page_size", ctypes.c_int32),
    ]


_STRUCT_CODES = {ctypes.c_int32: "i", ctypes.c_int64: "q", ctypes.c_void_p: "Q", ctypes.c_float: "f",
                 ctypes.c_double: "d"}


def struct_packer(cls):
    """A struct.Struct whose pack(*field values) gives the bytes of ctypes Structure `cls` (padding included, same
    offsets; pointers as integers, 0 for NULL): building the bytes this way is several times faster than
    constructing the Structure, which matters on the launch path."""
    fmt, pos = "<", 0
    for name, ctype in cls._fields_:
        off = getattr(cls, name).offset
        fmt += "x" * (off - pos) + _STRUCT_CODES[ctype]
        pos = off + ctypes.sizeof(ctype)
    fmt += "x" * (ctypes.sizeof(cls) - pos)
    packer = struct.Struct(fmt)
    if packer.size != ctypes.sizeof(cls):
        raise AssertionError(f"struct_packer({cls.__name__}): {packer.size} bytes, the Structure has {ctypes.sizeof(cls)}")
    return packer


QKV_PROBLEM_PACK = struct_packer(kt_qkv_problem)
QKV_ARGS_PACK = struct_packer(kt_qkv_args)
KV_CACHE_ARGS_PACK = struct_packer(kt_kv_cache_args)


def raw_function(lib, name, restype, argtypes):
    """A second ctypes handle on `name` of `lib` with its own argtypes (e.g. c_char_p where the header has a struct
    pointer, so that bytes from struct_packer pass without a ctypes Structure)."""
    return ctypes.CFUNCTYPE(restype, *argtypes)((name, lib))


# ---- prototypes ---------------------------------------------------------------------------------------------

_c_int = ctypes.c_int  # kt_status (a C enum)
_PROTOTYPES = {
    "kt_runtime_create": (_c_int, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]),
    "kt_runtime_destroy": (None, [ctypes.c_void_p]),
    "kt_attention_prefill": (_c_int, [ctypes.c_void_p, ctypes.POINTER(kt_attention_problem),
                                      ctypes.POINTER(kt_attention_args), ctypes.c_void_p]),
    "kt_attention_explain": (_c_int, [ctypes.c_void_p, ctypes.POINTER(kt_attention_problem),
                                      ctypes.POINTER(ctypes.c_char), ctypes.c_size_t]),
    "kt_qkv_proj": (_c_int, [ctypes.c_void_p, ctypes.POINTER(kt_qkv_problem), ctypes.POINTER(kt_qkv_args),
                             ctypes.c_void_p]),
    "kt_qkv_proj_kv_cache": (_c_int, [ctypes.c_void_p, ctypes.POINTER(kt_qkv_problem), ctypes.POINTER(kt_qkv_args),
                                      ctypes.POINTER(kt_kv_cache_args), ctypes.c_void_p]),
    "kt_qkv_explain": (_c_int, [ctypes.c_void_p, ctypes.POINTER(kt_qkv_problem), ctypes.POINTER(ctypes.c_char),
                                ctypes.c_size_t]),
    "kt_attention_decode": (_c_int, [ctypes.c_void_p, ctypes.POINTER(kt_attention_decode_problem),
                                     ctypes.POINTER(kt_attention_decode_args), ctypes.c_void_p]),
    "kt_explain": (_c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char),
                            ctypes.c_size_t]),
    "kt_quantize_sizes": (_c_int, [ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_size_t),
                                   ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]),
    "kt_quantize": (_c_int, [ctypes.c_int32, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int32, ctypes.c_int32,
                             ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                             ctypes.c_size_t, ctypes.POINTER(ctypes.c_float)]),
    "kt_dequantize": (_c_int, [ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p, ctypes.c_size_t,
                               ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_float,
                               ctypes.c_void_p, ctypes.c_size_t]),
    "kt_last_error": (ctypes.c_char_p, []),
    "kt_status_string": (ctypes.c_char_p, [_c_int]),
    "kt_version": (ctypes.c_char_p, []),
}

PACKAGE_DIR = Path(__file__).resolve().parent
#: The repository root: two levels up from the package directory (<repo>/python/kerntune).
REPO_ROOT = PACKAGE_DIR.parent.parent
#: Searched in this order when neither load_library(path) nor $KERNTUNE_LIB names the library: the wheel's copy
#: inside the package (pip install .), then the build folders of a source checkout.
DEFAULT_LIBRARY_PATHS = (
    PACKAGE_DIR / "libkerntune.so",
    REPO_ROOT / "build-gpu" / "libkerntune.so",
    REPO_ROOT / "build-rel" / "runtime" / "libkerntune.so",
    REPO_ROOT / "build" / "runtime" / "libkerntune.so",
)

def source_version():
    """CMakeLists.txt's project(kerntune VERSION x.y.z) in a source checkout; "0+unknown" when it cannot be read."""
    import re
    try:
        m = re.search(r"project\(kerntune VERSION ([0-9]+\.[0-9]+\.[0-9]+)", (REPO_ROOT / "CMakeLists.txt").read_text())
    except OSError:
        m = None
    return m.group(1) if m else "0+unknown"


_lock = threading.RLock()
_lib = None
_lib_path = None


def _declare(cdll):
    """Sets restype/argtypes of every function the library has; returns the names it lacks."""
    missing = []
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(cdll, name)
        except AttributeError:
            missing.append(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    return missing


def _has_buffer_lengths(cdll):
    """True when kt_dequantize takes byte lengths (the signature declared above). The probe passes a NULL data
    pointer, which every build refuses before reading anything: this build names the format and size it needed
    ("data is NULL but fp16 n=1 k=64 has 128 bytes"), a build without the length arguments only "data is NULL"."""
    st = cdll.kt_dequantize(KT_WEIGHT_FP16, 1, 64, None, 0, None, 0, None, 0, 1.0, None, 0)
    return st == KT_ERROR_INVALID_ARGUMENT and b"has 128 bytes" in cdll.kt_last_error()


#: Where a CUDA toolkit keeps NVRTC; libkerntune.so looks there itself (generator/nvrtc.cpp).
def _toolkit_nvrtc_paths():
    homes = [os.environ["CUDA_HOME"]] if os.environ.get("CUDA_HOME") else []
    return [Path(h) / "lib64" / "libnvrtc.so.13" for h in homes + ["/usr/local/cuda"]]


def find_nvrtc_wheel(search_paths=None):
    """Path of libnvrtc.so.13 from the nvidia-cuda-nvrtc wheel (nvidia/cu13/lib/ under a sys.path entry), or None."""
    import sys
    for entry in (sys.path if search_paths is None else search_paths):
        cand = Path(entry or ".") / "nvidia" / "cu13" / "lib" / "libnvrtc.so.13"
        if cand.is_file():
            return cand
    return None


def _preload_nvrtc():
    """NVRTC compiles the kernels a tuning database does not hold. libkerntune.so opens it by name, then from the
    toolkit; when there is no toolkit, the nvidia-cuda-nvrtc wheel's copy is loaded here (RTLD_GLOBAL), so that the
    library's dlopen("libnvrtc.so.13") finds it. Without either, the first compile fails naming both."""
    if any(p.is_file() for p in _toolkit_nvrtc_paths()):
        return
    wheel = find_nvrtc_wheel()
    if wheel is not None:
        try:
            ctypes.CDLL(str(wheel), mode=ctypes.RTLD_GLOBAL)
        except OSError:
            pass  # the library's own search then reports what it tried


def load_library(path=None):
    """Loads libkerntune.so and makes it the library every kerntune call uses; returns the ctypes.CDLL.

    Search: `path` if given; else $KERNTUNE_LIB if set; else the copy inside this package (a wheel: pip install .),
    <repo>/build-gpu/libkerntune.so,
    <repo>/build-rel/runtime/libkerntune.so, <repo>/build/runtime/libkerntune.so (repo = two levels up from
    this package's directory), the first that loads. A path named by the argument or $KERNTUNE_LIB is the only
    one tried. With no argument, a library already loaded is returned as it is.

    Raises KerntuneError (status KT_ERROR_LIBRARY = -1) naming every path tried and why it failed (missing
    file, dlopen error, or a library that lacks the functions of include/kerntune/kerntune.h or kt_quantize /
    kt_dequantize's buffer-length arguments: an old build).
    """
    global _lib, _lib_path
    with _lock:
        if path is None and _lib is not None:
            return _lib
        if path is not None:
            candidates, origin = [Path(os.fspath(path))], "load_library(path)"
        elif os.environ.get("KERNTUNE_LIB"):
            candidates, origin = [Path(os.environ["KERNTUNE_LIB"])], "$KERNTUNE_LIB"
        else:
            candidates, origin = list(DEFAULT_LIBRARY_PATHS), "the default locations"
        tried = []
        for cand in candidates:
            if not cand.exists():
                tried.append(f"{cand} (not found)")
                continue
            try:
                _preload_nvrtc()
                cdll = ctypes.CDLL(str(cand))
            except OSError as e:
                tried.append(f"{cand} ({e})")
                continue
            missing = _declare(cdll)
            if missing:
                tried.append(f"{cand} (lacks {', '.join(missing)}: an older build, rebuild it)")
                continue
            if not _has_buffer_lengths(cdll):
                tried.append(f"{cand} (its kt_quantize / kt_dequantize take no buffer lengths: an older build, "
                             f"rebuild it)")
                continue
            _lib, _lib_path = cdll, cand
            return cdll
        raise KerntuneError(
            KT_ERROR_LIBRARY,
            f"cannot load libkerntune.so from {origin}; tried: " + "; ".join(tried) +
            ". Build it (cmake --build build) or set KERNTUNE_LIB to its path.")


def library():
    """The loaded library (load_library() with no argument on first use)."""
    lib = _lib
    return lib if lib is not None else load_library()


def library_path():
    """Path of the loaded library, or None when none is loaded yet."""
    return _lib_path


def status_name(status):
    """kt_status_string(status) (the fallback names when no library is loaded)."""
    lib = _lib
    if lib is not None and status != KT_ERROR_LIBRARY:
        return lib.kt_status_string(int(status)).decode("utf-8", "replace")
    return _STATUS_NAMES.get(int(status), "KT_ERROR_UNKNOWN_STATUS")


def check(lib, status):
    """Raises KerntuneError(status, kt_last_error()) unless status is KT_OK. Call right after the failing call,
    on the same thread (kt_last_error is thread-local)."""
    if status != KT_OK:
        msg = lib.kt_last_error().decode("utf-8", "replace")
        name = lib.kt_status_string(int(status)).decode("utf-8", "replace")
        raise KerntuneError(status, msg, name)


def version():
    """libkerntune's version, "MAJOR.MINOR.PATCH" (kt_version)."""
    return library().kt_version().decode("ascii")


def element_format(fmt):
    """The element encoding of a weight format name: the row-major format whose values a K-blocked layout rearranges
    ("int4" for "int4_kb128", "fp16" for "fp16_kb64"), fmt itself otherwise (kt::quant::format_element).
    Raises as format_id for an unknown name."""
    format_id(fmt)
    return fmt.rsplit("_kb", 1)[0]


def format_id(fmt):
    """Weight format name ("fp16", "bf16", "int8", "int4", "nf4", "mxfp4", "nvfp4", "fp16_kb64", "bf16_kb64",
    "int8_kb64", "int4_kb128", "nf4_kb128", "mxfp4_kb128", "nvfp4_kb128") -> kt_weight_format.
    Raises TypeError (not a str) or ValueError (unknown name)."""
    if not isinstance(fmt, str):
        raise TypeError(f"format must be a str, one of {', '.join(WEIGHT_FORMATS)}; got {type(fmt).__name__}")
    try:
        return WEIGHT_FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown weight format {fmt!r} (expected one of {', '.join(WEIGHT_FORMATS)})") from None


#: The 16-bit weight formats -> their element dtype, which is also the activation dtype the kernels need with them
#: (kt::quant::format_element; the quantized formats take fp16 or bf16 activations).
WEIGHT_ELEMENT_DTYPES = {"fp16": "fp16", "bf16": "bf16", "fp16_kb64": "fp16", "bf16_kb64": "bf16"}


def weight_element_dtype(fmt):
    """The activation dtype ("fp16" or "bf16") that 16-bit weight format `fmt` needs (its element type:
    "fp16_kb64" -> "fp16"), or None for a quantized format (int8, int4, nf4, mxfp4, nvfp4), which takes either.
    Raises TypeError / ValueError as format_id does."""
    format_id(fmt)
    return WEIGHT_ELEMENT_DTYPES.get(fmt)


def format_for_activations(fmt, act_dtype):
    """The weight format to run with `act_dtype` ("fp16" or "bf16") activations: a 16-bit format becomes its twin of
    that element dtype ("fp16" -> "bf16", "fp16_kb64" -> "bf16_kb64" under "bf16"); a quantized format is returned
    unchanged. Raises ValueError for an act_dtype other than "fp16" / "bf16", TypeError / ValueError as format_id
    for `fmt`."""
    if act_dtype not in ("fp16", "bf16"):
        raise ValueError(f"act_dtype must be 'fp16' or 'bf16', got {act_dtype!r}")
    el = weight_element_dtype(fmt)
    return fmt if el is None else act_dtype + fmt[len(el):]


def quantize_sizes(fmt, n, k):
    """Byte sizes (data, scales, zeros) of a packed weight of format `fmt` (a name, or a kt_weight_format int) and
    shape [n, k] (ints: output and input features) (kt_quantize_sizes).
    Raises TypeError (fmt not a str or int; n or k not an int: a float, bool or str is not converted), ValueError
    (unknown format name; n or k outside int32), KerntuneError (KT_ERROR_INVALID_ARGUMENT) for an unknown format id,
    n or k < 1, k not a multiple of 64 or of the format's group."""
    lib = library()
    fid = format_arg(fmt)
    n, k = int_arg(n, "n"), int_arg(k, "k")
    d, s, z = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
    check(lib, lib.kt_quantize_sizes(fid, n, k, ctypes.byref(d), ctypes.byref(s), ctypes.byref(z)))
    return d.value, s.value, z.value


def format_arg(fmt):
    """A format argument -> kt_weight_format: a name (format_id) or an int id (passed on as is; the library names an
    unknown one). TypeError for anything else (a float, bool or None is not converted)."""
    if isinstance(fmt, str):
        return format_id(fmt)
    if isinstance(fmt, bool) or not hasattr(fmt, "__index__"):
        raise TypeError(f"format must be a str (one of {', '.join(WEIGHT_FORMATS)}) or an int kt_weight_format, got "
                        f"{type(fmt).__name__} {fmt!r}")
    return int_arg(fmt, "format")


def int_arg(v, name):
    """An integer argument (int or anything with __index__, not bool) that fits an int32_t: TypeError for a float,
    bool, str or None (never truncated or parsed), ValueError outside [-2^31, 2^31)."""
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise TypeError(f"{name} must be an int, got {type(v).__name__} {v!r}")
    iv = v.__index__()
    if not -(2 ** 31) <= iv < 2 ** 31:
        raise ValueError(f"{name} = {iv} does not fit in int32")
    return iv

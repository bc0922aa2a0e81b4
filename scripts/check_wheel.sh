#!/usr/bin/env bash
# Builds the Python wheel (pip wheel . : scikit-build-core drives CMake with KT_LIBRARY_ONLY), installs it into a fresh
# virtual environment and imports it from outside the checkout, with no KERNTUNE_LIB: the package must find its own
# libkerntune.so, report the library's version and run a CPU entry point (host quantization). No GPU needed.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip wheel . --no-deps -w "$tmp/wheel" -q
ls "$tmp/wheel"
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q "$tmp"/wheel/kerntune-*.whl
cd "$tmp"
env -u KERNTUNE_LIB -u PYTHONPATH "$tmp/venv/bin/python" - <<'PY'
import re
import kerntune as kt
from pathlib import Path
kt.load_library()
lib = Path(kt.library_path())
assert lib.parent == Path(kt.__file__).parent, lib  # the wheel's own copy
assert kt.__version__ == kt.version() and re.fullmatch(r"\d+\.\d+\.\d+", kt.version()), (kt.__version__, kt.version())
data, scales, zeros = kt.quantize_sizes("nf4_kb128", 64, 128)
assert (data, scales, zeros) == (64 * 128 // 2, 64 * 128 // 64 * 4, 0), (data, scales, zeros)
print(f"kerntune {kt.__version__} from the wheel: {lib}; quantize_sizes ok")
PY

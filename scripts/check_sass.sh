#!/usr/bin/env bash
# The ptxas 13.0 guard (CPU only): compiles the attention_decode tiles that span several pages (the hidden [.sass] test
# case writes their cubins) and checks with scripts/sass_check.py that no instruction reads a uniform register nothing
# writes -- the miscompile docs/perf-log.md describes, which the kernels avoid. nvdisasm comes from PyPI's
# nvidia-cuda-nvdisasm wheel (this CUDA toolkit has none), unpacked once under <build>/nvdisasm.
#   scripts/check_sass.sh [build folder, default build]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tool=$build/nvdisasm/nvidia/cu13/bin/nvdisasm
if [ ! -x "$tool" ]; then
  rm -rf "$build/nvdisasm" && mkdir -p "$build/nvdisasm"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$build/nvdisasm" 'nvidia-cuda-nvdisasm>=13,<14'
  python3 -c 'import glob, sys, zipfile; zipfile.ZipFile(glob.glob(sys.argv[1] + "/*.whl")[0]).extractall(sys.argv[1])' \
    "$build/nvdisasm"
  chmod +x "$tool"
fi
dir=$build/sass-guard
rm -rf "$dir" && mkdir -p "$dir"
KT_SASS_DIR=$dir "$build/tests/kerntune_tests" "[.sass]"
python3 scripts/sass_check.py --self-test
python3 scripts/sass_check.py --nvdisasm "$tool" "$dir"/*.cubin

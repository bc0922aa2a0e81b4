#!/usr/bin/env bash
# Installs everything kerntune needs to build and test on Debian 12 (bookworm).
# The CUDA toolkit (NVRTC + headers) is expected at $CUDA_HOME or /usr/local/cuda.
set -euo pipefail
pkgs=(cmake g++ make pkg-config python3 nlohmann-json3-dev catch2 libsqlitecpp-dev libsqlite3-dev sqlite3 libcli11-dev libxxhash-dev
      clang-format-14)  # clang-format-14: scripts/format.sh (CI checks the format with it)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
cuda="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -f "$cuda/include/nvrtc.h" ]; then
  echo "setup: the CUDA toolkit was not found at $cuda (set CUDA_HOME); NVRTC and its headers are required" >&2
  exit 1
fi
echo "setup: ok (CUDA toolkit at $cuda)"

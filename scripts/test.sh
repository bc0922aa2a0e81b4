#!/usr/bin/env bash
# One command: install dependencies, build, and run every test (CPU, NVRTC compile checks, and the
# [gpu] tests when a GPU is present; without one they are reported as skipped, with the reason).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
set +e
(cd build && ctest --output-on-failure)
rc=$?
grep -h "no GPU found" build/Testing/Temporary/LastTest.log 2>/dev/null | head -1
exit $rc

#!/usr/bin/env bash
# Formats the tracked C++ / CUDA sources with the root .clang-format (clang-format 14, as Debian 12 ships it).
#   scripts/format.sh             rewrite every file in place
#   scripts/format.sh --check     change nothing; print the diff of each unformatted file and exit 1 if any
#   scripts/format.sh [--check] FILE...   only these files
# Generated files opt out with a "// clang-format off" line (scripts/gen_wgmma.py writes one).
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
cf=${CLANG_FORMAT:-}
if [ -z "$cf" ]; then
  for c in clang-format-14 clang-format; do command -v "$c" >/dev/null && { cf=$c; break; }; done
fi
[ -n "$cf" ] || { echo "format.sh: clang-format not found (scripts/setup.sh installs clang-format-14)" >&2; exit 2; }
if ! "$cf" --version | grep -q "version 14\."; then
  echo "format.sh: warning: $("$cf" --version) is not clang-format 14; its output may differ from CI's" >&2
fi
if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.hpp' '*.cu' '*.cuh')
fi
if [ $check -eq 0 ]; then
  printf '%s\0' "${files[@]}" | xargs -0 -r "$cf" -i --style=file
  exit 0
fi
bad=0
lines=0
for f in "${files[@]}"; do
  if ! out=$("$cf" --style=file --assume-filename="$f" < "$f" | diff -u --label "$f" --label "$f (formatted)" "$f" -); then
    echo "$out"
    bad=$((bad + 1))
    lines=$((lines + $(awk '/^-/ && !/^--- /' <<< "$out" | wc -l)))
  fi
done
if [ $bad -gt 0 ]; then
  echo "format.sh: $bad of ${#files[@]} files need formatting ($lines lines); run scripts/format.sh" >&2
  exit 1
fi
echo "format.sh: ${#files[@]} files formatted"

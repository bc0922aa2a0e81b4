#!/usr/bin/env bash
# Fails when a checked-in generated file differs from what its generator writes today, and prints the diff.
#   templates/common/wgmma.cuh            <- scripts/gen_wgmma.py
#   README.md (perf:begin .. perf:end)    <- bench/make_report.py on the newest bench/results/*.json
# Fix a failure by editing the generator (not the output) and running it, then commit both.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
check() {  # check <name> <checked-in text> <generated text> <command that regenerates it>
  if diff -u --label "$1 (checked in)" --label "$1 (generated)" "$2" "$3"; then
    echo "check_generated: $1 ok"
  else
    echo "check_generated: $1 differs from its generator's output; run: $4" >&2
    rc=1
  fi
}
python3 scripts/gen_wgmma.py --stdout > "$tmp/wgmma.cuh"
check templates/common/wgmma.cuh templates/common/wgmma.cuh "$tmp/wgmma.cuh" "python3 scripts/gen_wgmma.py"
# The README's section between its markers, against what make_report.py prints for it (--stdout keeps the image
# links relative to the README's folder).
python3 - "$tmp/perf_readme.md" <<'PY'
import sys
text = open("README.md").read()
begin, end = "<!-- perf:begin -->", "<!-- perf:end -->"
if text.count(begin) != 1 or text.count(end) != 1:
    sys.exit("check_generated: README.md needs exactly one %s and one %s line" % (begin, end))
open(sys.argv[1], "w").write(text.split(begin)[1].split(end)[0].strip("\n") + "\n")
PY
python3 bench/make_report.py --stdout | sed -e '1{/^$/d}' > "$tmp/perf_generated.md"
check "README.md#perf" "$tmp/perf_readme.md" "$tmp/perf_generated.md" "python3 bench/make_report.py"
exit $rc

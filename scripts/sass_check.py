#!/usr/bin/env python3
"""Flags cubins whose machine code reads a uniform register that no instruction writes.

ptxas 13.0 miscompiles some attention_decode tile loads that span several pages (docs/perf-log.md, attention_decode):
the V copies' LDGSTS take their L2-policy descriptor (desc[URn]) and part of their shared address from uniform
registers that nothing writes, an illegal instruction at run time. The kernels avoid the shapes it hits
(templates/attention_decode/attention_decode.cuh, KvLoader::load_pieces); this check, run by scripts/check_sass.sh
in CI over the shapes it hit, keeps it that way.

Usage: sass_check.py --nvdisasm PATH CUBIN...       (exit 0: every cubin clean; 1: one reads an unwritten register;
       sass_check.py --self-test                     2: bad input)

The SASS comes from `nvdisasm -c`. A uniform register counts as written when it is the destination of an
instruction (and, for a 64-bit destination such as ULDC.64 or an IMAD.WIDE into URn, URn + 1 too); it counts as read
when it appears among an instruction's sources, or inside a memory operand's brackets (desc[URn], [R2+URn]).
URZ (the zero register) is neither.
"""
import argparse
import concurrent.futures
import os
import re
import subprocess
import sys

_INSTR = re.compile(r"\s*/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)\s+(.*);")
_UR = re.compile(r"\bUR(\d+)\b")
_IN_BRACKETS = re.compile(r"\[[^\]]*\bUR(\d+)\b")
# Instructions whose first operand is a memory destination or a value to store, not a register written.
_NO_DEST = ("LDGSTS", "STS", "STG", "ST.", "RED", "ATOM", "UTMA", "SYNCS", "BAR", "BRA", "EXIT", "RET", "CALL")


def unwritten_uniform_reads(sass):
    """Uniform register numbers that the SASS text reads but no instruction writes, sorted."""
    written, read = set(), set()
    for line in sass.splitlines():
        m = _INSTR.match(line)
        if not m:
            continue
        op, operands = m.group(2), m.group(3)
        parts = operands.split(",")
        has_dest = not op.startswith(_NO_DEST)
        if has_dest:
            dest = parts[0]
            regs = [int(r) for r in _UR.findall(dest)]
            written.update(regs)
            if regs and (".64" in op or "WIDE" in op):
                written.add(regs[0] + 1)
        sources = ",".join(parts[1:]) if has_dest else operands
        read.update(int(r) for r in _UR.findall(sources))
        read.update(int(r) for r in _IN_BRACKETS.findall(operands))
    return sorted(read - written)


def self_test():
    """The parser on hand-written SASS: written descriptors and address parts pass, unwritten ones are flagged, and a
    64-bit load into URn writes URn + 1 too."""
    ok = """
        /*0010*/                   ULDC.64 UR4, c[0x0][0x210] ;
        /*0020*/                   UMOV UR6, 0x1 ;
        /*0030*/                   LDGSTS.E.BYPASS.LTC128B.128 [R3+UR6], desc[UR4][R4.64] ;
    """
    bad = ok + """
        /*0040*/                   LDGSTS.E.BYPASS.LTC128B.128 [R5+UR0], desc[UR8][R6.64] ;
    """
    pair = """
        /*0010*/                   ULDC.64 UR4, c[0x0][0x218] ;
        /*0020*/                   IADD3 R1, R1, UR5, RZ ;
    """
    results = [unwritten_uniform_reads(ok) == [], unwritten_uniform_reads(bad) == [0, 8],
               unwritten_uniform_reads(pair) == []]
    if not all(results):
        print("sass_check self-test failed:", results)
        return 1
    print("sass_check self-test ok")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nvdisasm", help="the nvdisasm binary")
    ap.add_argument("--self-test", action="store_true", help="check the parser on hand-written SASS and exit")
    ap.add_argument("cubins", nargs="*")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.nvdisasm or not a.cubins:
        ap.print_usage(sys.stderr)
        print("sass_check: --nvdisasm and at least one cubin are required", file=sys.stderr)
        return 2
    bad = 0

    def disassemble(path):
        return subprocess.run([a.nvdisasm, "-c", path], capture_output=True, text=True)

    # nvdisasm runs on every core at once (it dominates the time); results are read in the cubins' order.
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = list(pool.map(disassemble, a.cubins))
    for path, r in zip(a.cubins, results):
        if r.returncode != 0 or "/*0000*/" not in r.stdout:
            print(f"sass_check: nvdisasm could not read {path}: {r.stderr.strip()}", file=sys.stderr)
            return 2
        regs = unwritten_uniform_reads(r.stdout)
        if regs:
            bad += 1
            print(f"{path}: reads uniform registers no instruction writes: " + ", ".join(f"UR{n}" for n in regs))
    print(f"sass_check: {len(a.cubins)} cubins, {bad} with unwritten uniform registers")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

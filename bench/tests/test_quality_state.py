#!/usr/bin/env python3
"""Tests of bench/quality_state.py, plain python3 (no pytest, no third-party packages):

    python3 bench/tests/test_quality_state.py        # exit status 0 = all passed, 1 = a failure

A database with the schema of cache/tuning_db.cpp, measurements and cubins of random bytes: pack gives one .xz, or
parts of at most --part-mib when the .xz is larger, and unpack gives back every measurement and no binary (a .gz state
too); packing again replaces the earlier parts; a part missing from the sequence, a file that is not a tuning
database and an absent state are refused with exit status 2, 2 and 1.
"""
import gzip
import os
import random
import sqlite3
import subprocess
import sys
import tempfile

from tuning_db_fixture import REPO, check, failures, schema

SCRIPT = os.path.join(REPO, "bench", "quality_state.py")


def run(*args):
    r = subprocess.run([sys.executable, SCRIPT, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


def make_db(path, rows, cubin_bytes):
    rng = random.Random(7)
    c = sqlite3.connect(path)
    c.executescript(schema())
    c.execute("INSERT INTO devices VALUES (1, 'NVIDIA H200', 'GPU-1', 9, 0, 132, 0, 0, 0, 0)")
    c.execute("INSERT INTO runs VALUES (1, 'autotune', 's.json', 'h', '0.1', 'host', 0, 0)")
    for i in range(4):
        c.execute("INSERT INTO binaries VALUES (?, 'f', 'v', 'e', 'l', 'sm_90a', '13.0', '', ?, 64, 0, 0, 0, 0, 0, 1, '')",
                  (f"h{i}", rng.randbytes(cubin_bytes)))
    for i in range(rows):
        c.execute("INSERT INTO measurements (id, run_id, device_id, family, problem_key, problem_json, variant_name, "
                  "config_json, binary_hash, status, median_us, p20_us, p80_us, samples_json, error, sm_clock_mhz, "
                  "rel_err, metric, measured_at) VALUES (?, 1, 1, 'f', ?, '{}', ?, '{}', 'h0', 'ok', ?, ?, ?, '[]', "
                  "'', 1980, 0, 0, 0)", (i + 1, f"p{i % 7}", f"v{i}", 10.0 + i, 9.0 + i, 11.0 + i))
    c.commit()
    c.close()


def measurements(path):
    c = sqlite3.connect(path)
    try:
        return c.execute("SELECT id, problem_key, variant_name, median_us FROM measurements ORDER BY id").fetchall(), \
            c.execute("SELECT COUNT(*) FROM binaries").fetchone()[0]
    finally:
        c.close()


with tempfile.TemporaryDirectory() as tmp:
    db = os.path.join(tmp, "tune.db")
    make_db(db, 300, 300_000)  # 1.2 MB of incompressible cubins, which pack leaves out
    want, nbin = measurements(db)
    check(nbin == 4, "the fixture has its binaries")

    # One .xz (small), unpacked: every measurement, no binary.
    stem = os.path.join(tmp, "state", "q_fast.db")
    rc, out = run("pack", db, stem)
    check(rc == 0 and out.split() == [stem + ".xz"], f"pack writes one .xz: {rc} {out}")
    check(os.path.getsize(stem + ".xz") < 100_000, "the cubins are not packed")
    back = os.path.join(tmp, "back.db")
    open(back + "-wal", "w").close()  # a stale -wal beside the target goes
    rc, out = run("unpack", stem, back)
    check(rc == 0, f"unpack .xz: {rc} {out}")
    got, nbin = measurements(back)
    check(got == want and nbin == 0, "unpack gives every measurement and no binary")
    check(not os.path.exists(back + "-wal"), "unpack removes a stale -wal")

    # Parts: a part size below the .xz's size splits it; unpack joins them in numeric order (part10 after part9).
    make_db(db + "2", 3000, 10)
    want2, _ = measurements(db + "2")
    rc, out = run("pack", db + "2", stem, "--part-mib", str(2000 / (1 << 20)))
    parts = out.split()
    check(rc == 0 and len(parts) > 10 and all(p.startswith(stem + ".xz.part") for p in parts),
          f"pack splits into more than 10 parts: {rc} {len(parts)}")
    check(not os.path.exists(stem + ".xz"), "no whole .xz beside the parts")
    check(all(os.path.getsize(p) <= 2000 for p in parts), "every part within --part-mib")
    rc, out = run("unpack", stem, back)
    check(rc == 0 and measurements(back) == (want2, 0), f"unpack joins the parts: {rc} {out}")

    # Packing again, small: the earlier parts go, one .xz stays.
    rc, out = run("pack", db, stem)
    check(rc == 0 and os.path.exists(stem + ".xz") and not any(f.startswith("q_fast.db.xz.part")
                                                             for f in os.listdir(os.path.dirname(stem))),
          "packing again replaces the parts")

    # A missing part is refused, naming it.
    rc, out = run("pack", db + "2", stem, "--part-mib", str(2000 / (1 << 20)))
    os.remove(stem + ".xz.part3")
    rc, out = run("unpack", stem, back)
    check(rc == 2 and "part3 is missing" in out, f"a missing part: {rc} {out}")

    # A .gz state.
    gstem = os.path.join(tmp, "g.db")
    with open(db, "rb") as f, gzip.open(gstem + ".gz", "wb") as g:
        g.write(f.read())
    rc, out = run("unpack", gstem, back)
    check(rc == 0 and measurements(back)[0] == want, f"unpack .gz: {rc} {out}")

    # Nothing there; not a database; bad option.
    rc, out = run("unpack", os.path.join(tmp, "none.db"), back)
    check(rc == 1 and "nothing to unpack" in out, f"no state: {rc} {out}")
    junk = os.path.join(tmp, "junk.db")
    with open(junk, "w") as f:
        f.write("not sqlite " * 100)
    rc, out = run("pack", junk, os.path.join(tmp, "j.db"))
    check(rc == 2 and "not a kerntune tuning database" in out, f"not a database: {rc} {out}")
    check(not os.path.exists(os.path.join(tmp, "j.db.tmp")), "no temporary file left")
    rc, out = run("pack", db, stem, "--part-mib", "0")
    check(rc == 2 and "--part-mib" in out, f"--part-mib 0: {rc} {out}")

print("test_quality_state:", "FAILED" if failures else "passed", f"({len(failures)} failures)" if failures else "")
sys.exit(1 if failures else 0)

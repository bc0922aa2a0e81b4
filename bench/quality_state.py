#!/usr/bin/env python3
"""A tuning database's measurements carried between machines: what `scripts/gpu_all.sh quality` brings back from one
device call (KT_QUALITY_STATE) and continues from on the next.

Usage:
    bench/quality_state.py pack DB STEM [--part-mib 15]
    bench/quality_state.py unpack STEM DB

pack writes DB without its cubins (the `binaries` rows: the next machine compiles what it measures), vacuumed and
xz-compressed, to STEM.xz, or, when that is larger than --part-mib MiB, to STEM.xz.part0, STEM.xz.part1, ... (the
device tool brings files back up to 16 MiB each). DB is read through SQLite's backup API, so a database another
process has open is copied consistently.

unpack writes DB (replacing it and its -wal / -shm files) from STEM.xz, else from the parts STEM.xz.part0.. in numeric
order, else from STEM.gz (gzip).

Exit status: 0 done, 1 nothing to unpack at STEM, 2 bad input (DB is not an SQLite file with a `binaries` table, a
missing part in the sequence).
"""
import argparse
import glob
import gzip
import io
import lzma
import os
import shutil
import sqlite3
import sys


def pack(db, stem, part_bytes):
    """DB without its binaries rows, xz-compressed to STEM.xz or to parts of at most part_bytes. Returns the paths."""
    if not os.path.isfile(db):
        raise ValueError(f"{db}: no such file")
    os.makedirs(os.path.dirname(stem) or ".", exist_ok=True)
    tmp = stem + ".tmp"
    if os.path.exists(tmp):
        os.remove(tmp)
    src = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    dst = sqlite3.connect(tmp)
    try:
        with dst:
            src.backup(dst)
        dst.execute("DELETE FROM binaries")
        dst.commit()
        dst.execute("VACUUM")
    except sqlite3.DatabaseError as e:
        dst.close()
        os.remove(tmp)
        raise ValueError(f"{db}: not a kerntune tuning database ({e})")
    finally:
        src.close()
    dst.close()
    for old in glob.glob(glob.escape(stem) + ".xz") + glob.glob(glob.escape(stem) + ".xz.part*"):
        os.remove(old)
    with open(tmp, "rb") as f, lzma.open(stem + ".xz", "wb") as g:
        shutil.copyfileobj(f, g)
    os.remove(tmp)
    if os.path.getsize(stem + ".xz") <= part_bytes:
        return [stem + ".xz"]
    paths = []
    with open(stem + ".xz", "rb") as f:
        while chunk := f.read(part_bytes):
            paths.append(f"{stem}.xz.part{len(paths)}")
            with open(paths[-1], "wb") as g:
                g.write(chunk)
    os.remove(stem + ".xz")
    return paths


def parts_of(stem):
    """STEM.xz.part0.. in numeric order; ValueError when a number in the sequence is missing."""
    parts = glob.glob(glob.escape(stem) + ".xz.part*")
    numbered = sorted((int(p.rsplit("part", 1)[1]), p) for p in parts if p.rsplit("part", 1)[1].isdigit())
    for i, (n, p) in enumerate(numbered):
        if n != i:
            raise ValueError(f"{stem}.xz.part{i} is missing (the parts run up to {numbered[-1][1]})")
    return [p for _, p in numbered]


def unpack(stem, db):
    """DB from STEM.xz, its parts or STEM.gz. Returns the source's description, None when there is none."""
    if os.path.isfile(stem + ".xz"):
        src, what = lzma.open(stem + ".xz"), stem + ".xz"
    elif parts := parts_of(stem):
        src, what = lzma.open(io.BytesIO(b"".join(open(p, "rb").read() for p in parts))), f"{len(parts)} parts"
    elif os.path.isfile(stem + ".gz"):
        src, what = gzip.open(stem + ".gz"), stem + ".gz"
    else:
        return None
    for suffix in ("", "-wal", "-shm", "-journal"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    with src, open(db, "wb") as g:
        shutil.copyfileobj(src, g)
    return what


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("db")
    p.add_argument("stem")
    p.add_argument("--part-mib", type=float, default=15)
    u = sub.add_parser("unpack")
    u.add_argument("stem")
    u.add_argument("db")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "pack":
            if not a.part_mib > 0:
                raise ValueError(f"--part-mib {a.part_mib}: must be above 0")
            for path in pack(a.db, a.stem, int(a.part_mib * (1 << 20))):
                print(path)
            return 0
        what = unpack(a.stem, a.db)
        if what is None:
            print(f"quality_state: nothing to unpack at {a.stem} (.xz, .xz.part0.., .gz)", file=sys.stderr)
            return 1
        print(f"{a.db} from {what}")
        return 0
    except (ValueError, OSError, lzma.LZMAError, EOFError) as e:
        print(f"quality_state: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

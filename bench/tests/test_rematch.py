#!/usr/bin/env python3
"""Tests of bench/rematch.py, plain python3 (no pytest, no third-party packages):

    python3 bench/tests/test_rematch.py        # exit status 0 = all passed, 1 = a failure

Runs rematch.py against a stand-in autotune (a python script written to a temp folder) that records its command line
and stores a measurement row, in a database with the schema of cache/tuning_db.cpp, for each candidate its --problems
and --only regexes select among a fixed list. Checks: only the problems over the threshold are rematched; the regexes
select exactly the two winners (a name that extends a winner's is left out) and the one problem; the rematch ratio is
the fast winner's newest row over the exhaustive winner's; a problem the stand-in does not measure is reported as not
measured with exit status 1, also when an earlier run left a row of it in the same database; exit status 0 when every rematch is within the threshold; the JSON summary; exit status 2
for an unreadable quality file and a missing autotune.
"""
import json
import os
import subprocess
import sys
import tempfile

from tuning_db_fixture import REPO, check, failures, schema

SCRIPT = os.path.join(REPO, "bench", "rematch.py")

# The stand-in: every (problem, variant) it knows, with the median it stores; argv goes to calls.jsonl.
FAKE = r'''#!/usr/bin/env python3
import json, os, re, sqlite3, sys
a = sys.argv[1:]
opt = {a[i]: a[i + 1] for i in range(len(a) - 1) if a[i].startswith("--") and not a[i + 1].startswith("--")}
with open(os.environ["FAKE_CALLS"], "a") as f:
    f.write(json.dumps(a) + "\n")
known = json.load(open(os.environ["FAKE_TIMES"]))
new = not os.path.exists(opt["--db"])
con = sqlite3.connect(opt["--db"])
if new:
    con.executescript(open(os.environ["FAKE_SCHEMA"]).read())
    con.execute("INSERT INTO devices VALUES (1, 'NVIDIA H200', 'GPU-1', 9, 0, 132, 62914560, 580, 1980000, 3201000)")
con.execute("INSERT INTO runs (argv, shapes_path, shapes_hash, kerntune_version, host, started_at, ended_at) "
            "VALUES ('autotune', 's', 'h', '0.1.0', 'host', 0, 1)")
run = con.execute("SELECT MAX(id) FROM runs").fetchone()[0]
for key, variants in known.items():
    if not re.search(opt["--problems"], key):
        continue
    for name, us in variants.items():
        if us is not None and re.search(opt["--only"], name):
            con.execute("INSERT INTO measurements (run_id, device_id, family, problem_key, problem_json, variant_name,"
                        " config_json, binary_hash, status, median_us, p20_us, p80_us, samples_json, error,"
                        " sm_clock_mhz, rel_err, metric, measured_at) VALUES (?, 1, 'qkv_proj', ?, '{}', ?, '{}', NULL,"
                        " 'ok', ?, ?, ?, '[]', '', 1980, 0, 0, ?)", (run, key, name, us, us, us, run))
con.commit()
'''

P1, P2, P3 = "qkv_proj/bf16/int8/m1024/k3584", "qkv_proj/bf16/int8/m16/k3584", "qkv_proj/bf16/int4/m16/k3584"
TIMES = {
    P1: {"q__int8__m256_s4__sm_90a": 80.0, "q__int8__m192_s4__sm_90a": 79.0, "q__int8__m192_s4_sk2__sm_90a": 1.0},
    P2: {"q__int8__m16_sk3__sm_90a": 13.0, "q__int8__m16_sk2__sm_90a": 12.0},
    P3: {"q__int4__gemv_a__sm_90a": None, "q__int4__gemv_b__sm_90a": 9.0},
}


def quality(rows):
    return {"problems": [{"device": "NVIDIA H200", "family": "qkv_proj", "problem": k, "fast_winner": f,
                          "exh_winner": e, "status": "ok", "ratio": r} for k, f, e, r in rows]}


def run(tmp, q, extra=(), autotune=None, keep_db=False):
    qpath = os.path.join(tmp, "q.json")
    with open(qpath, "w") as f:
        json.dump(q, f)
    db = os.path.join(tmp, "r.db")
    if os.path.exists(db) and not keep_db:
        os.remove(db)
    calls = os.path.join(tmp, "calls.jsonl")
    open(calls, "w").close()
    env = dict(os.environ, FAKE_CALLS=calls, FAKE_TIMES=os.path.join(tmp, "times.json"),
               FAKE_SCHEMA=os.path.join(tmp, "schema.sql"))
    out = os.path.join(tmp, "out.json")
    p = subprocess.run([sys.executable, SCRIPT, "--quality", qpath, "--shapes", "s.json", "--autotune",
                        autotune or os.path.join(tmp, "autotune"), "--db", db, "--json", out, *extra],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    argvs = [json.loads(line) for line in open(calls)]
    res = json.load(open(out)) if os.path.exists(out) and p.returncode != 2 else None
    return p, argvs, res


def main():
    with tempfile.TemporaryDirectory() as tmp:
        fake = os.path.join(tmp, "autotune")
        with open(fake, "w") as f:
            f.write(FAKE)
        os.chmod(fake, 0o755)
        with open(os.path.join(tmp, "times.json"), "w") as f:
            json.dump(TIMES, f)
        with open(os.path.join(tmp, "schema.sql"), "w") as f:
            f.write(schema())

        # P1 and P2 over 1.03 (P1's exhaustive winner is 1.3% faster head to head, P2's 8.3%), P3 within it.
        q = quality([(P1, "q__int8__m256_s4__sm_90a", "q__int8__m192_s4__sm_90a", 1.057),
                     (P2, "q__int8__m16_sk3__sm_90a", "q__int8__m16_sk2__sm_90a", 1.04),
                     (P3, "q__int4__gemv_a__sm_90a", "q__int4__gemv_b__sm_90a", 1.01)])
        p, argvs, res = run(tmp, q)
        check(p.returncode == 1, f"P2 still over: exit 1 ({p.returncode}): {p.stdout}")
        check(len(argvs) == 2, f"only the two problems over the threshold are rematched ({len(argvs)} calls)")
        a = argvs[0]
        for flag in ("--retune", "--grid", "--max-candidates", "--problems", "--only"):
            check(flag in a, f"the rematch passes {flag}: {a}")
        check(a[a.index("--max-candidates") + 1] == "0" and a[a.index("--grid") + 1] == "listed", f"{a}")
        byp = {r["problem"]: r for r in res["problems"]}
        check(abs(byp[P1]["ratio"] - 80.0 / 79.0) < 1e-9, f"P1 ratio = fast / exhaustive winner's row: {byp[P1]}")
        check(abs(byp[P2]["ratio"] - 13.0 / 12.0) < 1e-9, f"P2 ratio: {byp[P2]}")
        # The regex selects exactly the two winners: m192_s4_sk2 (1 us) extends m192_s4 and must not be measured.
        check(byp[P1]["exh_us"] == 79.0, f"the exhaustive winner's own row, not a longer name's: {byp[P1]}")
        check(res["summary"] == {"over_in_exhaustive": 2, "still_over": 1, "threshold": 1.03}, f"{res['summary']}")
        check("<-- over" in p.stdout and P2 in p.stdout, f"the table flags P2: {p.stdout}")

        # Every rematch within the threshold: exit 0.
        p, argvs, res = run(tmp, quality([(P1, "q__int8__m256_s4__sm_90a", "q__int8__m192_s4__sm_90a", 1.057)]))
        check(p.returncode == 0 and res["summary"]["still_over"] == 0, f"within: exit 0 ({p.returncode}) {p.stdout}")
        check("1 of them within" in p.stdout, f"summary line: {p.stdout}")

        # A winner the rematch could not measure: reported, exit 1.
        p, argvs, res = run(tmp, quality([(P3, "q__int4__gemv_a__sm_90a", "q__int4__gemv_b__sm_90a", 1.2)]))
        check(p.returncode == 1 and res["problems"][0]["status"] == "not measured", f"not measured: {p.stdout}")

        # An earlier run's rows in the same database never stand in for this run's: P3's gemv_a has an old 'ok' row.
        times = dict(TIMES, **{P3: {"q__int4__gemv_a__sm_90a": 7.0, "q__int4__gemv_b__sm_90a": 9.0}})
        with open(os.path.join(tmp, "times.json"), "w") as f:
            json.dump(times, f)
        q3 = quality([(P3, "q__int4__gemv_a__sm_90a", "q__int4__gemv_b__sm_90a", 1.2)])
        run(tmp, q3)  # writes gemv_a's row
        with open(os.path.join(tmp, "times.json"), "w") as f:
            json.dump(TIMES, f)  # gemv_a no longer measured
        p, argvs, res = run(tmp, q3, keep_db=True)
        check(p.returncode == 1 and res["problems"][0]["status"] == "not measured",
              f"an old row is not this rematch's: {p.stdout}")

        # Nothing over the threshold: no autotune call, exit 0.
        p, argvs, res = run(tmp, q, extra=("--threshold", "1.1"))
        check(p.returncode == 0 and not argvs, f"nothing to rematch: exit 0, no call ({p.returncode}, {argvs})")

        # Bad input: exit 2 with a message naming it.
        bad = os.path.join(tmp, "bad.json")
        with open(bad, "w") as f:
            f.write("{not json")
        p = subprocess.run([sys.executable, SCRIPT, "--quality", bad, "--shapes", "s", "--autotune", fake, "--db",
                            os.path.join(tmp, "x.db")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        check(p.returncode == 2 and "bad.json" in p.stdout, f"unreadable quality file: exit 2 ({p.stdout})")
        p, _, _ = run(tmp, q, autotune=os.path.join(tmp, "no-such-autotune"))
        check(p.returncode == 2 and "no-such-autotune" in p.stdout, f"missing autotune: exit 2 ({p.stdout})")

    print("test_rematch:", "FAILED" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Tests of bench/make_report.py, plain python3 (no pytest, no third-party packages):

    python3 bench/tests/test_make_report.py        # exit status 0 = all passed, 1 = a failure

Builds a small fake bench_all.py results file and a README with the perf markers in a temp folder, runs
make_report.py as a subprocess (as CI would) and checks: the section between the markers is replaced and the text
outside them is untouched; a second run leaves the file byte-identical; a "slower than <anchor> (<ratio>x)" note
appears in exactly the table cells whose ratio (anchor time / kerntune time) is below 1, including a ratio of
0.996 that would round to 1.00; decode rows give kerntune's share of the read ceiling and compare paged rows with
the contiguous anchors (rows of a results file from before the decode family say there is no kerntune decode
kernel); failures are named; image
links are relative to the README; --stdout writes nothing; a README without the markers (or with them reversed)
gives exit status 2, a message naming both markers, and an unchanged file. Prefill rows of two models
(bench_all.py --shapes A,B) get a "heads" column before "dtype", each row compared with its own model's anchors
(the same workload in both models), the heads sentence names both geometries with their models, and the header
lists both shapes files; rows of one model keep the table without that column. With the run's dense-matmul peak
(rows impl "matmul_peak", one per dtype) the prefill table gets an "of bf16/fp16 matmul peak" column (kerntune
TFLOP/s / the peak of the row's dtype, two decimals; "-" where that peak failed) and a sentence under the table
giving the peaks; the peak rows are no table rows and change neither the counts nor anything else of the section.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), "make_report.py")
BEGIN, END = "<!-- perf:begin -->", "<!-- perf:end -->"

# (dtype, B, S) -> us of kerntune, flash, cudnn. flops chosen so that TFLOP/s = flops / us / 1e6.
PREFILL = {
    ("bf16", 1, 512): (20.0, 25.0, 18.0),     # faster than flash (1.25x), slower than cuDNN (0.90x)
    ("bf16", 1, 2048): (100.0, 150.0, 99.6),  # cuDNN ratio 0.996 -> must still be "slower"
    ("fp16", 1, 512): (20.0, 20.0, None),     # ratio exactly 1.00 vs flash -> no note; cuDNN failed
}
# (format, act, M) -> kerntune us; anchors per (impl, dtype, M)
QKV_KT = {("fp16", "fp16", 1): 20.0, ("fp16", "fp16", 256): 60.0, ("int4", "bf16", 1): 10.0,
          ("int4", "bf16", 256): None}  # None: kerntune failed (wrong result)
QKV_ANC = {("cublas_fused", "fp16", 1): 22.0, ("cublas_fused", "fp16", 256): 26.0,
           ("linear_x3", "fp16", 1): 36.0, ("linear_x3", "fp16", 256): 44.0,
           ("cublas_fused", "bf16", 1): 21.0, ("cublas_fused", "bf16", 256): 27.0,
           ("linear_x3", "bf16", 1): 37.0, ("linear_x3", "bf16", 256): 45.0,
           ("tinygemm_int4", "bf16", 1): 8.0, ("tinygemm_int4", "bf16", 256): 296.0}

# Decode rows of the family: (B, kv_len, q_len, page_size) -> (kerntune us or None, read ceiling GB/s);
# anchors per (B, kv_len, q_len) on the contiguous cache.
DECODE_KT = {(16, 4096, 1, 0): (20.0, None), (16, 4096, 1, 64): (21.0, None), (16, 4096, 4, 0): (None, 4000.0)}
DECODE_ANC = {(16, 4096, 1): {"sdpa_flash": 30.0, "sdpa_cudnn": 18.0}, (16, 4096, 4): {"sdpa_flash": 90.0,
                                                                                        "sdpa_cudnn": 80.0}}
_DEC_BYTES = (2 * 16 * 4096 * 4 * 128 + 2 * 16 * 28 * 128) * 2
# ceilings chosen so that kerntune reaches 80% (contiguous) and 95% (paged) of them
DECODE_KT[(16, 4096, 1, 0)] = (20.0, _DEC_BYTES / 20e-6 / 1e9 / 0.80)
DECODE_KT[(16, 4096, 1, 64)] = (21.0, _DEC_BYTES / 21e-6 / 1e9 / 0.95)

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def fake_results():
    rows = []
    geo = dict(num_heads=28, num_kv_heads=4, head_dim=128)
    for (dt, b, s), times in PREFILL.items():
        flops = 4.0 * b * 28 * s * s * 128 / 2
        for impl, us in zip(("kerntune", "sdpa_flash", "sdpa_cudnn"), times):
            r = dict(section="prefill", impl=impl, dtype=dt, batch=b, seqlen=s, seqlen_k=s, causal=True, flops=flops,
                     **geo)
            if us is None:
                r["error"] = "RuntimeError: No available kernel | aborting"
            else:
                r.update(us=us, tflops=flops / (us * 1e-6) / 1e12)
            rows.append(r)
    for dt in ("bf16",):
        for b, kv in ((1, 4096), (64, 2048)):
            nbytes = (2 * b * kv * 4 * 128 + 2 * b * 28 * 128) * 2
            base = dict(section="decode", dtype=dt, batch=b, kv_len=kv, bytes=nbytes, **geo)
            rows.append(dict(base, impl="kerntune", not_implemented="not implemented (no decode family yet)"))
            rows.append(dict(base, impl="sdpa_flash", us=22.0, gbps=nbytes / 22e-6 / 1e9))
            if b == 64:
                rows.append(dict(base, impl="sdpa_cudnn", error="RuntimeError: cuDNN refuses this shape"))
            else:
                rows.append(dict(base, impl="sdpa_cudnn", us=15.0, gbps=nbytes / 15e-6 / 1e9))
    # Rows of the decode family (fp16): kerntune timed with its read ceiling; paged rows carry no anchors (they are
    # compared with the contiguous ones); q_len 4's kerntune row failed.
    for (b, kv, ql, page), (kt_us, ceil_gbps) in DECODE_KT.items():
        nbytes = (2 * b * kv * 4 * 128 + 2 * b * ql * 28 * 128) * 2
        base = dict(section="decode", dtype="fp16", batch=b, kv_len=kv, q_len=ql, page_size=page,
                    layout="paged%d" % page if page else "contiguous", causal=True, bytes=nbytes, **geo)
        if kt_us is None:
            rows.append(dict(base, impl="kerntune", error="wrong result: rel err 0.5 > tol 0.005 (not timed)"))
        else:
            rows.append(dict(base, impl="kerntune", us=kt_us, gbps=nbytes / (kt_us * 1e-6) / 1e9, flush_us=kt_us + 3))
        rows.append(dict(base, impl="read_ceiling", us=1.0, gbps=ceil_gbps))
        if not page:
            for impl, us in DECODE_ANC[(b, kv, ql)].items():
                rows.append(dict(base, impl=impl, us=us, gbps=nbytes / (us * 1e-6) / 1e9, flush_us=us + 4))
    qgeo = dict(section="qkv", n=4608, k=3584, bias=True, **geo)
    for (impl, dt, m), us in QKV_ANC.items():
        rows.append(dict(qgeo, impl=impl, dtype=dt, format="int4" if impl == "tinygemm_int4" else dt, m=m, us=us))
    for (fmt, act, m), us in QKV_KT.items():
        r = dict(qgeo, impl="kerntune", format=fmt, dtype=act, m=m, rope=True)
        if us is None:
            r["error"] = "wrong result: rel err q 0.5 > tol 0.01 (not timed)"
        else:
            r.update(us=us, rel_err=1e-3)
        rows.append(r)
    return dict(schema="kerntune-bench/1", device="NVIDIA H100 80GB HBM3", gpu_slug="nvidia_h100_80gb_hbm3",
                driver="580.159.04", torch="2.11.0+cu130", cuda="13.0", date_utc="2026-11-21T10:00:00+00:00",
                kerntune_version="0.1.0", db="qwen7b-h100.db", shapes="shapes/qwen7b.json",
                command="python3 bench/bench_all.py --db qwen7b-h100.db", timing=dict(samples=40),
                rows=rows, plots=["nvidia_h100_80gb_hbm3_prefill.png", "nvidia_h100_80gb_hbm3_qkv.png"])


README = """# kerntune

Intro text | with a pipe.

{begin}
## Performance (old)

old numbers that must go away
{end}

## Layout

See ARCHITECTURE.md.
"""


def run(*args):
    p = subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def table_rows(section, header_start):
    """Rows (lists of cells) of the Markdown table whose header line starts with header_start."""
    lines = section.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(header_start):
            header = [c.strip() for c in line.strip().strip("|").split("|")]
            out = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]
                out.append(dict(zip(header, cells)))
            return out
    return None


def slower_notes(note):
    return dict(re.findall(r"slower than ([A-Za-z0-9. ]+?) \(([0-9.]+)x\)", note))


# Two models' prefill rows (bench_all.py --shapes shapes/qwen7b.json,shapes/llama8b.json):
# (model, Hq, Hkv, dtype, B, S, causal) -> us of kerntune, flash, cudnn. B=1 S=8192 non-causal is in both models, with
# different times: each row must be compared with its own model's anchors.
TWO_MODELS = {
    ("Qwen2.5-7B", 28, 4, "bf16", 1, 512, True): (20.0, 25.0, 18.0),
    ("Qwen2.5-7B", 28, 4, "bf16", 1, 8192, False): (1000.0, 1100.0, 900.0),   # 1.10x flash, 0.90x cuDNN
    ("Llama-3.1-8B", 32, 8, "bf16", 1, 4096, True): (400.0, 400.0, 500.0),
    ("Llama-3.1-8B", 32, 8, "bf16", 1, 8192, False): (1000.0, 800.0, 1300.0),  # 0.80x flash, 1.30x cuDNN
}


def two_model_results(with_model=True):
    """A results file of two shapes files, prefill only; with_model=False: rows without their "model" field (the
    names then come from the file's "models")."""
    rows = []
    for (model, hq, hkv, dt, b, s, causal), times in TWO_MODELS.items():
        flops = 4.0 * b * hq * s * s * 128 / (2 if causal else 1)
        for impl, us in zip(("kerntune", "sdpa_flash", "sdpa_cudnn"), times):
            r = dict(section="prefill", dtype=dt, batch=b, seqlen=s, seqlen_k=s, causal=causal, flops=flops,
                     num_heads=hq, num_kv_heads=hkv, head_dim=128, impl=impl, us=us,
                     tflops=flops / (us * 1e-6) / 1e12)
            if with_model:
                r["model"] = model
            rows.append(r)
    geo = lambda hidden, hq, hkv: dict(hidden_size=hidden, num_attention_heads=hq, num_key_value_heads=hkv,
                                       head_dim=128)
    return dict(schema="kerntune-bench/1", device="NVIDIA H200", driver="580.159.04", torch="2.11.0+cu130",
                cuda="13.0", date_utc="2026-11-29T10:00:00+00:00", kerntune_version="0.1.0", db="h200.db",
                shapes="shapes/qwen7b.json,shapes/llama8b.json", model="Qwen2.5-7B", geometry=geo(3584, 28, 4),
                models=[dict(model="Qwen2.5-7B", shapes="shapes/qwen7b.json", geometry=geo(3584, 28, 4)),
                        dict(model="Llama-3.1-8B", shapes="shapes/llama8b.json", geometry=geo(4096, 32, 8))],
                command="python3 bench/bench_all.py --db h200.db --shapes shapes/qwen7b.json,shapes/llama8b.json "
                        "--sections prefill", timing=dict(samples=40), rows=rows, plots=[])


def check_two_models(tmp):
    """Prefill rows of two geometries: the heads column, the per-model comparison, the sentence and the header."""
    readme = os.path.join(tmp, "README_TWO.md")
    for with_model in (True, False):
        what = "two models (rows %s \"model\")" % ("with" if with_model else "without")
        res_path = os.path.join(tmp, "two_models_%d.json" % with_model)
        with open(res_path, "w") as f:
            json.dump(two_model_results(with_model), f)
        with open(readme, "w") as f:
            f.write(README.format(begin=BEGIN, end=END))
        rc, out, err = run("--results", res_path, "--readme", readme, "--stdout")
        check(rc == 0, "%s: exit 0 (rc=%d, stderr=%s)" % (what, rc, err))
        prose = " ".join(out.split())  # the prose is wrapped at 120 columns
        check("Heads 28 query / 4 KV (Qwen2.5-7B) and 32 / 8 (Llama-3.1-8B), head_dim 128." in prose,
              "%s: the heads sentence names both geometries and models" % what)
        check("shapes `shapes/qwen7b.json` and `shapes/llama8b.json`" in prose,
              "%s: the header lists both shapes files" % what)
        header = [line for line in out.splitlines() if line.startswith("| ") and "kerntune TFLOP/s" in line]
        check(len(header) == 1 and header[0].startswith("| heads | dtype | B | S | causal |"),
              "%s: the prefill table starts with a heads column (%r)" % (what, header))
        pre = table_rows(out, "| heads | dtype |")
        check(pre is not None and len(pre) == len(TWO_MODELS), "%s: one prefill row per model and workload (%r)"
              % (what, pre))
        hq_of = {"28/4": (28, 4), "32/8": (32, 8)}
        got = set()
        for row in pre or []:
            check(row["heads"] in hq_of, "%s: heads cell is Hq/Hkv (%r)" % (what, row["heads"]))
            if row["heads"] not in hq_of:
                continue
            hq, hkv = hq_of[row["heads"]]
            key = [k for k in TWO_MODELS if k[1:6] == (hq, hkv, row["dtype"], int(row["B"]), int(row["S"]))]
            check(len(key) == 1, "%s: row %r is one of the workloads" % (what, row))
            if len(key) != 1:
                continue
            got.add(key[0])
            kt_us, fl_us, cu_us = TWO_MODELS[key[0]]
            check(row["vs flash"] == "%.2fx" % (fl_us / kt_us) and row["vs cuDNN"] == "%.2fx" % (cu_us / kt_us),
                  "%s: %s S=%s compared with its own model's anchors (%r)" % (what, row["heads"], row["S"], row))
        check(got == set(TWO_MODELS), "%s: every (model, workload) has its row" % what)
        # the same workload of the two models: two rows, in the order of the files
        s8192 = [r["heads"] for r in pre or [] if r["S"] == "8192"]
        check(s8192 == ["28/4", "32/8"], "%s: B=1 S=8192 once per model, first file first (%r)" % (what, s8192))
        notes = [r["note"] for r in pre or [] if r["S"] == "8192"]
        check(len(notes) == 2 and slower_notes(notes[0]) == {"SDPA cuDNN": "0.90"}
              and slower_notes(notes[1]) == {"SDPA flash": "0.80"},
              "%s: each B=1 S=8192 row's note names its own slower anchor (%r)" % (what, notes))


# The run's dense-matmul peak per dtype (bench_all.py: torch.matmul [8192 x 8192] x [8192 x 8192], timed the same way).
PEAK_TFLOPS = {"bf16": 800.0, "fp16": 640.0}


def peak_rows(failed=()):
    """matmul_peak rows as bench_all.py writes them (fp16 first, as a shapes file may list it: the report orders
    them bf16, fp16); dtypes in `failed` carry an error instead of a time."""
    rows = []
    flops = 2.0 * 8192 ** 3
    for dt in ("fp16", "bf16"):
        r = dict(section="prefill", impl="matmul_peak", dtype=dt, m=8192, n=8192, k=8192, flops=flops)
        if dt in failed:
            r["error"] = "RuntimeError: CUDA error: out of memory"
        else:
            tf = PEAK_TFLOPS[dt]
            r.update(us=flops / (tf * 1e12) * 1e6, tflops=tf, p20_us=1.0, p80_us=1.0, replays=40,
                     launches_per_replay=2, copies=1, timing="graph", rel_err=2e-3)
        rows.append(r)
    return rows


def strip_peak(section):
    """The section with the matmul-peak column of the prefill table and the peak sentence (+ its blank line) removed:
    what the report must be without the peak rows."""
    lines = section.split("\n")
    out, col, i = [], None, 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("| ") and "matmul peak |" in line:
            cells = line.split(" | ")
            col = [j for j, c in enumerate(cells) if c.endswith("matmul peak")][0]
        if col is not None and line.startswith("|"):
            cells = line.split("|")  # no escaped pipes in the cells before the note column
            del cells[col + 1]
            line = "|".join(cells)
        elif col is not None:
            col = None
        if line.startswith("Matmul peak:"):
            while lines[i]:  # the sentence may be wrapped
                i += 1
            i += 1
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def check_matmul_peak(tmp):
    """Prefill rows with the run's matmul peak: the column, its values, the sentence; nothing else changes."""
    readme = os.path.join(tmp, "README_PEAK.md")
    with open(readme, "w") as f:
        f.write(README.format(begin=BEGIN, end=END))
    base = fake_results()
    res_path = os.path.join(tmp, "peak.json")  # one path for every variant: the section names it
    with open(res_path, "w") as f:
        json.dump(base, f)
    rc, plain, err = run("--results", res_path, "--readme", readme, "--stdout")
    check(rc == 0, "peak: run without peak rows exits 0 (%s)" % err)
    check("matmul peak" not in plain.lower(), "peak: no peak column or sentence without matmul_peak rows")
    flops = lambda b, s: 4.0 * b * 28 * s * s * 128 / 2
    for failed in ((), ("fp16",)):
        what = "peak%s" % (" (fp16 failed)" if failed else "")
        res = dict(base, rows=peak_rows(failed) + base["rows"])
        with open(res_path, "w") as f:
            json.dump(res, f)
        rc, out, err = run("--results", res_path, "--readme", readme, "--stdout")
        check(rc == 0, "%s: exit 0 (rc=%d, stderr=%s)" % (what, rc, err))
        header = [line for line in out.splitlines() if line.startswith("| ") and "kerntune TFLOP/s" in line]
        check(len(header) == 1 and "| kerntune TFLOP/s | of bf16/fp16 matmul peak | SDPA flash |" in header[0],
              "%s: the column after kerntune TFLOP/s (%r)" % (what, header))
        pre = table_rows(out, "| dtype | B | S |")
        check(pre is not None and len(pre) == len(PREFILL), "%s: one row per workload, no peak rows (%r)" % (what, pre))
        for row in pre or []:
            key = (row["dtype"], int(row["B"]), int(row["S"]))
            kt_tf = flops(key[1], key[2]) / (PREFILL[key][0] * 1e-6) / 1e12
            want = "-" if row["dtype"] in failed else "%.2f" % (kt_tf / PEAK_TFLOPS[row["dtype"]])
            check(row.get("of bf16/fp16 matmul peak") == want, "%s: %s S=%s of peak %r, want %r"
                  % (what, row["dtype"], row["S"], row.get("of bf16/fp16 matmul peak"), want))
        bf512 = [r for r in pre or [] if r["dtype"] == "bf16" and r["S"] == "512"]
        check(bf512 and bf512[0]["of bf16/fp16 matmul peak"] == "0.12", "%s: 93.95 / 800 reads 0.12" % what)
        prose = " ".join(out.split())
        sentence = ("Matmul peak: torch.matmul [8192 x 8192] x [8192 x 8192] in the same run, timed the same way: "
                    + ("800.0 TFLOP/s bf16, 640.0 TFLOP/s fp16." if not failed else
                       "800.0 TFLOP/s bf16, fp16 failed (RuntimeError: CUDA error: out of memory)."))
        check(sentence in prose, "%s: the peak sentence (%r)" % (what, [l for l in out.splitlines() if "eak" in l]))
        # directly under the table
        lines = out.splitlines()
        at = [i for i, l in enumerate(lines) if l.startswith("Matmul peak:")]
        check(len(at) == 1 and lines[at[0] - 1] == "" and lines[at[0] - 2].startswith("| fp16 | 1 | 512 |"),
              "%s: the sentence right under the prefill table" % what)
        check(out.count("matmul_peak") == 0 and "at least as fast as SDPA flash in 3 of 3 rows" in prose
              and "SDPA cuDNN in 0 of 2 rows" in prose, "%s: counts over the workload rows only" % what)
        check(strip_peak(out) == plain, "%s: without the column and the sentence, the section is the one without "
              "peak rows" % what)
    # two models: the peak rows (no geometry, no model) add no heads label
    two = two_model_results()
    two["rows"] = [r for r in peak_rows() if r["dtype"] == "bf16"] + two["rows"]
    res_path = os.path.join(tmp, "peak_two.json")
    with open(res_path, "w") as f:
        json.dump(two, f)
    rc, out, err = run("--results", res_path, "--readme", readme, "--stdout")
    check(rc == 0, "peak, two models: exit 0 (%s)" % err)
    check("Heads 28 query / 4 KV (Qwen2.5-7B) and 32 / 8 (Llama-3.1-8B), head_dim 128." in " ".join(out.split()),
          "peak, two models: the heads sentence names the two geometries only")
    pre = table_rows(out, "| heads | dtype |")
    check(pre is not None and len(pre) == len(TWO_MODELS) and {r["heads"] for r in pre} == {"28/4", "32/8"},
          "peak, two models: one row per model and workload, heads 28/4 and 32/8 (%r)" % pre)
    for row in pre or []:
        key = [k for k in TWO_MODELS if k[1:3] == tuple(int(x) for x in row["heads"].split("/"))
               and k[5] == int(row["S"])][0]
        kt_tf = 4.0 * key[4] * key[1] * key[5] ** 2 * 128 / (2 if key[6] else 1) / (TWO_MODELS[key][0] * 1e-6) / 1e12
        check(row.get("of bf16 matmul peak") == "%.2f" % (kt_tf / PEAK_TFLOPS["bf16"]),
              "peak, two models: %s S=%s of bf16 peak (%r)" % (row["heads"], row["S"], row))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        res_dir = os.path.join(tmp, "bench", "results")
        os.makedirs(res_dir)
        res_path = os.path.join(res_dir, "nvidia_h100_80gb_hbm3.json")
        with open(res_path, "w") as f:
            json.dump(fake_results(), f)
        readme = os.path.join(tmp, "README.md")
        original = README.format(begin=BEGIN, end=END)
        with open(readme, "w") as f:
            f.write(original)

        # 1. replacement
        rc, out, err = run("--results", res_path, "--readme", readme)
        check(rc == 0, "first run exits 0 (rc=%d, stderr=%s)" % (rc, err))
        text = open(readme).read()
        check("old numbers that must go away" not in text, "old section content removed")
        check(text.count(BEGIN) == 1 and text.count(END) == 1, "markers kept exactly once")
        head, rest = text.split(BEGIN)
        section, tail = rest.split(END)
        check(head == original.split(BEGIN)[0], "text before the begin marker untouched")
        check(tail == original.split(END)[1], "text after the end marker untouched")
        check("## Performance (NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-21)" in section, "heading")
        check("python3 bench/bench_all.py --db qwen7b-h100.db" in section, "bench command named")
        check("torch 2.11.0+cu130" in section, "torch version named")
        check("](bench/results/nvidia_h100_80gb_hbm3_prefill.png)" in section, "prefill image link relative to README")
        check("](bench/results/nvidia_h100_80gb_hbm3_qkv.png)" in section, "qkv image link relative to README")
        # one model: no heads column, the single-geometry sentence and header as they always were
        check("| heads " not in section, "one model: no heads column")
        check("Heads 28 query / 4 KV, head_dim 128. TFLOP/s" in " ".join(section.split()), "one model: heads sentence")
        check("shapes `shapes/qwen7b.json`);" in " ".join(section.split()), "one model: shapes in the header")
        check("replays of one workload alternate" not in section, "no interleaving sentence without timing.interleaved")

        # 1b. timing.interleaved names the sections whose rows alternate their replays
        inter = fake_results()
        inter["timing"]["interleaved"] = ["prefill"]
        inter_path = os.path.join(res_dir, "interleaved.json")
        with open(inter_path, "w") as f:
            json.dump(inter, f)
        inter_readme = os.path.join(tmp, "README_interleaved.md")
        with open(inter_readme, "w") as f:
            f.write(original)
        rc, out, err = run("--results", inter_path, "--readme", inter_readme)
        check(rc == 0, "interleaved results: exit 0 (rc=%d, stderr=%s)" % (rc, err))
        check("In the prefill rows kerntune's and the anchors' replays of one workload alternate"
              in " ".join(open(inter_readme).read().split()), "interleaving sentence names the prefill rows")
        inter["timing"]["interleaved"] = ["prefill", "decode", "qkv"]
        with open(inter_path, "w") as f:
            json.dump(inter, f)
        rc, out, err = run("--results", inter_path, "--readme", inter_readme)
        check(rc == 0, "interleaved results, three sections: exit 0 (rc=%d, stderr=%s)" % (rc, err))
        check("In the prefill, decode and Q/K/V rows kerntune's and the anchors' replays of one workload alternate"
              in " ".join(open(inter_readme).read().split()), "interleaving sentence names all three sections")

        # 2. idempotent
        rc, out, err = run("--results", res_path, "--readme", readme)
        check(rc == 0, "second run exits 0")
        check(open(readme).read() == text, "second run leaves README byte-identical")

        # 3. prefill notes exactly where ratio < 1
        pre = table_rows(section, "| dtype | B | S |")
        check(pre is not None and len(pre) == len(PREFILL), "prefill table has one row per workload")
        for row in pre or []:
            kt_us, fl_us, cu_us = PREFILL[(row["dtype"], int(row["B"]), int(row["S"]))]
            notes = slower_notes(row["note"])
            for label, a_us in (("SDPA flash", fl_us), ("SDPA cuDNN", cu_us)):
                r = a_us / kt_us if a_us else None
                want = r is not None and r < 1
                check((label in notes) == want, "prefill %s %s: slower-than note iff ratio < 1 (ratio %s, note %r)"
                      % (row["dtype"], row["S"], r, row["note"]))
                if want:
                    check(float(notes[label]) < 1, "prefill note ratio reads below 1: %r" % row["note"])
        c = [r for r in pre or [] if r["dtype"] == "fp16"][0]
        check("SDPA cuDNN failed" in c["note"] and "No available kernel" in c["note"], "anchor failure named")
        check("\\|" in c["note"], "pipe in error text escaped")
        check(c["vs flash"] == "1.00x" and c["vs cuDNN"] == "-", "ratio cells: 1.00x and '-' for a failed anchor")
        b2048 = [r for r in pre or [] if r["S"] == "2048"][0]
        check(b2048["vs cuDNN"] == "0.996x", "0.996 is not shown as 1.00x (got %r)" % b2048["vs cuDNN"])

        # 4. decode rows
        dec = table_rows(section, "| dtype | B | KV len |")
        check(dec is not None and len(dec) == 2 + len(DECODE_KT), "decode table has one row per workload")
        fam = {(int(r["B"]), int(r["KV len"]), int(r["q_len"]), r["layout"]): r for r in dec or []
               if r["dtype"] == "fp16"}
        c1, p1, c4 = fam.get((16, 4096, 1, "contiguous")), fam.get((16, 4096, 1, "paged 64")), \
            fam.get((16, 4096, 4, "contiguous"))
        check(None not in (c1, p1, c4), "decode rows per q_len and layout: %r" % sorted(fam))
        if None not in (c1, p1, c4):
            check(c1["kerntune"].startswith("20.0 us (") and c1["% of read ceiling"] == "80%", "kerntune and ceiling")
            check(p1["% of read ceiling"] == "95%", "paged ceiling share")
            check(c1["vs flash"] == "1.50x" and c1["vs cuDNN"] == "0.90x", "decode ratios: %r" % c1)
            check(slower_notes(c1["note"]) == {"SDPA cuDNN": "0.90"}, "decode note names the slower anchor only")
            # the paged row is compared with the contiguous anchors of its size
            check(p1["SDPA flash us"] == "30.0" and p1["vs cuDNN"] == "0.86x", "paged row uses contiguous anchors")
            check("slower than SDPA cuDNN (0.86x)" in p1["note"], "paged slower-than note")
            check(c1["do_bench kerntune / cuDNN us"] == "23.0 / 22.0", "do_bench cell")
            check(c4["kerntune"] == "failed" and "kerntune failed: wrong result" in c4["note"], "failed kerntune named")
            check(c4["% of read ceiling"] == "-" and c4["vs flash"] == "-", "no ratio without a kerntune time")
            check("no kerntune decode kernel" not in c1["note"], "measured rows do not say not implemented")
        for row in [r for r in dec or [] if r["dtype"] == "bf16"]:
            check("no kerntune decode kernel yet" in row["note"], "decode row says no kerntune decode kernel")
            check(row["kerntune"] == "not implemented", "decode kerntune cell")
            check("slower than" not in row["note"], "no slower-than note without a kerntune time")
        check("cuDNN failed" in [r for r in dec or [] if r["B"] == "64"][0]["note"], "decode anchor failure named")

        # 5. qkv notes exactly where ratio < 1
        q = table_rows(section, "| format | M | act |")
        check(q is not None and len(q) == len(QKV_KT), "qkv table has one row per (format, M)")
        labels = {"cublas_fused": "cuBLAS", "linear_x3": "3x F.linear", "tinygemm_int4": "tinygemm int4"}
        for row in q or []:
            kt_us = QKV_KT[(row["format"], row["act"], int(row["M"]))]
            notes = slower_notes(row["note"])
            impls = ["cublas_fused", "linear_x3"] + (["tinygemm_int4"] if row["format"] == "int4" else [])
            for impl in ("cublas_fused", "linear_x3", "tinygemm_int4"):
                a_us = QKV_ANC.get((impl, "bf16" if impl == "tinygemm_int4" else row["act"], int(row["M"])))
                r = a_us / kt_us if (kt_us and a_us and impl in impls) else None
                want = r is not None and r < 1
                check((labels[impl] in notes) == want, "qkv %s M=%s vs %s: note iff ratio < 1 (ratio %s, note %r)"
                      % (row["format"], row["M"], impl, r, row["note"]))
            if kt_us is None:
                check("kerntune failed: wrong result" in row["note"] and row["kerntune us"] == "failed",
                      "kerntune failure named")
        fp16_m1 = [r for r in q or [] if r["format"] == "fp16" and r["M"] == "1"][0]
        check(fp16_m1["vs cuBLAS"] == "1.10x" and fp16_m1["tinygemm int4 us"] == "-",
              "fp16 row: ratio 22/20 and no tinygemm comparison")
        int4_m1 = [r for r in q or [] if r["format"] == "int4" and r["M"] == "1"][0]
        check(int4_m1["vs tinygemm"] == "0.80x" and int4_m1["cuBLAS us"] == "21.0",
              "int4 row compared with bf16 anchors and tinygemm (%r)" % int4_m1)

        # 6. --stdout writes nothing
        rc, out, err = run("--results", res_path, "--readme", readme, "--stdout")
        check(rc == 0 and out.strip() == section.strip(), "--stdout prints the same section")
        check(open(readme).read() == text, "--stdout leaves README alone")

        # 7. missing / reversed markers -> exit 2, message names both, file unchanged
        for name, body in (("none", "# x\n\n## Performance\n\nold\n"),
                           ("begin only", "# x\n%s\nold\n" % BEGIN),
                           ("reversed", "# x\n%s\nold\n%s\n" % (END, BEGIN))):
            bad = os.path.join(tmp, "BAD.md")
            with open(bad, "w") as f:
                f.write(body)
            rc, out, err = run("--results", res_path, "--readme", bad)
            check(rc == 2, "markers %s: exit 2 (got %d)" % (name, rc))
            check(BEGIN in err and END in err, "markers %s: message names both markers (%r)" % (name, err))
            check(open(bad).read() == body, "markers %s: file unchanged" % name)

        # 8. unreadable results -> exit 2
        rc, out, err = run("--results", os.path.join(tmp, "nope.json"), "--readme", readme)
        check(rc == 2 and "cannot read results" in err, "missing results file: exit 2 with a message")

        # 9. prefill rows of two models
        check_two_models(tmp)

        # 10. the run's matmul peak
        check_matmul_peak(tmp)

    n_fail = len(FAILURES)
    print("test_make_report: %s" % ("all checks passed" if not n_fail else "%d check(s) failed" % n_fail))
    print("%d passed, %d failed" % (0 if n_fail else 1, 1 if n_fail else 0))
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())

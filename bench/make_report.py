#!/usr/bin/env python3
"""Writes README.md's Performance section from a bench/bench_all.py results file.

    python3 bench/make_report.py [--results bench/results/<gpu>.json] [--readme README.md] [--stdout]

Plain python3 (3.7+), standard library only: runs on the CI machine (Debian 12, no numpy / matplotlib / torch).

Input: the JSON written by bench/bench_all.py (schema "kerntune-bench/1": device, driver, torch, date_utc,
kerntune_version, db, command, rows, plots). Without --results, the newest *.json of that schema in bench/results/.

Output: a Markdown section (heading "## Performance (<GPU>, driver <driver>, <date>)", the commands that made it,
then three tables) that replaces everything between the lines `<!-- perf:begin -->` and `<!-- perf:end -->` of the
README (the markers themselves stay; text outside them is untouched; running twice gives the same file). With
--stdout the section is printed and no file is written. Image links point at the PNGs of the results file,
relative to the README's folder.

Tables and ratios (all from the JSON's raw times; "x" ratios > 1 mean kerntune is faster):
  - attention prefill: TFLOP/s of kerntune, SDPA flash, SDPA cuDNN; ratio = kerntune TFLOP/s / anchor TFLOP/s.
    When the results hold the run's dense-matmul peak (rows impl "matmul_peak", one per dtype: torch.matmul of two
    [8192, 8192] matrices, timed the same way), a column "of bf16/fp16 matmul peak" = kerntune TFLOP/s / the peak of
    the row's dtype (two decimals) after kerntune's TFLOP/s, and a sentence under the table giving the peaks; those
    rows are no table rows. Without them, the table is as it always was.
  - attention decode: kerntune us and GB/s, its share of the read ceiling (a pure read of the same K + V bytes in
    the same run), SDPA flash / cuDNN us on the contiguous cache (paged rows compared with those), ratio = anchor us /
    kerntune us, and the do_bench-style times where measured. A results file from before the decode family (kerntune
    rows marked not_implemented) says "no kerntune decode kernel yet".
  - Q/K/V projection: us of kerntune (bias + RoPE + split fused) and of cuBLAS (one F.linear + bias),
    3x F.linear, tinygemm int4 (bf16, g128, no bias) in the kerntune row's activation dtype;
    ratio = anchor us / kerntune us. tinygemm is compared with the 4-bit formats only.
  Every row where kerntune is slower than an anchor (ratio < 1) says so in its note column, e.g.
  "slower than cuBLAS (0.45x)"; failures (kerntune or anchor) are named there too.
  Rows of several models (bench_all.py --shapes A,B; each row's "model" and num_heads / num_kv_heads): each table
  gets a "heads" column (Hq/Hkv, e.g. "28/4") before its first, rows are compared with the anchors of their own
  model, and the prefill (and Q/K/V) text names every geometry with its model. Rows of one model: no such column.

Exit status: 0 ok; 2 bad input: results missing or unreadable, or README without both markers (the message names
them), in which case nothing is written.
"""
import argparse
import glob
import json
import os
import sys
import textwrap

BEGIN = "<!-- perf:begin -->"
END = "<!-- perf:end -->"
SCHEMA = "kerntune-bench/1"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOUR_BIT = ("int4", "nf4", "mxfp4", "nvfp4", "int4_kb128", "nf4_kb128", "mxfp4_kb128", "nvfp4_kb128")
LABEL = {"sdpa_flash": "SDPA flash", "sdpa_cudnn": "SDPA cuDNN", "cublas_fused": "cuBLAS",
         "linear_x3": "3x F.linear", "tinygemm_int4": "tinygemm int4"}
NO_DECODE = "no kerntune decode kernel yet"


class ReportError(Exception):
    pass


# ---------------------------------------------------------------------------------------------------------------
# formatting
# ---------------------------------------------------------------------------------------------------------------

def interleaved_text(timing):
    """The sentence naming the sections whose rows of one workload were timed with their replays interleaved
    (bench_all's timing.interleaved), or nothing when none was."""
    secs = timing.get("interleaved") or []
    if not secs:
        return ""
    names = {"qkv": "Q/K/V"}
    return (" In the %s rows kerntune's and the anchors' replays of one workload alternate (kerntune, anchor 1, "
            "anchor 2, ..., kerntune, ...; the Q/K/V rows: every format and anchor of one M), so that all of them run "
            "at the same SM clocks." % and_join([names.get(s, s) for s in secs]))


def cell(text):
    """A Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def short(text, n=70):
    t = " ".join(str(text).split())
    return t if len(t) <= n else t[: n - 3] + "..."


def num(v, digits=1):
    if v is None:
        return "-"
    if abs(v) < 10 and digits == 1:
        return "%.2f" % v
    return "%.*f" % (digits, v)


def ratio_text(r):
    """'0.45x'; a ratio below 1 never reads as 1.00x (three decimals there, at most 0.999x)."""
    t = "%.2fx" % r
    if r < 1 and t == "1.00x":
        t = "%.3fx" % r if "%.3f" % r != "1.000" else "0.999x"
    return t


def ratio(anchor_us, kt_us):
    """anchor time / kerntune time (> 1: kerntune faster); None if either is missing."""
    if anchor_us is None or kt_us is None or kt_us <= 0 or anchor_us <= 0:
        return None
    return anchor_us / kt_us


def good(row):
    return bool(row) and not row.get("error") and row.get("us") is not None


def geo_key(row):
    """The model and head geometry a row was measured for (bench_all.py --shapes A,B: rows of several models)."""
    return (row.get("model"), row.get("num_heads"), row.get("num_kv_heads"), row.get("head_dim"))


def heads_labels(rows):
    """{geo_key: "Hq/Hkv"} when the rows are of more than one model / head geometry (the tables then get a "heads"
    column); None when they are all of one (the tables keep their single-model layout). Labels that would
    coincide get the head_dim, then the model name."""
    keys = list(dict.fromkeys(geo_key(r) for r in rows))
    if len(keys) <= 1:
        return None
    for fmt in ("{1}/{2}", "{1}/{2}/d{3}", "{1}/{2}/d{3} {0}"):
        labels = {k: fmt.format(*k) for k in keys}
        if len(set(labels.values())) == len(keys):
            break
    return labels


def model_name(key, models):
    """The model of a geo_key: the rows' own "model", else the results file's "models" entry of that geometry."""
    if key[0]:
        return key[0]
    names = [m.get("model") for m in models or []
             if (m.get("geometry") or {}).get("num_attention_heads") == key[1]
             and (m.get("geometry") or {}).get("num_key_value_heads") == key[2]
             and (m.get("geometry") or {}).get("head_dim") == key[3] and m.get("model")]
    return ", ".join(names) if names else None


def and_join(items):
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def heads_text(rows, models=None):
    """'28 query / 4 KV, head_dim 128' for rows of one geometry; for several, each with its model:
    '28 query / 4 KV (Qwen2.5-7B) and 32 / 8 (Llama-3.1-8B), head_dim 128' (the head_dim per geometry when they
    differ)."""
    keys = list(dict.fromkeys(geo_key(r) for r in rows))
    if len(keys) <= 1:
        first = rows[0]
        return "%s query / %s KV, head_dim %s" % (first.get("num_heads", "?"), first.get("num_kv_heads", "?"),
                                                  first.get("head_dim", "?"))
    one_d = len({k[3] for k in keys}) == 1
    parts = []
    for i, k in enumerate(keys):
        text = ("%s query / %s KV" if i == 0 else "%s / %s") % (k[1], k[2])
        if not one_d:
            text += ", head_dim %s" % k[3]
        name = model_name(k, models)
        parts.append(text + (" (%s)" % name if name else ""))
    return and_join(parts) + (", head_dim %s" % keys[0][3] if one_d else "")


def shapes_text(shapes):
    """The results' "shapes" for the header: `a.json`, or `a.json` and `b.json` for a comma-joined list of paths
    (bench_all.py --shapes A,B); any other text as it is."""
    parts = [p.strip() for p in str(shapes).split(",")]
    if len(parts) > 1 and all(p and " " not in p for p in parts):
        return and_join("`%s`" % p for p in parts)
    return "`%s`" % shapes


# ---------------------------------------------------------------------------------------------------------------
# sections
# ---------------------------------------------------------------------------------------------------------------
def notes_for(kt_row, anchors, kt_label="kerntune"):
    """anchors: list of (label, row or None, ratio or None). Returns (note text, number of slower-than notes)."""
    notes = []
    slower = 0
    if kt_row is not None and kt_row.get("error"):
        notes.append("%s failed: %s" % (kt_label, short(kt_row["error"])))
    if kt_row is not None and kt_row.get("timing") == "eager":
        notes.append("%s timed eagerly (CUDA graph capture failed; launch overhead included)" % kt_label)
    for label, row, r in anchors:
        if row is not None and row.get("error"):
            notes.append("%s failed: %s" % (label, short(row["error"], 50)))
        if row is not None and row.get("timing") == "eager" and not row.get("error"):
            notes.append("%s timed eagerly (graph capture failed)" % label)
        if r is not None and r < 1:
            notes.append("slower than %s (%s)" % (label, ratio_text(r)))
            slower += 1
    return "; ".join(notes), slower


DTYPE_ORDER = ("bf16", "fp16")


def matmul_peaks(rows):
    """The run's matmul_peak rows (bench_all.py: one per dtype of the prefill rows), bf16 first, then fp16."""
    peaks = [r for r in rows if r.get("section") == "prefill" and r.get("impl") == "matmul_peak"]
    order = lambda r: (DTYPE_ORDER.index(r.get("dtype")) if r.get("dtype") in DTYPE_ORDER else len(DTYPE_ORDER),
                       str(r.get("dtype")))
    return sorted(peaks, key=order)


def peak_sentence(peaks):
    """'Matmul peak: torch.matmul [8192 x 8192] x [8192 x 8192] in the same run, timed the same way: X TFLOP/s bf16,
    Y fp16.' (a failed peak is named with its error)."""
    first = peaks[0]
    m, n, k = (first.get(x, 8192) for x in ("m", "n", "k"))
    parts = []
    for r in peaks:
        if r.get("tflops") and not r.get("error"):
            parts.append("%s TFLOP/s %s" % (num(r["tflops"]), r.get("dtype")))
        else:
            parts.append("%s failed (%s)" % (r.get("dtype"), short(r.get("error") or "not measured", 60)))
    return ("Matmul peak: torch.matmul [%s x %s] x [%s x %s] in the same run, timed the same way: %s." % (
        m, k, k, n, ", ".join(parts)))


def prefill_section(rows, models=None):
    pre = [r for r in rows if r.get("section") == "prefill" and r.get("impl") != "matmul_peak"]
    if not pre:
        return []
    peaks = matmul_peaks(rows)  # the run's dense-matmul peak per dtype: an "of ... matmul peak" column
    peak = {r["dtype"]: r["tflops"] for r in peaks if r.get("tflops") and not r.get("error")}
    peak_head = ("of %s matmul peak | " % "/".join(dict.fromkeys(str(r.get("dtype")) for r in peaks))
                 if peaks else "")
    heads = heads_labels(pre)  # several geometries: a "heads" column before "dtype"
    groups = {}
    for r in pre:
        key = (geo_key(r), r["dtype"], r["batch"], r["seqlen"], r.get("seqlen_k", r["seqlen"]), r.get("causal", True))
        groups.setdefault(key, {})[r["impl"]] = r
    out = ["### Attention prefill", "",
           "Heads %s. TFLOP/s = 4·B·Hq·S²·D / time, halved when causal. Anchors: torch "
           "SDPA with the FLASH_ATTENTION (FlashAttention-2) and CUDNN_ATTENTION backends on transposed views of the "
           "same [B, S, H, D] tensors, `enable_gqa=True`. vs = kerntune TFLOP/s / anchor TFLOP/s (> 1: kerntune "
           "faster)." % heads_text(pre, models),
           "",
           ("| heads " if heads else "") +
           "| dtype | B | S | causal | kerntune TFLOP/s | " + peak_head +
           "SDPA flash | SDPA cuDNN | vs flash | vs cuDNN | note |",
           ("|---" if heads else "") + "|---|---|---|---|---|" + ("---|" if peaks else "") + "---|---|---|---|---|"]
    counts = {"sdpa_flash": [0, 0], "sdpa_cudnn": [0, 0]}  # [kerntune faster, compared]
    for (g, dt, b, s, sk, causal), by in groups.items():
        kt = by.get("kerntune")
        kt_us = kt.get("us") if good(kt) else None
        anchors, cells = [], []
        for impl in ("sdpa_flash", "sdpa_cudnn"):
            a = by.get(impl)
            a_us = a.get("us") if good(a) else None
            r = ratio(a_us, kt_us)
            anchors.append((LABEL[impl], a, r))
            cells.append(r)
            if r is not None:
                counts[impl][1] += 1
                counts[impl][0] += r >= 1
        note, _ = notes_for(kt, anchors)
        tf = lambda row: num(row.get("tflops")) if good(row) else ("failed" if row and row.get("error") else "-")
        s_txt = str(s) if sk == s else "%s/%s" % (s, sk)
        lead = "| %s " % cell(heads[g]) if heads else ""
        of_peak = ""
        if peaks:
            kt_tf = kt.get("tflops") if good(kt) else None
            of_peak = "%s | " % ("%.2f" % (kt_tf / peak[dt]) if kt_tf and peak.get(dt) else "-")
        out.append(lead + "| %s | %s | %s | %s | %s | %s%s | %s | %s | %s | %s |" % (
            dt, b, s_txt, "yes" if causal else "no", tf(kt), of_peak, tf(by.get("sdpa_flash")),
            tf(by.get("sdpa_cudnn")),
            ratio_text(cells[0]) if cells[0] is not None else "-", ratio_text(cells[1]) if cells[1] is not None else "-",
            cell(note)))
    out.append("")
    if peaks:
        out += [peak_sentence(peaks), ""]
    summary = []
    for impl in ("sdpa_flash", "sdpa_cudnn"):
        faster, total = counts[impl]
        if total:
            summary.append("at least as fast as %s in %d of %d rows" % (LABEL[impl], faster, total))
    if summary:
        out += ["kerntune is " + ", ".join(summary) + ".", ""]
    return out


def decode_section(rows):
    dec = [r for r in rows if r.get("section") == "decode"]
    if not dec:
        return []
    heads = heads_labels(dec)  # several geometries: a "heads" column before "dtype"
    groups = {}
    for r in dec:
        key = (geo_key(r), r["dtype"], r["batch"], r["kv_len"], r.get("q_len", 1), r.get("page_size", 0))
        groups.setdefault(key, {})[r["impl"]] = r
    contig = {k[:5]: by for k, by in groups.items() if k[5] == 0}
    out = ["### Attention decode", "",
           "q_len new tokens per sequence (causal among themselves) against a KV cache of kv_len tokens, contiguous or "
           "paged (shuffled block table). GB/s = (K + V cache + q + o bytes) / time; read ceiling = the GB/s a pure "
           "read of the same K + V bytes reaches on this GPU (a Triton kernel of 16-byte loads, "
           "`bench_all.read_ceiling_fn`), measured in the same run. Anchors "
           "(SDPA with the equivalent mask) run on the contiguous cache; a paged row is compared with them. vs = "
           "anchor time / kerntune time; do_bench = one call with the L2 flushed.", "",
           ("| heads " if heads else "") +
           "| dtype | B | KV len | q_len | layout | bytes (MB) | kerntune | % of read ceiling | SDPA flash us | "
           "SDPA cuDNN us | vs flash | vs cuDNN | do_bench kerntune / cuDNN us | note |",
           ("|---" if heads else "") + "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (g, dt, b, kv, ql, page), by in groups.items():
        any_row = next(iter(by.values()))
        mb = any_row.get("bytes", 0) / 1e6
        kt = by.get("kerntune")
        kt_us = kt.get("us") if good(kt) else None
        anchor_rows = contig.get((g, dt, b, kv, ql), {})
        cells, anchors = [], []
        for impl in ("sdpa_flash", "sdpa_cudnn"):
            a = anchor_rows.get(impl)
            a_us = a.get("us") if good(a) else None
            r = ratio(a_us, kt_us)
            anchors.append((LABEL[impl], a, r))
            cells.append(num(a_us) if a_us is not None else ("failed" if a and a.get("error") else "-"))
        note, _ = notes_for(kt if kt else None, anchors)
        ceil = by.get("read_ceiling")
        pct = "-"
        if kt_us is not None and good(ceil) and ceil.get("gbps") and kt.get("gbps"):
            pct = "%.0f%%" % (100.0 * kt["gbps"] / ceil["gbps"])
        if kt_us is None:
            kt_cell = "failed" if kt and kt.get("error") else "not measured"
            if kt and kt.get("not_implemented"):
                kt_cell = "not implemented"
                note = NO_DECODE + ("; " + note if note else "")
        else:
            kt_cell = "%s us (%s GB/s)" % (num(kt_us), num(kt.get("gbps"), 0))
        cu = anchor_rows.get("sdpa_cudnn") or {}
        flush = "%s / %s" % (num(kt.get("flush_us")) if kt and kt.get("flush_us") else "-",
                             num(cu.get("flush_us")) if cu.get("flush_us") else "-")
        out.append(("| %s " % cell(heads[g]) if heads else "") +
                   "| %s | %s | %s | %s | %s | %.1f | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            dt, b, kv, ql, "paged %d" % page if page else "contiguous", mb, kt_cell, pct, cells[0], cells[1],
            ratio_text(anchors[0][2]) if anchors[0][2] is not None else "-",
            ratio_text(anchors[1][2]) if anchors[1][2] is not None else "-", flush, cell(note)))
    out.append("")
    return out


def qkv_section(rows, models=None):
    qkv = [r for r in rows if r.get("section") == "qkv"]
    if not qkv:
        return []
    heads = heads_labels(qkv)  # several models: a "heads" column before "format", anchors per model
    anc = {}
    for r in qkv:
        if r["impl"] != "kerntune":
            anc[(geo_key(r), r["impl"], r["dtype"], r["m"])] = r
    kts = [r for r in qkv if r["impl"] == "kerntune"]
    shapes = []  # "K .. -> N .. (heads)" of each model, from its first row
    firsts = {}
    for r in qkv:
        firsts.setdefault(geo_key(r), r)
    for first in firsts.values():
        text = "K %s -> N %s (%s query + 2 x %s KV heads of %s" % (
            first.get("k", "?"), first.get("n", "?"), first.get("num_heads", "?"), first.get("num_kv_heads", "?"),
            first.get("head_dim", "?"))
        name = model_name(geo_key(first), models) if heads else None
        shapes.append(text + ("; %s)" % name if name else ")"))
    out = ["### Fused Q/K/V projection", "",
           "%s. kerntune: one kernel = GEMM with the packed weight + bias + "
           "RoPE + split into Q/K/V. Anchors do the GEMM (+ bias) only: cuBLAS = one `F.linear` on the concatenated "
           "weight, 3x F.linear = separate q/k/v calls, tinygemm int4 = `torch.ops.aten._weight_int4pack_mm` (bf16, "
           "group 128, no bias; compared with the 4-bit formats only). Activations: fp16 for the fp16 formats (fp16, fp16_kb64), bf16 "
           "otherwise; each row's anchors use the same activation dtype. us per call; vs = anchor time / kerntune "
           "time (> 1: kerntune faster)." % and_join(shapes),
           "",
           ("| heads " if heads else "") +
           "| format | M | act | kerntune us | cuBLAS us | 3x F.linear us | tinygemm int4 us | vs cuBLAS | vs 3x F.linear "
           "| vs tinygemm | note |",
           ("|---" if heads else "") + "|---|---|---|---|---|---|---|---|---|---|---|"]
    counts = {"cublas_fused": [0, 0], "linear_x3": [0, 0], "tinygemm_int4": [0, 0]}
    for r in kts:
        kt_us = r.get("us") if good(r) else None
        m, act, fmt, g = r["m"], r["dtype"], r["format"], geo_key(r)
        impls = [("cublas_fused", act), ("linear_x3", act)]
        if fmt in FOUR_BIT:
            impls.append(("tinygemm_int4", "bf16"))
        anchors, us_cells, ratio_cells = [], {}, {}
        for impl, dt in impls:
            a = anc.get((g, impl, dt, m))
            a_us = a.get("us") if good(a) else None
            rr = ratio(a_us, kt_us)
            anchors.append((LABEL[impl], a, rr))
            us_cells[impl] = num(a_us) if a_us is not None else ("failed" if a and a.get("error") else "-")
            ratio_cells[impl] = ratio_text(rr) if rr is not None else "-"
            if rr is not None:
                counts[impl][1] += 1
                counts[impl][0] += rr >= 1
        note, _ = notes_for(r, anchors)
        if r.get("note"):
            note = (note + "; " if note else "") + short(r["note"], 60)
        kt_cell = num(kt_us) if kt_us is not None else ("failed" if r.get("error") else "-")
        lead = "| %s " % cell(heads[g]) if heads else ""
        out.append(lead + "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            fmt, m, act, kt_cell, us_cells.get("cublas_fused", "-"), us_cells.get("linear_x3", "-"),
            us_cells.get("tinygemm_int4", "-"), ratio_cells.get("cublas_fused", "-"), ratio_cells.get("linear_x3", "-"),
            ratio_cells.get("tinygemm_int4", "-"), cell(note)))
    out.append("")
    summary = []
    for impl in ("cublas_fused", "linear_x3", "tinygemm_int4"):
        faster, total = counts[impl]
        if total:
            summary.append("at least as fast as %s in %d of %d rows" % (LABEL[impl], faster, total))
    if summary:
        out += ["kerntune is " + ", ".join(summary) + ".", ""]
    # the anchors alone, both activation dtypes
    gms = [(g, m) for g in dict.fromkeys(k[0] for k in anc) for m in sorted({k[3] for k in anc if k[0] == g})]
    if gms:
        out += ["Anchors alone (us):", "",
                ("| heads " if heads else "") +
                "| M | cuBLAS fp16 | cuBLAS bf16 | 3x F.linear fp16 | 3x F.linear bf16 | tinygemm int4 (bf16) |",
                ("|---" if heads else "") + "|---|---|---|---|---|---|"]
        for g, m in gms:
            cells = []
            for impl, dt in (("cublas_fused", "fp16"), ("cublas_fused", "bf16"), ("linear_x3", "fp16"),
                             ("linear_x3", "bf16"), ("tinygemm_int4", "bf16")):
                a = anc.get((g, impl, dt, m))
                cells.append(num(a["us"]) if good(a) else ("failed" if a and a.get("error") else "-"))
            out.append(("| %s " % cell(heads[g]) if heads else "") + "| %s | %s |" % (m, " | ".join(cells)))
        out.append("")
    return out


def build_section(res, results_path, readme_path):
    for key in ("device", "rows"):
        if key not in res:
            raise ReportError("%s: not a bench_all.py results file (no %r)" % (results_path, key))
    date = str(res.get("date_utc", "unknown date"))
    out = ["## Performance (%s, driver %s, %s)" % (res["device"], res.get("driver", "unknown"), date[:10]), ""]
    readme_dir = os.path.dirname(os.path.abspath(readme_path))
    res_abs = os.path.abspath(results_path)

    def link(path):
        return os.path.relpath(path, readme_dir).replace(os.sep, "/")

    t = res.get("timing", {})
    shown = os.path.relpath(res_abs, REPO) if res_abs.startswith(REPO + os.sep) else results_path
    out.append(
        "Measured by `%s` on %s at %s (torch %s, CUDA %s, kerntune %s, tuning database `%s`, shapes %s); this "
        "section was written by `python3 bench/make_report.py --results %s`. Raw data: [%s](%s)." % (
            res.get("command", "python3 bench/bench_all.py"), res["device"], date, res.get("torch", "?"),
            res.get("cuda", "?"), res.get("kerntune_version", "?"), res.get("db", "?"),
            shapes_text(res.get("shapes", "?")),
            shown, os.path.basename(res_abs), link(res_abs)))
    out.append("")
    out.append(
        "Timing, the same for kerntune and every anchor, in one process: a CUDA graph of launches walking through "
        "copies of the inputs that together exceed 3x the L2 (cold L2), replayed %s times, median time per launch "
        "(p20/p80 in the JSON); Python launch overhead is not included. Every kerntune output was checked against "
        "a float64 reference before it was timed.%s" % (t.get("samples", "N"), interleaved_text(t)))
    out.append("")
    if res.get("kerntune_error"):
        out += ["**kerntune did not run:** %s" % cell(res["kerntune_error"]), ""]
    for sec, errtxt in sorted((res.get("section_errors") or {}).items()):
        out += ["**Section %s aborted:** %s" % (sec, cell(errtxt)), ""]
    rows = res["rows"]
    plots = res.get("plots") or []
    res_dir = os.path.dirname(res_abs)

    def images(tag, title):
        lines = []
        for p in plots:
            if tag in os.path.basename(p):
                lines.append("![%s](%s)" % (title, link(os.path.join(res_dir, p))))
        return lines + ([""] if lines else [])

    out += prefill_section(rows, res.get("models"))
    out += images("_prefill", "attention prefill TFLOP/s")
    out += decode_section(rows)
    out += qkv_section(rows, res.get("models"))
    out += images("_qkv", "Q/K/V projection us vs M")
    while out and out[-1] == "":
        out.pop()
    # Prose paragraphs are wrapped at 120 columns (Markdown joins the lines); table rows stay on one line each.
    lines = [line if line.startswith("|") or len(line) <= 120 else textwrap.fill(line, 120, break_on_hyphens=False)
             for line in out]
    return "\n".join(lines) + "\n"


def replace_between_markers(text, section):
    b = text.find(BEGIN)
    e = text.find(END)
    if b < 0 or e < 0:
        missing = [m for m, i in ((BEGIN, b), (END, e)) if i < 0]
        raise ReportError("missing marker(s) %s: put `%s` and `%s` on their own lines around README's Performance "
                          "section" % (" and ".join("`%s`" % m for m in missing), BEGIN, END))
    if text.count(BEGIN) != 1 or text.count(END) != 1 or e < b:
        raise ReportError("markers `%s` ... `%s` must each appear once, begin before end" % (BEGIN, END))
    head = text[: b + len(BEGIN)]
    tail = text[e:]
    return head + "\n" + section.rstrip("\n") + "\n" + tail


def default_results():
    cands = []
    for p in glob.glob(os.path.join(REPO, "bench", "results", "*.json")):
        try:
            with open(p) as f:
                if json.load(f).get("schema") == SCHEMA:
                    cands.append(p)
        except Exception:
            continue
    if not cands:
        raise ReportError("no bench_all.py results (schema %s) in bench/results/: run bench/bench_all.py on the GPU "
                          "or pass --results FILE" % SCHEMA)
    return max(cands, key=lambda p: (os.path.getmtime(p), p))


def main(argv=None):
    ap = argparse.ArgumentParser(description="Write README.md's Performance section from bench/bench_all.py results.")
    ap.add_argument("--results", help="results JSON of bench/bench_all.py (default: newest in bench/results/)")
    ap.add_argument("--readme", default=os.path.join(REPO, "README.md"), help="README to rewrite (default README.md)")
    ap.add_argument("--stdout", action="store_true", help="print the section only; write nothing")
    a = ap.parse_args(argv)
    try:
        path = a.results or default_results()
        try:
            with open(path) as f:
                res = json.load(f)
        except (OSError, ValueError) as e:
            raise ReportError("cannot read results %s: %s" % (path, e))
        if not isinstance(res, dict):
            raise ReportError("%s: not a bench_all.py results file" % path)
        section = build_section(res, path, a.readme)
        if a.stdout:
            sys.stdout.write(section)
            return 0
        try:
            with open(a.readme, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ReportError("cannot read %s: %s" % (a.readme, e))
        new = replace_between_markers(text, section)
    except ReportError as e:
        print("make_report: error: %s" % e, file=sys.stderr)
        return 2
    if new != text:
        tmp = a.readme + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(new)
        os.replace(tmp, a.readme)
        print("make_report: wrote the Performance section of %s from %s" % (a.readme, path))
    else:
        print("make_report: %s already up to date (%s)" % (a.readme, path))
    return 0


if __name__ == "__main__":
    sys.exit(main())

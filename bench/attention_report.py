#!/usr/bin/env python3
"""Joins autotune's --json results with bench/attention_anchors.py output (same run, same GPU) into one
table: kerntune best variant vs torch SDPA flash (FlashAttention-2) and cuDNN, TFLOP/s and ratios."""
import argparse, json, re


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tune", required=True)
    ap.add_argument("--anchors", required=True)
    ap.add_argument("--out")
    a = ap.parse_args()
    tune = json.load(open(a.tune))
    anchors = json.load(open(a.anchors))
    idx = {(r["dtype"], r["batch"], r["seqlen_q"], r["seqlen_k"], r["causal"], r["backend"]): r for r in anchors["rows"]}
    out = []
    print(f"device: {tune['device']} | anchors: torch {anchors['torch']} on {anchors['device']}")
    print(f"{'dtype':5} {'B':>2} {'S':>6} {'causal':6} {'kerntune':>9} {'flash':>7} {'cudnn':>7} {'vs_flash':>8} {'vs_cudnn':>8}  winner")
    for p in tune["problems"]:
        m = re.match(r"attention_prefill/(\w+)/b(\d+)/sq(\d+)/sk(\d+)/h\d+/kv\d+/d\d+/(\w+)", p["problem"])
        dt, b, sq, sk, mode = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(5)
        causal = mode == "causal"
        ours = p.get("tflops")
        fl = idx.get((dt, b, sq, sk, causal, "flash"), {}).get("tflops")
        cu = idx.get((dt, b, sq, sk, causal, "cudnn"), {}).get("tflops")
        r = dict(problem=p["problem"], kerntune_tflops=ours, flash_tflops=fl, cudnn_tflops=cu, winner=p.get("winner"),
                 vs_flash=(ours / fl if ours and fl else None), vs_cudnn=(ours / cu if ours and cu else None))
        out.append(r)
        f = lambda x: f"{x:7.1f}" if x else "    n/a"
        g = lambda x: f"{x:7.2f}x" if x else "     n/a"
        print(f"{dt:5} {b:2} {sq:6} {str(causal):6} {f(ours):>9} {f(fl)} {f(cu)} {g(r['vs_flash'])} {g(r['vs_cudnn'])}  {(p.get('winner') or 'NONE').split('__')[2] if p.get('winner') else 'NONE'}")
    if a.out:
        json.dump({"device": tune["device"], "rows": out}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()

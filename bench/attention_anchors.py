#!/usr/bin/env python3
"""Anchor timings for attention prefill: torch SDPA with the FLASH_ATTENTION (FlashAttention-2) and
CUDNN_ATTENTION backends, on the prefill workloads of a kerntune shapes file. Timing: triton.testing.do_bench
median (it flushes L2 between runs).
FLOPs = 4*B*Hq*Sq*Sk*D, counting only visible pairs when causal (bottom-right aligned).
Writes JSON: {"device":..., "rows": [{"dtype","batch","seqlen_q","seqlen_k","causal","backend","ms","tflops"}]}."""
import argparse, json
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
import triton.testing


def visible_pairs(sq, sk, causal):
    if not causal:
        return sq * sk
    return sum(max(0, min(sk, i + 1 + sk - sq)) for i in range(sq))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    cfg = json.load(open(args.shapes))
    hq, hkv, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    work = [(w["batch"], w["seqlen"], w.get("seqlen_k", w["seqlen"]), w.get("causal", True))
            for w in cfg["workloads"]["attention_prefill"]]
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    rows = []
    print(f"{'dtype':5} {'B':>2} {'Sq':>6} {'Sk':>6} {'causal':6} {'backend':6} {'ms':>9} {'TFLOP/s':>8}")
    for dname in cfg.get("dtypes", ["bf16", "fp16"]):
        dt = dtypes[dname]
        for (b, sq, sk, causal) in work:
            q = torch.randn(b, hq, sq, d, device="cuda", dtype=dt)
            k = torch.randn(b, hkv, sk, d, device="cuda", dtype=dt)
            v = torch.randn(b, hkv, sk, d, device="cuda", dtype=dt)
            flops = 4.0 * b * hq * visible_pairs(sq, sk, causal) * d
            for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                try:
                    with sdpa_kernel(backend):
                        fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
                        fn()
                        ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
                except Exception as e:  # a backend that refuses the shape is reported, not fatal
                    print(f"{dname:5} {b:2} {sq:6} {sk:6} {str(causal):6} {name:6} unavailable: {str(e)[:80]}")
                    continue
                tf = flops / (ms * 1e-3) / 1e12
                rows.append(dict(dtype=dname, batch=b, seqlen_q=sq, seqlen_k=sk, causal=causal, backend=name, ms=ms, tflops=tf))
                print(f"{dname:5} {b:2} {sq:6} {sk:6} {str(causal):6} {name:6} {ms:9.4f} {tf:8.1f}")
            del q, k, v
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()

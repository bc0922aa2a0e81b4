#!/usr/bin/env python3
"""Anchor timings for the fused Q/K/V projection of a shapes file's model: three F.linear calls,
one fused F.linear on the concatenated weight (cuBLAS), and tinygemm int4 (torch.ops.aten._weight_int4pack_mm,
bf16, group 128), all with bias where the model has one (tinygemm: GEMM only). fp16 activations for cuBLAS.
Timing: triton.testing.do_bench median with its L2 flush.
Writes JSON {"device", "torch", "rows": [{"m", "backend", "us"}]}."""
import argparse, json
import torch
import torch.nn.functional as F
import triton.testing


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cfg = json.load(open(a.shapes))
    k, hq, hkv, d = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    bias = cfg.get("qkv_bias", False)
    n = (hq + 2 * hkv) * d
    nq, nkv = hq * d, hkv * d
    tokens = cfg["workloads"]["qkv_proj"]["tokens"]
    dev = "cuda"
    w = torch.randn(n, k, device=dev, dtype=torch.float16) * 0.02
    b = torch.randn(n, device=dev, dtype=torch.float16) * 0.1 if bias else None
    wq, wk, wv = w[:nq].contiguous(), w[nq:nq + nkv].contiguous(), w[nq + nkv:].contiguous()
    bq, bk, bv = (b[:nq], b[nq:nq + nkv], b[nq + nkv:]) if bias else (None, None, None)
    # tinygemm int4: uint8 [n, k/2] -> packed; scales_and_zeros [k/128, n, 2] bf16
    tiny = None
    try:
        w_u8 = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device=dev)
        w_packed = torch.ops.aten._convert_weight_to_int4pack(w_u8, 8)
        sz = torch.randn(k // 128, n, 2, device=dev, dtype=torch.bfloat16) * 0.01
        tiny = (w_packed, sz)
    except Exception as e:  # reported, not fatal
        print("tinygemm int4 unavailable:", str(e)[:120])
    rows = []
    print(f"{'M':>6} {'3 linears':>10} {'fused':>10} {'tinygemm':>10}  (us)")
    for m in tokens:
        x = torch.randn(m, k, device=dev, dtype=torch.float16)
        res = {}
        res["3_linears"] = triton.testing.do_bench(lambda: (F.linear(x, wq, bq), F.linear(x, wk, bk), F.linear(x, wv, bv)),
                                                   warmup=25, rep=100, return_mode="median") * 1e3
        res["fused_cublas"] = triton.testing.do_bench(lambda: F.linear(x, w, b), warmup=25, rep=100, return_mode="median") * 1e3
        if tiny is not None:
            xb = x.to(torch.bfloat16)
            try:
                res["tinygemm_int4"] = triton.testing.do_bench(
                    lambda: torch.ops.aten._weight_int4pack_mm(xb, tiny[0], 128, tiny[1]), warmup=25, rep=100,
                    return_mode="median") * 1e3
            except Exception as e:
                print("tinygemm failed at m =", m, str(e)[:100])
        for kname, us in res.items():
            rows.append(dict(m=m, backend=kname, us=us))
        f = lambda key: f"{res[key]:10.1f}" if key in res else "       n/a"
        print(f"{m:6d} {f('3_linears')} {f('fused_cublas')} {f('tinygemm_int4')}")
        del x
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()

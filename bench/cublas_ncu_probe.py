"""cuBLAS's fused fp16 linear (torch F.linear, bias) for the Qwen2.5-7B Q/K/V shape, a few launches per M, for
profiling with Nsight Compute: which kernel (tile, cluster, grid) cuBLAS picks and its L2 / DRAM traffic.

  ncu --clock-control none -k regex:'gemm|xmma|cutlass' --launch-skip 3 --launch-count 1 \
      --metrics ... python3 bench/cublas_ncu_probe.py --m 256
"""
import argparse

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, nargs="+", default=[256], help="token counts (default 256)")
    ap.add_argument("--k", type=int, default=3584, help="hidden size (default 3584)")
    ap.add_argument("--n", type=int, default=4608, help="output features (default 4608 = (28 + 2 x 4) x 128)")
    ap.add_argument("--launches", type=int, default=6)
    a = ap.parse_args()
    torch.manual_seed(0)
    w = torch.randn(a.n, a.k, dtype=torch.float16, device="cuda") * 0.02
    b = torch.randn(a.n, dtype=torch.float16, device="cuda")
    for m in a.m:
        x = torch.randn(m, a.k, dtype=torch.float16, device="cuda")
        for _ in range(a.launches):
            F.linear(x, w, b)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""cuBLAS fp16 F.linear (with bias) on the Qwen2.5-7B Q/K/V shape (N = 4608) at M = 64 / 256 for K = 1792 / 3584 / 7168,
timed as the benchmark's graph method: 40 launches captured in a CUDA graph over 20 weight copies (cold L2), 5 replays,
microseconds per launch. The slope over K separates cuBLAS's per-K-step time from its fixed cost, to compare with
the trace driver's (bench/ws_trace/trace_pairs.cu) at the same K (NOTES.md qkv_proj 25). Prints one line per case."""
import torch
import torch.nn.functional as F


def main():
    dev = "cuda"
    for m in (64, 256):
        for k in (1792, 3584, 7168):
            n = 4608
            ws = [torch.randn(n, k, device=dev, dtype=torch.float16) * 0.02 for _ in range(20)]
            b = torch.randn(n, device=dev, dtype=torch.float16)
            x = torch.randn(m, k, device=dev, dtype=torch.float16)
            for w in ws:
                F.linear(x, w, b)
            torch.cuda.synchronize()
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    for i in range(40):
                        F.linear(x, ws[i % 20], b)
            g.replay()
            torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(5):
                g.replay()
            e1.record()
            torch.cuda.synchronize()
            print(f"cublas fp16 M={m} K={k}: graph {e0.elapsed_time(e1) * 1000 / 200:.2f} us per launch")


if __name__ == "__main__":
    main()

"""H200 probe: where a generated reduction beats cuBLAS for `gelu(linear(x, w, b))` with few rows (the
`FUSE_ALL_SMALL_MATMUL_ROWS` threshold of the Triton target, fuse_all_ir/lowerings_matmul.py).

    source bench/gpu_env.sh && python bench/gpu_small_matmul_probe.py

For each rows x (K, N): eager, fuse_all with every product in cuBLAS (threshold 0) and fuse_all with the
product as a reduction (threshold 64), each timed by CUDA-graph replay (`triton.testing.do_bench_cudagraph`:
device time plus the graph's launch gaps, what reduce-overhead sees), and the error against float64
relative to eager's.
"""
from __future__ import annotations

import os

import torch
import torch.nn.functional as F
import triton

import fuse_all


def timed(fn, x):
    fn(x)
    torch.cuda.synchronize()
    return triton.testing.do_bench_cudagraph(lambda: fn(x), rep=100) * 1e3


def main():
    torch.manual_seed(0)
    print("rows  K     N     eager_us  cublas_us  reduction_us  reduction/cublas  err/eager_err")
    for k, n in ((768, 768), (768, 3072), (3072, 768), (2048, 1000)):
        w = torch.randn(n, k, device="cuda") / k ** 0.5
        b = torch.randn(n, device="cuda")

        def f(x):
            return F.gelu(F.linear(x, w, b))
        for rows in (1, 12, 16, 32, 64):
            x = torch.randn(rows, k, device="cuda")
            ref = F.gelu(F.linear(x.double(), w.double(), b.double()))
            eager_err = (f(x).double() - ref).square().mean().sqrt().item()
            times = {"eager": timed(f, x)}
            for label, limit in (("cublas", "0"), ("reduction", "64")):
                os.environ["FUSE_ALL_SMALL_MATMUL_ROWS"] = limit
                torch._dynamo.reset()
                fuse_all.reset()
                compiled = torch.compile(f, backend="fuse_all")
                out = compiled(x)
                times[label] = timed(compiled, x)
                if label == "reduction":
                    err = (out.double() - ref).square().mean().sqrt().item()
                    kernels = len(fuse_all.compiled_graphs()[0].kernels)
                    externs = [e.target for e in fuse_all.compiled_graphs()[0].externs]
            print(f"{rows:4d} {k:5d} {n:5d} {times['eager']:9.2f} {times['cublas']:10.2f} {times['reduction']:13.2f} "
                  f"{times['reduction'] / times['cublas']:17.2f} {err / max(eager_err, 1e-30):14.2f}"
                  f"   ({kernels} kernels, ATen {externs})")


if __name__ == "__main__":
    main()

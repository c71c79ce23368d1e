"""H200 probe: the loop order and blocks of a skinny product's reduction kernel (fuse_all_ir/lowerings_matmul.py).

    source bench/gpu_env.sh && python bench/gpu_product_order_probe.py

The generated kernel for out[m, n] = sum_k x[m, k] * w[n, k] walks the outputs with one flat index. Row order
(m outer, n inner: what the IR gives a reduction over an (M, N) result) reads every weight row once per
activation row, from L2. Column order (n outer, m inner) puts the M rows that share a weight row side by side
in one block, so the repeats come from L1. Both kernels below are written the way render.py writes reductions
(flat xindex, div/mod, masked loads); µs per call by CUDA-graph replay.

Caveat (measured after, RESULTS.md session 12): each shape is replayed alone, so its weight stays in L2 between
calls. In a model the weights come from DRAM, and column order with its short K chunks (few bytes in flight per
program) lost there: bert_1x12's reduce-overhead went 0.856 -> 0.909 ms. fuse-all kept row order.
"""
from __future__ import annotations

import itertools

import torch
import triton
import triton.language as tl


@triton.jit
def row_order(x_ptr, w_ptr, out_ptr, M, N, K, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < M * N
    m = xindex // N
    n = xindex % N
    acc = tl.zeros([XBLOCK, RBLOCK], tl.float32)
    for r0 in range(0, K, RBLOCK):
        r = r0 + tl.arange(0, RBLOCK)[None, :]
        rmask = r < K
        a = tl.load(x_ptr + (r + K * m), xmask & rmask, other=0.0)
        b = tl.load(w_ptr + (r + K * n), xmask & rmask, other=0.0)
        acc += a * b
    tl.store(out_ptr + (N * m + n), tl.sum(acc, 1)[:, None], xmask)


@triton.jit
def column_order(x_ptr, w_ptr, out_ptr, M, N, K, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < M * N
    n = xindex // M
    m = xindex % M
    acc = tl.zeros([XBLOCK, RBLOCK], tl.float32)
    for r0 in range(0, K, RBLOCK):
        r = r0 + tl.arange(0, RBLOCK)[None, :]
        rmask = r < K
        a = tl.load(x_ptr + (r + K * m), xmask & rmask, other=0.0)
        b = tl.load(w_ptr + (r + K * n), xmask & rmask, other=0.0)
        acc += a * b
    tl.store(out_ptr + (N * m + n), tl.sum(acc, 1)[:, None], xmask)


def main():
    torch.manual_seed(0)
    for m, k, n in ((12, 3072, 768), (12, 768, 768), (12, 768, 3072), (16, 768, 768), (1, 2048, 1000), (4, 4096, 4096)):
        x = torch.randn(m, k, device="cuda")
        w = torch.randn(n, k, device="cuda") / k ** 0.5
        ref = x.double() @ w.double().t()
        cublas = triton.testing.do_bench_cudagraph(lambda: x @ w.t(), rep=100) * 1e3
        results = []
        for kernel, name, xbs, rbs in ((row_order, "row", (1, 4), (256, 1024, 4096)),
                                       (column_order, "column", (16, 32, 64), (64, 128, 256))):
            for xb, rb, warps in itertools.product(xbs, rbs, (4, 8)):
                if xb * rb > 16384:
                    continue
                out = torch.empty(m, n, device="cuda")
                grid = (triton.cdiv(m * n, xb),)

                def call():
                    kernel[grid](x, w, out, m, n, k, XBLOCK=xb, RBLOCK=rb, num_warps=warps)
                try:
                    call()
                    err = (out.double() - ref).abs().max().item()
                    t = triton.testing.do_bench_cudagraph(call, rep=50) * 1e3
                except Exception as e:  # noqa: BLE001 - a config that does not compile
                    print(f"  {name} {xb} {rb} {warps}: {type(e).__name__}")
                    continue
                results.append((t, name, xb, rb, warps, err))
        best = {}
        for t, name, *cfg in sorted(results):
            best.setdefault(name, []).append((t, cfg))
        print(f"\n== {m} x {k} -> {n}: cuBLAS {cublas:.2f} us")
        for name, rows in best.items():
            for t, (xb, rb, warps, err) in rows[:3]:
                print(f"   {name:6s} XBLOCK={xb:3d} RBLOCK={rb:5d} warps={warps}: {t:7.2f} us  x{t / cublas:.2f} cuBLAS  err {err:.1e}")


if __name__ == "__main__":
    main()

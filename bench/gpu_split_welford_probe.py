"""H200 probe: the partial kernel of a split BatchNorm-statistics reduction over an NCHW tensor.

    source bench/gpu_env.sh && python bench/gpu_split_welford_probe.py

fuse_all's partial kernel (column_split.py, rendered by render.py) for batchnorm_nchw_32x64x112x112 took
37.7 us where Inductor's took 29.8 us (bench/RESULTS.md, session 13), with the same config (1 row, RBLOCK
2048, 8 warps). Each variant below changes one thing of ours: chunk length (16 vs 8 chunks per channel),
program order (chunk-major as ours, channel-major as Inductor's), the row-shift pivot, an evict-first
hint, warps and RBLOCK; "plain sum" is the same walk without Welford (the access pattern's ceiling).
µs per call (triton.testing.do_bench median; the input, 102.8 MB, does not fit in L2).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def split_welford(x_ptr, out_ptr, C: tl.constexpr, HW: tl.constexpr, CHUNK: tl.constexpr, S: tl.constexpr,
                  CHANNEL_MAJOR: tl.constexpr, PIVOT: tl.constexpr, EVICT: tl.constexpr, WELFORD: tl.constexpr,
                  RBLOCK: tl.constexpr):
    pid = tl.program_id(0)
    if CHANNEL_MAJOR:
        c = pid // S
        s = pid % S
    else:
        s = pid // C
        c = pid % C
    base = s * (CHUNK // HW) * (C * HW) + c * HW
    rbase = tl.arange(0, RBLOCK)
    mean = tl.zeros([RBLOCK], tl.float32)
    m2 = tl.zeros([RBLOCK], tl.float32)
    if PIVOT:
        pivot = tl.load(x_ptr + c * HW)
    else:
        pivot = 0.0
    for r0 in range(0, CHUNK, RBLOCK):
        r = r0 + rbase
        rmask = r < CHUNK
        offset = base + (r // HW) * (C * HW) + r % HW
        if EVICT:
            v = tl.load(x_ptr + offset, rmask, eviction_policy="evict_first")
        else:
            v = tl.load(x_ptr + offset, rmask)
        v = v - pivot
        if WELFORD:
            d = v - mean
            new_mean = mean + d * (1.0 / (r0 // RBLOCK + 1))
            m2 = tl.where(rmask, m2 + d * (v - new_mean), m2)
            mean = tl.where(rmask, new_mean, mean)
        else:
            mean += tl.where(rmask, v, 0.0)
    tl.store(out_ptr + pid, tl.sum(mean, 0) + tl.sum(m2, 0))


def main() -> None:
    n, c, h, w = 32, 64, 112, 112
    hw = h * w
    x = torch.randn(n, c, h, w, device="cuda")
    variants = {
        "ours: 16 chunks, chunk-major, pivot, 2048/8": dict(),
        "channel-major": dict(CHANNEL_MAJOR=1),
        "8 chunks (Inductor's)": dict(S=8),
        "8 chunks, channel-major": dict(S=8, CHANNEL_MAJOR=1),
        "evict_first": dict(EVICT=1),
        "no pivot": dict(PIVOT=0),
        "16 warps": dict(num_warps=16),
        "1024/4": dict(RBLOCK=1024, num_warps=4),
        "1024/8": dict(RBLOCK=1024, num_warps=8),
        "4096/16": dict(RBLOCK=4096, num_warps=16),
        "32 chunks": dict(S=32),
        "plain sum (no Welford)": dict(WELFORD=0),
    }
    print(f"batchnorm statistics partial kernel over {n}x{c}x{h}x{w} NCHW float32 ({x.numel() * 4 / 1e6:.1f} MB)")
    for name, change in variants.items():
        opts = dict(S=16, CHANNEL_MAJOR=0, PIVOT=1, EVICT=0, WELFORD=1, RBLOCK=2048, num_warps=8) | change
        s = opts.pop("S")
        out = torch.empty(c * s, device="cuda")
        chunk = n * hw // s

        def call():
            split_welford[(c * s,)](x, out, c, hw, chunk, s, **opts)
        call()
        us = triton.testing.do_bench(call, warmup=50, rep=300) * 1000
        print(f"  {name:<45} {us:7.1f} us  {x.numel() * 4 / us / 1e3:7.0f} GB/s")


if __name__ == "__main__":
    main()

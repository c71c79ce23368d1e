"""H200 probe: can a Triton float32 matrix product on tensor cores with three TF32 products per multiply
(`tl.dot(..., input_precision="tf32x3")`: a = hi + lo, a*b ~ hi*hi + hi*lo + lo*hi) beat cuBLAS's float32
SGEMM (the FMA path eager and Inductor take with `allow_tf32=False`) at float32's accuracy?

    source bench/gpu_env.sh && python bench/gpu_tf32x3_gemm_probe.py

For BERT's products (32x128 inference, 8x128 training incl. the backward's transposed operands, attention's
batched products): µs per call (do_bench median) for cuBLAS float32, the Triton kernel with tf32x3 (best of
the configs below; fuse_all_codegen_triton/matmul.py's kernel), Triton with plain FMA ("ieee"), cuBLAS TF32
(for scale only), and each one's RMS error
against float64 divided by cuBLAS float32's.
"""
from __future__ import annotations

import torch
import triton

from fuse_all_codegen_triton.matmul import run_kernel   # the kernel fuse-all uses (without its bias)


CONFIGS = [  # BLOCK_M, BLOCK_N, BLOCK_K, warps, stages
    (128, 128, 32, 8, 3), (128, 128, 32, 4, 4), (128, 256, 32, 8, 3), (256, 128, 32, 8, 3),
    (128, 64, 32, 4, 4), (64, 128, 32, 4, 4), (128, 128, 16, 8, 4), (64, 64, 32, 4, 4),
    (64, 64, 32, 4, 3), (64, 64, 64, 4, 3), (128, 64, 64, 4, 3), (64, 128, 64, 4, 3), (128, 64, 32, 8, 4),
    (64, 64, 16, 4, 5), (128, 128, 32, 8, 4), (64, 256, 32, 8, 3),
]


def triton_mm(a, b, precision, config):
    return run_kernel(a, b, None, config, precision)


def rmse(x, ref):
    return (x.double() - ref).square().mean().sqrt().item()


def best(fn_of_config):
    timings = []
    for config in CONFIGS:
        try:
            timings.append((triton.testing.do_bench(lambda: fn_of_config(config), rep=50) * 1e3, config))
        except Exception as e:   # out of shared memory and the like
            timings.append((float("inf"), (config, type(e).__name__)))
    return min(timings, key=lambda t: t[0])


def shapes():
    """(label, a, b) with the layouts the compiled graphs pass: weights transposed (x @ w.t())."""
    out = []
    for tokens in (4096, 1024):
        for k, n in ((768, 768), (768, 3072), (3072, 768), (768, 2304)):
            out.append((f"{tokens}x{k} @ ({n}x{k}).t()", torch.randn(tokens, k), torch.randn(n, k).t()))
    for k, n in ((768, 768), (3072, 768), (768, 3072)):   # backward: dX = dY @ W, dW = dY.t() @ X
        out.append((f"1024x{n} @ {n}x{k} (dX)", torch.randn(1024, n), torch.randn(n, k)))
        out.append((f"({1024}x{n}).t() @ 1024x{k} (dW)", torch.randn(1024, n).t(), torch.randn(1024, k)))
    out.append(("bmm 384: 128x64 @ 64x128", torch.randn(384, 128, 64), torch.randn(384, 128, 64).transpose(1, 2)))
    out.append(("bmm 384: 128x128 @ 128x64", torch.randn(384, 128, 128), torch.randn(384, 128, 64)))
    return out


def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"{'product':34s} {'cuBLAS':>8s} {'tf32x3':>8s} {'ratio':>6s} {'ieee':>8s} {'tf32':>8s}  "
          f"err/cuBLAS: {'tf32x3':>6s} {'ieee':>6s} {'tf32':>6s}  best tf32x3 config")
    for label, a, b in shapes():
        a, b = a.cuda(), b.cuda()
        ref = torch.matmul(a.double(), b.double())
        cublas = torch.matmul(a, b)
        t_cublas = triton.testing.do_bench(lambda: torch.matmul(a, b), rep=50) * 1e3
        torch.backends.cuda.matmul.allow_tf32 = True
        tf32 = torch.matmul(a, b)
        t_tf32 = triton.testing.do_bench(lambda: torch.matmul(a, b), rep=50) * 1e3
        torch.backends.cuda.matmul.allow_tf32 = False
        t_x3, config = best(lambda c: triton_mm(a, b, "tf32x3", c))
        t_ieee = triton.testing.do_bench(lambda: triton_mm(a, b, "ieee", CONFIGS[4]), rep=50) * 1e3
        x3 = triton_mm(a, b, "tf32x3", config)
        ieee = triton_mm(a, b, "ieee", CONFIGS[4])
        if a.stride(-1) != 1 or b.stride(-2) != 1:   # an operand whose contraction dim is not contiguous
            t_copy, copy_config = best(lambda c: triton_mm(a.contiguous(), b.mT.contiguous().mT, "tf32x3", c))
            label += f" [K-major copies: {t_copy:.1f} us {copy_config}]"
        base = rmse(cublas, ref)
        print(f"{label:34s} {t_cublas:8.1f} {t_x3:8.1f} {t_x3 / t_cublas:6.2f} {t_ieee:8.1f} {t_tf32:8.1f}  "
              f"{'':11s} {rmse(x3, ref) / base:6.2f} {rmse(ieee, ref) / base:6.2f} {rmse(tf32, ref) / base:6.2f}  {config}")


if __name__ == "__main__":
    main()

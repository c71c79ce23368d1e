"""H200 probe: cuBLAS against Triton kernels for the skinny GEMMs of small-batch inference (bert_1x12: 12 rows).

    source bench/gpu_env.sh && python bench/gpu_skinny_gemm_probe.py

Times each shape with CUDA-graph replay (`triton.testing.do_bench_cudagraph`, what reduce-overhead sees) and
prints the cuBLAS kernel names, the best Triton config per shape, and the achieved weight bandwidth.
"""
from __future__ import annotations

import itertools

import torch
import triton
import triton.language as tl


@triton.jit
def skinny_dot(a_ptr, w_ptr, c_ptr, M, N, K, sam, sak, swn, swk, scm, scn,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rm = tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    k_per = tl.cdiv(K, SPLIT * BK) * BK
    k_lo = pid_k * k_per
    for k0 in range(k_lo, k_lo + k_per, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * sam + rk[None, :] * sak, mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * swn + rk[:, None] * swk, mask=(rn[None, :] < N) & (rk[:, None] < K), other=0.0)
        acc += tl.dot(a, w, input_precision="ieee")
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if SPLIT == 1:
        tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc, mask=mask)
    else:
        tl.store(c_ptr + pid_k * M * N + rm[:, None] * scm + rn[None, :] * scn, acc, mask=mask)


@triton.jit
def skinny_fma(a_ptr, w_ptr, c_ptr, M, N, K, sam, sak, swn, swk, scm, scn,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rm = tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN, BK), dtype=tl.float32)
    k_per = tl.cdiv(K, SPLIT * BK) * BK
    k_lo = pid_k * k_per
    for k0 in range(k_lo, k_lo + k_per, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * sam + rk[None, :] * sak, mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[:, None] * swn + rk[None, :] * swk, mask=(rn[:, None] < N) & (rk[None, :] < K), other=0.0)
        acc += a[:, None, :] * w[None, :, :]
    out = tl.sum(acc, axis=2)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if SPLIT == 1:
        tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, out, mask=mask)
    else:
        tl.store(c_ptr + pid_k * M * N + rm[:, None] * scm + rn[None, :] * scn, out, mask=mask)


def run(kernel, a, w, cfg):
    bn, bk, split, warps, stages = cfg
    m, k = a.shape
    n = w.shape[0]
    bm = max(16, triton.next_power_of_2(m))
    out = torch.empty((split, m, n) if split > 1 else (m, n), device=a.device, dtype=torch.float32)
    kernel[(triton.cdiv(n, bn), split)](a, w, out, m, n, k, a.stride(0), a.stride(1), w.stride(0), w.stride(1),
                                        n, 1, BM=bm, BN=bn, BK=bk, SPLIT=split, num_warps=warps, num_stages=stages)
    return out.sum(0) if split > 1 else out


def cublas_kernels(fn):
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name[:70] for e in prof.events() if e.device_type.name == "CUDA"})


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    shapes = [(12, 768, 768), (12, 768, 3072), (12, 3072, 768), (32, 768, 768)]
    for m, k, n in shapes:
        a = torch.randn(m, k, device="cuda")
        w = torch.randn(n, k, device="cuda") / k ** 0.5
        ref = (a.double() @ w.double().t())
        eager = a @ w.t()
        err_eager = (eager.double() - ref).abs().max().item()
        t_cublas = triton.testing.do_bench_cudagraph(lambda: torch.mm(a, w.t()), rep=200)
        names = cublas_kernels(lambda: torch.mm(a, w.t()))
        print(f"\n== M={m} K={k} N={n}: cuBLAS {t_cublas * 1e3:.2f} us  ({w.numel() * 4 / t_cublas / 1e9:.2f} TB/s)  err {err_eager:.2e}  {names}")
        results = []
        for kernel, name in ((skinny_dot, "dot"), (skinny_fma, "fma")):
            for bn, bk, split, warps, stages in itertools.product((16, 32, 64), (64, 128), (1, 2, 4), (2, 4), (2, 3)):
                bm = max(16, triton.next_power_of_2(m))
                if name == "fma" and bm * bn * bk > 16384:
                    continue
                if name == "fma" and m > 16:
                    continue
                if k % (bk * split):
                    continue
                cfg = (bn, bk, split, warps, stages)
                try:
                    out = run(kernel, a, w, cfg)
                    err = (out.double() - ref).abs().max().item()
                    t = triton.testing.do_bench_cudagraph(lambda: run(kernel, a, w, cfg), rep=60)
                except Exception as e:   # a config that does not compile (registers, shared memory)
                    print(f"   {name} {cfg}: {type(e).__name__}")
                    continue
                results.append((t, name, cfg, err))
        results.sort()
        for t, name, cfg, err in results[:6]:
            print(f"   {name} bn,bk,split,warps,stages={cfg}: {t * 1e3:.2f} us  ({w.numel() * 4 / t / 1e9:.2f} TB/s) "
                  f"err {err:.2e}  x{t / t_cublas:.2f} of cuBLAS")


if __name__ == "__main__":
    main()

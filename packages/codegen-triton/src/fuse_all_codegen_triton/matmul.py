"""float32 matrix products on tensor cores at float32's accuracy: `torch.ops.fuse_all_triton.matmul`.

With `torch.backends.cuda.matmul.allow_tf32` off (torch's default), eager and Inductor run float32 products
in cuBLAS's SGEMM, on the FMA units. A TF32 tensor-core product keeps 10 mantissa bits per operand; three of
them per multiply (``input_precision="tf32x3"``: a = hi + lo, a*b ~ hi*hi + hi*lo + lo*hi) recover float32's
precision at several times the FMA units' rate. On the H200 (bench/gpu_tf32x3_gemm_probe.py) BERT's 4096-row
products take 0.55-0.72x cuBLAS's time, with an RMS error against float64 0.3-0.9x cuBLAS's own; the
backward's products (an operand whose contraction dim is strided: the kernel reads a K-major copy of it) and
small products are often slower.

So the op chooses per call signature (shapes, strides, device) by benchmarking its candidates, cuBLAS
among them, on the first call, and remembers the winner in memory and in the autotune cache on disk
(`autotune.py`: private folders, damaged entries ignored). It never runs slower than the cuBLAS call it
replaces by more than the benchmark's noise. During CUDA-graph capture an unseen signature takes cuBLAS
(nothing may synchronise there).

    fuse_all_triton::matmul(Tensor a, Tensor b, Tensor? bias=None) -> Tensor
        a @ b (+ bias): a (M, K) or (Z, M, K), b (K, N) or (Z, K, N), bias broadcasting to (M, N)

On CPU tensors the op runs the same kernel in Triton's interpreter (under TRITON_INTERPRET=1: how CI tests
it) and otherwise ATen. `fuse_all_ir.route_matmuls` puts it into graphs (`TritonChoices.fp32_matmul`).
"""
from __future__ import annotations

import hashlib
import importlib
import json
import logging
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

from . import _triton_compat as compat
from . import autotune

log = logging.getLogger(__name__)


@triton.jit
def tf32x3_matmul(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                  stride_az, stride_am, stride_ak, stride_bz, stride_bk, stride_bn,
                  stride_bias_m, stride_bias_n, stride_cz, stride_cm,
                  HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # programs walk GROUP_M row blocks per column block, so the B columns they share stay in L2
    pid = tl.program_id(0)
    z = tl.program_id(1)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    group_width = GROUP_M * grid_n
    first_m = (pid // group_width) * GROUP_M
    group_m = min(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_width) % group_m
    pid_n = (pid % group_width) // group_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a = a_ptr + z * stride_az + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b = b_ptr + z * stride_bz + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        x = tl.load(a, mask=(rm[:, None] < M) & (rk[None, :] < k_left), other=0.0)
        y = tl.load(b, mask=(rk[:, None] < k_left) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(x, y, acc, input_precision=PRECISION)
        a += BLOCK_K * stride_ak
        b += BLOCK_K * stride_bk
    inside = (rm[:, None] < M) & (rn[None, :] < N)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rm[:, None] * stride_bias_m + rn[None, :] * stride_bias_n, mask=inside, other=0.0)
    tl.store(c_ptr + z * stride_cz + rm[:, None] * stride_cm + rn[None, :], acc, mask=inside)


# (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages): the probe's winners: 128x64 for BERT's 4096-row products,
# 64x64 for its 1024-row ones
CONFIGS = ((128, 64, 32, 8, 4), (64, 64, 32, 4, 4), (64, 64, 64, 4, 3))
CUBLAS = -1
MAX_SIGNATURES = 4096     # plans kept in memory (dynamic shapes could bring new ones without end)
_SOURCE_HASH = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
_plans: dict[tuple, int] = {}
_fast: dict[tuple, "_FastLaunch"] = {}   # (signature, kernel config) of plans launched directly


def _aten(a, b, bias):
    if bias is None:
        return torch.mm(a, b) if a.dim() == 2 else torch.bmm(a, b)
    return torch.addmm(bias, a, b)


def _launch(a, b, bias, config: int):
    return run_kernel(a, b, bias, CONFIGS[config])


def run_kernel(a, b, bias, config: tuple, precision: str = "tf32x3", launched: list | None = None):
    """The kernel with one (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages) config; `precision` is tl.dot's
    (bench/gpu_tf32x3_gemm_probe.py compares "ieee" and "tf32" too). `launched`, if given, receives what
    a `_FastLaunch` needs to repeat this launch: Triton's compiled kernel, the grid, the arguments."""
    block_m, block_n, block_k, warps, stages = config
    a3, b3 = (a, b) if a.dim() == 3 else (a[None], b[None])
    z, m, k = a3.shape
    n = b3.shape[2]
    out = torch.empty((z, m, n) if a.dim() == 3 else (m, n), device=a.device, dtype=a.dtype)
    out3 = out if a.dim() == 3 else out[None]
    if bias is not None:
        bias2 = bias.expand(m, n)
        bias_strides = bias2.stride()
    else:
        bias2, bias_strides = out, (0, 0)
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n), z)
    sizes = (m, n, k, *a3.stride(), *b3.stride(), *bias_strides, out3.stride(0), out3.stride(1))
    constants = dict(HAS_BIAS=bias is not None, PRECISION=precision, BLOCK_M=block_m, BLOCK_N=block_n,
                     BLOCK_K=block_k, GROUP_M=8)
    kernel = tf32x3_matmul[grid](a3, b3, bias2, out3, *sizes, **constants, num_warps=warps, num_stages=stages)
    if launched is not None:
        launched[:] = [kernel, grid, tuple(out.shape), sizes, tuple(constants.values())]
    return out


class _FastLaunch:
    """One signature's kernel launch without Triton's per-call argument binding and specialisation (~50 us
    of host time per call on the H200's host, most of the op's cost; train_bert calls the op 72 times per
    step): Triton's compiled kernel, launched directly as `JITFunction.run` launches it
    (`_triton_compat`'s contract), with the grid and the integer arguments fixed by the signature (shapes
    and strides). Pointers must be 16-byte aligned, as they were when the kernel was specialised; a call
    with an unaligned operand returns None and takes the general launch."""
    __slots__ = ("runner", "function", "metadata", "grid", "out_shape", "device", "args", "get_stream")

    @classmethod
    def of(cls, launched: list, a, b, bias):
        kernel, grid, out_shape, sizes, constants = launched
        if compat.interpret_mode() or not all(hasattr(kernel, n) for n in ("run", "function", "packed_metadata")):
            return None
        if compat.launch_hooks() != (None, None):   # a profiler's hooks: keep Triton's launch, which calls them
            return None
        pointers = [a.data_ptr(), b.data_ptr()] + ([bias.data_ptr()] if bias is not None else [])
        if any(p & 15 for p in pointers):
            return None
        fast = cls()
        fast.runner, fast.function, fast.metadata = kernel.run, kernel.function, kernel.packed_metadata
        fast.grid, fast.out_shape, fast.device = grid, out_shape, a.device
        fast.args = (*sizes, *constants)
        fast.get_stream = compat.stream_getter()
        return fast

    def __call__(self, a, b, bias):
        pa, pb = a.data_ptr(), b.data_ptr()
        pbias = bias.data_ptr() if bias is not None else 0
        if (pa | pb | pbias) & 15:
            return None
        out = torch.empty(self.out_shape, device=self.device, dtype=torch.float32)
        pc = out.data_ptr()
        self.runner(self.grid[0], self.grid[1], 1, self.get_stream(self.device.index), self.function, self.metadata,
                    None, None, None, pa, pb, pbias if bias is not None else pc, pc, *self.args)
        return out


def _kernel_takes(a, b, bias) -> bool:
    """Shapes the kernel computes: non-empty, float32, int32 offsets, a grid of at most 65535 batches."""
    if a.dtype != torch.float32 or b.dtype != torch.float32 or (bias is not None and bias.dtype != torch.float32):
        return False
    if 0 in a.shape or 0 in b.shape or (a.dim() == 3 and a.shape[0] > 65535):
        return False
    extent = max(sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride())) + 1 for t in (a, b))
    return extent < 2 ** 31 and a.numel() // a.shape[-1] * b.shape[-1] < 2 ** 31


def _k_major(a, b):
    """The operands contiguous along K, copied where they are not: Hopper's TF32 tensor cores read K-major
    operands only, and the kernel transposing a strided one on the way lost to cuBLAS in all probe rows but
    one; with the copy first (included in the op's benchmark) BERT's backward 768 x 3072 products ran in
    0.79-0.98x cuBLAS's time (bench/RESULTS.md, session 14's probe; its 768 x 768 ones lost: cuBLAS stays)."""
    if a.stride(-1) != 1:
        a = a.contiguous()
    if b.stride(-2) != 1:
        b = b.transpose(-1, -2).contiguous().transpose(-1, -2)
    return a, b


def _signature(a, b, bias) -> tuple:
    bias_layout = None if bias is None else (tuple(bias.shape), tuple(bias.stride()), bias.dtype)
    return (tuple(a.shape), tuple(a.stride()), a.dtype, tuple(b.shape), tuple(b.stride()), b.dtype, bias_layout,
            a.device.index)


def _tuning_key(signature: tuple) -> str:
    device = autotune.device_identity(torch.cuda.get_device_properties(signature[-1]))
    text = json.dumps(["tf32x3-matmul", _SOURCE_HASH, CONFIGS, signature[:-1], device, compat.TRITON_VERSION,
                       torch.__version__], default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _choose(a, b, bias, signature) -> int:
    if not _kernel_takes(a, b, bias):
        return CUBLAS
    if torch.cuda.is_current_stream_capturing():
        return CUBLAS     # benchmarking synchronises; a capture must not (and this choice is not stored)
    key = _tuning_key(signature)
    cached = autotune.load_choice(key)
    if cached is not None and cached.get("choice") in (CUBLAS, *range(len(CONFIGS))):
        return cached["choice"]
    compat.secure_cache_dir()     # Triton's own launcher compiles into (and loads from) its cache
    launchers = [lambda: _aten(a, b, bias)]
    for config in range(len(CONFIGS)):
        launchers.append(lambda config=config: _launch(*_k_major(a, b), bias, config))
    times = []
    with torch.cuda.device(a.device):
        for launch in launchers:
            try:
                times.append(autotune.benchmark([launch], torch.cuda.synchronize,
                                                lambda: torch.cuda.Event(enable_timing=True))[0])
            except Exception as error:  # noqa: BLE001 - a config that does not compile here loses, logged
                log.warning("fuse-all: tf32x3 matmul config %s failed: %s: %s", CONFIGS[len(times) - 1],
                            type(error).__name__, error)
                times.append(float("inf"))
    choice = min(range(len(times)), key=times.__getitem__) - 1
    autotune.store_choice(key, {"choice": choice}, times)
    log.debug("fuse-all: matmul %s: %s (ms: %s)", signature, "cuBLAS" if choice == CUBLAS else CONFIGS[choice],
              ", ".join(f"{t:.4f}" for t in times))
    return choice


def matmul_cuda(a, b, bias=None):
    """Triton launches on the current device: host programs run with their device current (fuse_all_ir.host).
    A signature seen before was checked then (`_check`): its plan, or its `_FastLaunch`, is all a call does."""
    signature = _signature(a, b, bias)
    choice = _plans.get(signature)
    fast = _fast.get((signature, choice)) if choice is not None and choice != CUBLAS else None
    if fast is not None:
        out = fast(*_k_major(a, b), bias)
        if out is not None:
            return out
    if choice is None:
        _check(a, b, bias)
        choice = _choose(a, b, bias, signature)
        if not torch.cuda.is_current_stream_capturing():
            if len(_plans) >= MAX_SIGNATURES:
                _plans.clear()
                _fast.clear()
            _plans[signature] = choice
    if choice == CUBLAS:
        return _aten(a, b, bias)
    a, b = _k_major(a, b)      # what the kernel was benchmarked on (no copy for a forward product)
    launched: list = []
    out = run_kernel(a, b, bias, CONFIGS[choice], launched=launched)
    if fast is None and _plans.get(signature) == choice:
        made = _FastLaunch.of(launched, a, b, bias)
        if made is not None:
            _fast[signature, choice] = made
    return out


def matmul_cpu(a, b, bias=None):
    """Triton's interpreter (which multiplies in float32: it has no TF32) where it is on, else ATen."""
    if compat.interpret_mode() and _kernel_takes(a, b, bias):
        return _launch(a, b, bias, 1)
    return _aten(a, b, bias)


def matmul_fake(a, b, bias=None):
    _check(a, b, bias)
    return a.new_empty((*a.shape[:-1], b.shape[-1]))


def _check(a, b, bias):
    torch._check(a.dim() in (2, 3) and b.dim() == a.dim(), lambda: f"matmul: operands of {a.dim()} and {b.dim()} dims")
    torch._check(a.shape[-1] == b.shape[-2], lambda: f"matmul: {tuple(a.shape)} @ {tuple(b.shape)}")
    torch._check(bias is None or a.dim() == 2, lambda: "matmul: a bias only with 2-D operands (addmm)")


def _current():
    """This module as imported now: tests import the package afresh with TRITON_INTERPRET flipped
    (tests/triton_mode.py), and the op, registered once per process, must run the current kernel."""
    return sys.modules.get(__name__) or importlib.import_module(__name__)


def _entry(kind: str):
    def run(a, b, bias=None):
        module = _current()
        if kind == "fake":
            return module.matmul_fake(a, b, bias)
        if kind == "cuda":   # checks a signature's operands once, at its first call
            return module.matmul_cuda(a, b, bias)
        _check(a, b, bias)
        return getattr(module, f"matmul_{kind}")(a, b, bias)
    return run


def _register() -> None:
    """Once per process; torch.library keeps the registrations alive (no Library object of ours to lose)."""
    try:
        torch.ops.fuse_all_triton.matmul
        return
    except AttributeError:
        pass
    torch.library.define("fuse_all_triton::matmul", "(Tensor a, Tensor b, Tensor? bias=None) -> Tensor")
    torch.library.impl("fuse_all_triton::matmul", "CUDA", _entry("cuda"))
    torch.library.impl("fuse_all_triton::matmul", "CPU", _entry("cpu"))
    torch.library.register_fake("fuse_all_triton::matmul", _entry("fake"))


_register()
OP = torch.ops.fuse_all_triton.matmul.default

"""Builders for hand-built `Program`s (the codegen contract, `fuse_all_ir.program`) and the tolerance-aware
comparisons the codegen tests use (outputs against expected values; an error against float64 relative to
eager's). The examples themselves are in the `kernel_examples` package."""
from __future__ import annotations

from typing import Callable, NamedTuple

import sympy
import torch

from fuse_all_ir.tiling import plan_tiling
from fuse_all_ir import (
    Alloc, BufferRef, GraphInput, Kernel, KernelCall, Loop, Program, TensorSpec, contiguous_strides, rvar,
    size_symbol, xvar,
)

# the index and size symbols the examples are written in
x0, x1, x2 = xvar(0), xvar(1), xvar(2)
r0, r1 = rvar(0), rvar(1)
s0, s1 = size_symbol("s0"), size_symbol("s1")


class Example(NamedTuple):
    program: Program
    inputs: list
    expected: Callable[[list], tuple]
    rtol: float | None = None           # overrides for floating outputs (None: torch's per-dtype defaults)
    atol: float | None = None


# ---- helpers ----------------------------------------------------------------------------------------

def spec(dtype: str, size, stride=None, device="cpu") -> TensorSpec:
    size = tuple(sympy.sympify(s) for s in size)
    stride = contiguous_strides(size) if stride is None else tuple(sympy.sympify(s) for s in stride)
    return TensorSpec(dtype, size, stride, sympy.Integer(0), device)


def program(name: str, device: str, inputs: dict[str, TensorSpec], outputs: dict[str, TensorSpec],
            kernels: list[Kernel], temps: dict[str, TensorSpec] | None = None,
            size_symbols: dict | None = None, size_hints: dict | None = None) -> Program:
    """A program that allocates every output and temporary, runs `kernels` in order and returns outputs.
    Each kernel gets its tile plan as kernelgen gives it (`fuse_all_ir.tiling.plan_tiling`)."""
    kernels = [plan_tiling(k) for k in kernels]
    temps = temps or {}
    buffers = {**temps, **outputs}
    steps = [Alloc(b) for b in buffers] + [KernelCall(k.name) for k in kernels]
    return Program(
        graph_id=name, device=device,
        inputs=[GraphInput(n, "tensor", s) for n, s in inputs.items()],
        buffers=buffers, kernels={k.name: k for k in kernels}, steps=steps,
        outputs=[BufferRef(n) for n in outputs],
        size_symbols=size_symbols or {}, size_hints=size_hints or {},
    )


def pointwise(name, outer, body, inputs, outputs, size_symbols=()) -> Kernel:
    return Kernel(name, tuple(sympy.sympify(n) for n in outer), (), [Loop(False, body)],
                  tuple(inputs), tuple(outputs), tuple(size_symbols))


def nonzero_randn(*size, dtype=torch.float32, device="cpu", scale=1.0) -> torch.Tensor:
    t = torch.randn(*size, dtype=torch.float64, device=device) * scale
    t = torch.where(t.abs() < 1e-3, torch.full_like(t, 0.5), t)
    return t.to(dtype)


def uniform(lo, hi, *size, dtype=torch.float32, device="cpu") -> torch.Tensor:
    t = torch.rand(*size, dtype=torch.float64, device=device) * (hi - lo) + lo
    return t.to(dtype)


def assert_outputs_match(actual, expected, example: Example | None = None) -> None:
    assert len(actual) == len(expected), f"{len(actual)} outputs, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.dtype == e.dtype, f"output {i}: dtype {a.dtype}, expected {e.dtype}"
        assert tuple(a.shape) == tuple(e.shape), f"output {i}: shape {tuple(a.shape)}, expected {tuple(e.shape)}"
        kwargs = {}
        if e.dtype.is_floating_point and example is not None and example.rtol is not None:
            kwargs = {"rtol": example.rtol, "atol": example.atol}
        elif e.dtype in (torch.float16, torch.bfloat16):
            kwargs = {"rtol": 1e-2, "atol": 1e-2}
        elif e.dtype == torch.float32:
            kwargs = {"rtol": 1e-5, "atol": 1e-5}
        torch.testing.assert_close(a.cpu(), e.cpu(), equal_nan=True, msg=lambda m: f"output {i}: {m}", **kwargs)


def assert_error_within_eager_bound(fa, eager, ref64, rel_floor):
    """err_fa <= max(10 * err_eager, rel_floor * scale), errors against float64, scale = max |ref|."""
    err_fa = (fa.double() - ref64).abs().max().item()
    err_eager = (eager.double() - ref64).abs().max().item()
    scale = ref64.abs().max().item()
    bound = max(10 * err_eager, rel_floor * scale)
    assert err_fa <= bound, f"error {err_fa:.3g} > {bound:.3g} (eager {err_eager:.3g}, scale {scale:.3g})"

"""Looped float sums in Triton against a float64 reference, relative to eager's error (issue 9, item 4).

A looped reduction keeps an [XBLOCK, RBLOCK] accumulator: each lane adds rnumel / RBLOCK values in a row
(5e4 for a 1e8-element sum with RBLOCK 2048; a column sum has RBLOCK 16). The lanes are Kahan-compensated,
so that chain's rounding no longer grows with its length. Run in the interpreter at modest sizes, with a
tiny RBLOCK so every lane's chain is long."""
from __future__ import annotations

import pytest
import sympy
import torch

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")   # NumPy: inf/NaN in the interpreter

import kernel_examples as ke
from kernel_program_builders import assert_error_within_eager_bound
from fuse_all_ir import Compute, Const, Kernel, Load, Loop, Reduce, Store, load_host_program, \
    render_host_program, rvar, xvar

N = 2**13


def affine_sum_program(rows):
    """sum over r of (a * 1.5 + 0.25) for each of `rows` rows of length s0 (rows == 1: a full sum)."""
    index = rvar(0) + (xvar(0) * ke.s0 if rows > 1 else 0)
    k = Kernel("kernel_0", (rows,) if rows > 1 else (), (ke.s0,), [
        Loop(True, [Load("a", "arg0", index, "float32"), Const("k", 1.5, "float32"), Const("c", 0.25, "float32"),
                    Compute("ak", "mul", ("a", "k"), "float32"), Compute("y", "add", ("ak", "c"), "float32"),
                    Reduce("s", "sum", "y", "float32")]),
        Loop(False, [Store("buf0", xvar(0) if rows > 1 else sympy.Integer(0), "s")]),
    ], ("arg0",), ("buf0",), (ke.s0,))
    out = [rows] if rows > 1 else []
    return ke.program("affine_sum", "cpu", {"arg0": ke.spec("float32", [rows, ke.s0] if rows > 1 else [ke.s0])},
                      {"buf0": ke.spec("float32", out)}, [k], size_symbols={ke.s0: f"arg0.size({int(rows > 1)})"},
                      size_hints={ke.s0: N})


def run_looped(rows, x, tmp_path, rblock=4):
    from fuse_all_codegen_triton import TritonTarget
    source = render_host_program(affine_sum_program(rows), TritonTarget(force_looped=True, rblock=rblock))
    assert "_acc0_c" in source                       # the compensation term
    (out,) = load_host_program(source, str(tmp_path)).call([x])
    return out


def affine_sum(t):
    return (t * 1.5 + 0.25).sum(-1)


def test_looped_sum_of_random_values(tmp_path):
    """4096 positive values per lane (rblock 2)."""
    torch.manual_seed(0)
    x = torch.rand(N)
    out = run_looped(1, x, tmp_path, rblock=2)
    assert_error_within_eager_bound(out, affine_sum(x), affine_sum(x.double()), rel_floor=2.5e-7)


@pytest.mark.parametrize("rows", [1, 2])
def test_looped_sum_keeps_what_a_plain_chain_rounds_away(rows, tmp_path):
    """A lane that starts at 1.5 * 2**24 (ulp 2) and then adds 1.0s: a plain running sum rounds every +1
    away (ties to even) and ends ~2000 short; eager's cascade and a compensated lane do not."""
    torch.manual_seed(0)
    n = 2**13
    x = torch.full((rows, n), 0.5) + torch.rand(rows, n) * 2**-10     # y = a * 1.5 + 0.25 ~ 1
    x[:, 0] = 2.0**24
    x = x if rows > 1 else x[0]
    out = run_looped(rows, x, tmp_path)
    assert_error_within_eager_bound(out, affine_sum(x), affine_sum(x.double()), rel_floor=2.5e-7)


def test_compensation_keeps_inf_and_nan(tmp_path):
    """inf - inf in the compensation must not turn an infinite sum into NaN; NaN still propagates."""
    x = torch.rand(3, 64)
    x[0, 5] = float("inf")
    x[1, 7] = float("inf")
    x[1, 9] = -float("inf")
    x[2, 11] = float("nan")
    out = run_looped(3, x, tmp_path)
    expected = affine_sum(x)
    torch.testing.assert_close(out, expected, equal_nan=True)
    assert out[0].item() == float("inf")

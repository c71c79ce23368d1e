"""Fused float32 sums against a float64 reference, relative to eager's own error (issue 9, item 4).

One accumulator per vector lane over the whole reduction gave errors 100-80000x eager's at 1e7-1e8
elements (eager uses a cascade sum); blocks of 16384 combined pairwise (and column sums in levels of 64
rows) bring them to eager's level. Every program is checked on random inputs, never constants."""
from __future__ import annotations

import pytest
import torch

from kernel_program_builders import assert_error_within_eager_bound

PROGRAMS = {
    "affine_sum": lambda x: (x * 1.5 + 0.25).sum(),
    "exp_sum": lambda x: torch.exp(x / 4).sum(),
    "mean_of_squares": lambda x: (x * x).mean(),
    "var_shifted": lambda x: (x + 3).var(),
    "long_rows": lambda x: (x.view(64, -1) + 1).sum(1),
    "long_columns": lambda x: (x.view(-1, 64) + 1).sum(0),                 # tiled across columns
    "transposed_rows": lambda x: (x.view(64, -1).t() + 1).sum(0),
    "two_dims": lambda x: (x.view(-1, 64).t() * 2 + 1).sum(),
    "short_inner_dim": lambda x: (x.view(4, -1).t() * 2 + 1).sum(),     # innermost reduction dim of 4
}


def check(name, n, rel_floor):
    torch.manual_seed(0)
    fn = PROGRAMS[name]
    x = torch.randn(n)
    torch._dynamo.reset()
    fa = torch.compile(fn, backend="fuse_all", options={"fallback": False})(x)
    assert_error_within_eager_bound(fa, fn(x), fn(x.double()), rel_floor)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_ten_million_element_reductions(name):
    """At 1e7 the old code was 6-7400x eager's error; this also holds a floor of 1e-6 of the result's
    scale (a float32 result cannot be nearer than half an ulp, 6e-8 of it)."""
    check(name, 10_000_000 - 10_000_000 % 64, rel_floor=1e-6)


@pytest.mark.parametrize("name", ["mean_of_squares", "short_inner_dim", "long_columns", "exp_sum"])
def test_hundred_million_element_reductions(name):
    """The issue's goal at 1e8 elements: within max(10x eager's error, 1e-4 of the result's scale)."""
    check(name, 100_000_000, rel_floor=1e-4)


def test_split_reduction_many_threads_combines_partials_pairwise():
    """128 threads on a 2**22-element sum: 128 partials, combined pairwise."""
    before = torch.get_num_threads()
    torch.set_num_threads(128)
    try:
        check("affine_sum", 2**22, rel_floor=1e-6)
    finally:
        torch.set_num_threads(before)



def test_dynamic_size_sum(tmp_path):
    """A symbolic reduction length: the block step is computed at run time. (1-D: views with symbolic
    FloorDiv sizes hit issue 9 item 7, the index printer, which another change fixes.)"""
    torch.manual_seed(0)
    fn = PROGRAMS["affine_sum"]
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="fuse_all", dynamic=True, options={"fallback": False})
    for n in (4_000_003, 10_000_001):
        x = torch.randn(n)
        assert_error_within_eager_bound(compiled(x), fn(x), fn(x.double()), rel_floor=1e-6)


def test_symbolic_reduction_without_a_hint_is_blocked():
    import sympy

    import kernel_examples as ke
    from fuse_all_codegen_cpp import render_kernel
    from fuse_all_ir import Kernel, Load, Loop, Reduce, Store, rvar
    kernel = Kernel("kernel_0", (), (ke.s0,), [
        Loop(True, [Load("a", "arg0", rvar(0), "float32"), Reduce("s", "sum", "a", "float32")]),
        Loop(False, [Store("buf0", sympy.Integer(0), "s")])], ("arg0",), ("buf0",), (ke.s0,))
    assert "fa_cascade<float> fa_cs_v_s;" in render_kernel(kernel)               # may be long: blocked
    assert "fa_step" not in render_kernel(kernel, None, {ke.s0: 100})            # hinted short: plain lanes


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_short_inner_dim_of_repeated_rows(dtype):
    """A stride-0 (expanded) input of 3 columns: the reduction is r0 x r1 with r1 = 3, too short for vector
    lanes, so one accumulator ran through a whole block of 16384 elements, and repeated rows round the same
    way every time: 5e-5 relative in float32 (300x eager's error), 1e-13 in float64. Such blocks are now
    SUM_BLOCK / 16 elements. Fuzz: seed 31 index 1787 (a float64 var over a (65537, 3) expanded input)."""
    fn = PROGRAMS["affine_sum"]
    torch.manual_seed(0)
    x = (torch.rand(3, dtype=dtype) + 0.5).expand(4 * 65537, 3)
    torch._dynamo.reset()
    before = torch.get_num_threads()
    torch.set_num_threads(1)   # one thread: the whole length in blocks (no split into thread partials)
    try:
        fa = torch.compile(fn, backend="fuse_all", options={"fallback": False})(x)
    finally:
        torch.set_num_threads(before)
    exact = sum(float(v) * 1.5 + 0.25 for v in x[0].double()) * x.shape[0]   # 3 terms: exact enough
    err_fa, err_eager = abs(fa.item() - exact) / exact, abs(fn(x).item() - exact) / exact
    assert err_fa <= max(20 * err_eager, {torch.float32: 5e-6, torch.float64: 2e-14}[dtype]), (err_fa, err_eager)

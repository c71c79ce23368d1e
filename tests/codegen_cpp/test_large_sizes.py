"""Index and partition arithmetic past 2**31 (issue 9, item 1).

A split reduction gives thread `t` of `nt` the range [n*t/nt, n*(t+1)/nt): with `t` an `int` and `n` an int
literal the product wrapped at 2**31 long before `n` did (128 threads on 2**24 elements, 2 threads on 2**30).
More threads than cores are fine here: OpenMP starts them anyway, and only the partition is being tested.
"""
from __future__ import annotations

import re

import pytest
import sympy
import torch

import kernel_examples as ke
from fuse_all_codegen_cpp import render_kernel
from fuse_all_ir import Kernel, Load, Loop, Reduce, Store, rvar, xvar


@pytest.fixture
def threads():
    """Set torch's (and so OpenMP's) thread count for one test; restored afterwards."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


def compiled_sum(x):
    torch._dynamo.reset()
    return torch.compile(lambda t: t.sum(), backend="fuse_all", options={"fallback": False})(x)


def test_issue_reproducer_128_threads_4096_squared(threads):
    threads(128)
    assert compiled_sum(torch.ones(4096, 4096)).item() == 16777216.0


@pytest.mark.parametrize("n", [34_000_000, 40_000_000])   # wrong by 1.6 %, and a segfault, before the fix
def test_64_threads_partition_counts_every_element_once(threads, n):
    threads(64)
    x = (torch.arange(n) % 7).double()           # exact in float64: any element lost or doubled shows
    expected = 21 * (n // 7) + sum(range(n % 7))
    assert compiled_sum(x).item() == expected


def _ones_with_markers(n):
    """uint8 ones with distinct values at the ends and around every 2-thread boundary: a missing or
    doubled range changes the sum by a known, unique amount."""
    x = torch.ones(n, dtype=torch.uint8)
    marks = {0: 200, n // 2 - 1: 17, n // 2: 31, n // 2 + 1: 47, n - 1: 111}
    for i, v in marks.items():
        x[i] = v
    return x, n + sum(v - 1 for v in marks.values())


def test_two_threads_uint8_sum_past_2_30_elements(threads):
    """n < 2**31, so n is printed as an int literal; n * (t + 1) for t = 1 is not."""
    threads(2)
    x, expected = _ones_with_markers(2**30 + 2**28 + 3)
    assert compiled_sum(x).item() == expected


def test_two_threads_uint8_sum_past_2_31_elements(threads):
    """A real 2**31 + 5 element reduction (2 GB): every index is int64."""
    threads(2)
    x, expected = _ones_with_markers(2**31 + 5)
    assert compiled_sum(x).item() == expected


def _reduction_kernel(outer, reduction, index):
    return Kernel("kernel_0", tuple(outer), tuple(reduction), [
        Loop(True, [Load("a", "arg0", index, "float32"), Reduce("s", "sum", "a", "float32")]),
        Loop(False, [Store("buf0", xvar(0) if outer else sympy.Integer(0), "s")]),
    ], ("arg0",), ("buf0",), ())


def _int_typed_variables(source):
    return re.findall(r"\b(?:int|unsigned)\s+(\w+)\s*=", source)


@pytest.mark.parametrize("shape", [((), (2**31 + 5,)), ((), (3000,)), ((3,), (2**31 + 5,)), ((70_000,), (40_000,))])
def test_index_and_partition_arithmetic_is_int64(shape):
    """Every loop variable, bound and partition product is int64; literals past 2**31 carry LL."""
    outer, reduction = shape
    index = rvar(0) + (xvar(0) * reduction[0] if outer else 0)
    source = render_kernel(_reduction_kernel(outer, reduction, index))
    assert not _int_typed_variables(source), source
    for loop_var in re.findall(r"for \((\w+) ", source):
        assert loop_var == "int64_t", source
    partition = [ln for ln in source.splitlines() if "fa_lo =" in ln]
    if partition:      # split reductions: the length is widened before it meets the thread number
        assert f"(int64_t)({reduction[0] if reduction[0] < 2**31 else str(reduction[0]) + 'LL'}) * fa_t" \
            in partition[0], partition
    big = [int(m) for m in re.findall(r"\b(\d{10,})\b(?!LL)", source)]
    assert not [v for v in big if v >= 2**31], source


def test_index_literals_past_2_31_are_long_long():
    outer, reduction = (3,), (2**31 + 5,)
    source = render_kernel(_reduction_kernel(outer, reduction, xvar(0) * (2**31 + 5) + rvar(0)))
    assert "2147483653LL*x0" in source.replace(" ", "") or "x0*2147483653LL" in source.replace(" ", "")
    assert "(int64_t)(2147483653LL) * fa_t" in source


def test_kernel_examples_render_without_int_variables():
    for name, make in ke.EXAMPLES.items():
        for kernel in make("cpu").program.kernels.values():
            assert not _int_typed_variables(render_kernel(kernel)), name

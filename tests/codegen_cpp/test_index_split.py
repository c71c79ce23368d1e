"""index_split.split_ranges: the ranges of an inner counter on which the tests that mask strided loads are
constant, checked against evaluating every test at every counter value."""
from __future__ import annotations

import itertools
import operator

import pytest
import sympy

from fuse_all_codegen_cpp.index_split import invariant_tests, split_ranges
from fuse_all_ir.program import Compute, Const, IndexValue, Load
from fuse_all_ir.symbolic import xvar

_OPS = {"ge": operator.ge, "gt": operator.gt, "le": operator.le, "lt": operator.lt}


def _masked_body(op: str, a: int, b: int, bound: int, step: int = 2):
    x = xvar(1)
    return [IndexValue("i", a * x + b, "int64"), Const("c", bound, "int64"), Compute("m", op, ("i", "c"), "bool"),
            Load("v", "buf", step * x + 3, "float32", mask="m")]


@pytest.mark.parametrize("op,a,b,bound", [(op, a, b, bound) for op, a, b, bound in itertools.product(
    _OPS, (2, 1, -1, -3), (-5, 0, 4), (0, 7))])
def test_each_range_holds_the_test_value_at_every_counter(op, a, b, bound):
    count = 12
    ranges = split_ranges(_masked_body(op, a, b, bound), xvar(1), count)
    truth = [_OPS[op](a * j + b, bound) for j in range(count)]
    if len(set(truth)) == 1:
        assert ranges is None          # constant over the whole loop: nothing to split
        return
    assert ranges is not None and ranges[0][0] == 0 and ranges[-1][1] == count
    assert all(hi == lo for (_, hi, _), (lo, _, _) in zip(ranges, ranges[1:]))
    for lo, hi, body in ranges:
        (test,) = [s for s in body if s.name == "m"]
        assert isinstance(test, Const)
        assert all(truth[j] == test.value for j in range(lo, hi)), (lo, hi, test.value, truth)


def test_consecutive_masked_loads_and_symbolic_counts_are_left_alone():
    assert split_ranges(_masked_body("ge", 2, -1, 0, step=1), xvar(1), 12) is None   # a masked vector load
    assert split_ranges(_masked_body("ge", 2, -1, 0), xvar(1), sympy.Symbol("s0", positive=True)) is None


def test_a_test_of_an_outer_counter_is_unswitched():
    x0, x1 = xvar(0), xvar(1)
    body = [IndexValue("i", 2 * x0 - 1, "int64"), Const("c", 0, "int64"), Compute("m", "ge", ("i", "c"), "bool"),
            Load("v", "buf", 2 * x1 + 64 * x0, "float32", mask="m")]
    assert invariant_tests(body, x1, {"i", "c", "m"}) == ["m"]
    assert invariant_tests(body, x1, {"i", "c"}) is None

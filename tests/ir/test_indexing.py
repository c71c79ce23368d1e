"""Range-aware index simplification (`fuse_all_ir.indexing`): exact over the whole loop space, numerators of
either sign included.

A pad, cat piece or slice reads its source at a shifted index, and a reshape of a strided source turns
that into FloorDiv/ModularIndexing of a flat position, negative where the pad is masked and, after
FloorDiv's `(a*d + b) // d == a + b // d`, negative even where it reads (fuzz seed 51 index 1221:
`FloorDiv(x2 - 18, 8)` became 0). Simplifying must not change the value at any point of the ranges; each
FloorDiv/ModularIndexing left must have a provably non-negative numerator wherever its lower bound is an
integer (so the codegens keep their native division there); and the plain reshape cases must still
simplify to multiply-adds.
"""
from __future__ import annotations

import itertools
import random

import pytest
import sympy

from fuse_all_ir import sympy_functions as sf
from fuse_all_ir.indexing import known_nonnegative, lower_bound, simplify_index, upper_bound
from fuse_all_ir.symbolic import FloorDiv, ModularIndexing, size_symbol, xvar

x0, x1, x2 = xvar(0), xvar(1), xvar(2)
s0 = size_symbol("s0")


def _strides(sizes):
    out, step = [], 1
    for n in reversed(sizes):
        out.insert(0, step)
        step *= n
    return out


def _shifted_reshape_read(source, target, before, source_strides):
    """The index a pad (`before[k]` elements before dim k of `target`) of `source.reshape(target)` reads
    its strided source with, as the lowering composes it: the flat position of the shifted target index,
    unflattened into `source` (FloorDiv for dim 0, ModularIndexing after)."""
    idx = [xvar(k) - b for k, b in enumerate(before)]
    flat = sum((i * st for i, st in zip(idx, _strides(target))), sympy.Integer(0))
    src = [ModularIndexing(flat, st, n) if d else FloorDiv(flat, st)
           for d, (st, n) in enumerate(zip(_strides(source), source))]
    return sum((i * st for i, st in zip(src, source_strides)), sympy.Integer(0))


def _points(ranges):
    names = list(ranges)
    for values in itertools.product(*(range(int(ranges[v])) for v in names)):
        yield dict(zip(names, values))


def _assert_same_everywhere(expr, simplified, ranges, sizes=None):
    for point in _points(ranges):
        point.update(sizes or {})
        assert sf.evaluate(simplified, point) == sf.evaluate(expr, point), \
            f"{expr} -> {simplified} differs at {point}"


def _fast_path_kept(simplified, ranges):
    """Every FloorDiv/ModularIndexing left has a numerator the printers can see is non-negative, unless its
    lower bound is not an integer (a symbolic one leaves no integer shift)."""
    for sub in sympy.preorder_traversal(simplified):
        if isinstance(sub, (FloorDiv, ModularIndexing)):
            low = lower_bound(sub.args[0], ranges)
            if low is not None and sympy.expand(low).is_Integer:
                assert sub.args[0].is_nonnegative, f"{sub} in {simplified}: numerator not provably >= 0"


def test_the_fuzz_reproducer():
    """seed 51 index 1221: F.pad(a.contiguous().view(3, 11, 8), [2, 2, 2, 2]) of a (33, 8) input with
    strides (2, 66)."""
    expr = _shifted_reshape_read((33, 8), (3, 11, 8), (0, 2, 2), (2, 66))
    ranges = {x0: 3, x1: 15, x2: 12}
    simplified = simplify_index(expr, ranges)
    _assert_same_everywhere(expr, simplified, ranges)
    _fast_path_kept(simplified, ranges)
    # the element the first unmasked lane reads: a[0, 0] (lane (0, 2, 2): flat position 0)
    assert sf.evaluate(simplified, {"x0": 0, "x1": 2, "x2": 2}) == 0


def _random_case(rng):
    """A strided 2-D or 3-D source reshaped to a shape whose dims straddle the source's, padded."""
    while True:
        source = tuple(rng.choice([2, 3, 4, 6, 8]) for _ in range(rng.choice([2, 3])))
        total = 1
        for n in source:
            total *= n
        divisors = [d for d in range(2, total) if total % d == 0]
        if divisors:
            break
    first = rng.choice(divisors)
    target = (first, total // first)
    if rng.random() < 0.5:
        rest = [d for d in range(2, target[1]) if target[1] % d == 0]
        if rest:
            inner = rng.choice(rest)
            target = (first, target[1] // inner, inner)
    before = tuple(rng.choice([0, 0, 1, 2, 3, 5]) for _ in target)
    after = tuple(rng.choice([0, 1, 2]) for _ in target)
    order = list(range(len(source)))
    rng.shuffle(order)
    strides = [0] * len(source)
    step = rng.choice([1, 2])
    for d in reversed(order):
        strides[d] = step
        step *= source[d] + rng.choice([0, 1])
    ranges = {xvar(k): n + b + a for k, (n, b, a) in enumerate(zip(target, before, after))}
    return _shifted_reshape_read(source, target, before, strides), ranges


@pytest.mark.parametrize("seed", range(40))
def test_random_shifted_reshapes_simplify_exactly(seed):
    expr, ranges = _random_case(random.Random(seed))
    simplified = simplify_index(expr, ranges)
    _assert_same_everywhere(expr, simplified, ranges)
    _fast_path_kept(simplified, ranges)


def test_symbolic_outer_size():
    """Dynamic shapes: the loop ranges hold a size symbol; the divisors stay integers."""
    expr = _shifted_reshape_read((3 * s0, 8), (s0, 3, 8), (0, 2, 2), (1, 3 * s0))
    ranges = {x0: s0, x1: 7, x2: 12}
    simplified = simplify_index(expr, ranges)
    _fast_path_kept(simplified, ranges)
    for n in (1, 2, 5):
        _assert_same_everywhere(expr, simplified, {x0: n, x1: 7, x2: 12}, {"s0": n})


def test_symbolic_divisor_stays_floored():
    """No integer shift exists for a symbolic divisor: the FloorDiv stays, with its numerator's sign unknown,
    and means floor division (the printers' floor path)."""
    expr = FloorDiv(x1 - 3, s0)
    ranges = {x1: s0 + 4}
    simplified = simplify_index(expr, ranges)
    assert simplified == expr
    assert simplified.is_nonnegative is None
    for n in (1, 2, 5):
        _assert_same_everywhere(expr, simplified, {x1: n + 4}, {"s0": n})


def test_plain_reshapes_still_simplify_to_multiply_adds():
    """The simplifications the fix keeps (they decide kernel speed): flatten/unflatten round trips and
    ranges below the divisor, where the numerator is provably non-negative."""
    ranges = {x0: 3, x1: 8}
    assert simplify_index(FloorDiv(8 * x0 + x1, 8), ranges) == x0
    assert simplify_index(ModularIndexing(8 * x0 + x1, 1, 8), ranges) == x1
    assert simplify_index(FloorDiv(x1, 8), ranges) == 0
    assert simplify_index(ModularIndexing(x1, 1, 8), ranges) == x1
    assert simplify_index(ModularIndexing(8 * x0 + x1, 8, 3), ranges) == x0
    # a shifted numerator whose valid range is one quotient: the shift becomes a constant
    assert simplify_index(FloorDiv(x1 - 8, 8), ranges) == -1
    assert simplify_index(ModularIndexing(x1 - 8, 1, 8), ranges) == x1


def test_rewrites_need_a_non_negative_numerator():
    """The rewrites that hold only for numerators >= 0 are refused (or shifted) when the bound is below 0:
    upper bound < divisor is not enough."""
    ranges = {x2: 12}
    assert simplify_index(FloorDiv(x2 - 18, 8), ranges) != 0
    assert simplify_index(ModularIndexing(x2 - 18, 1, 8), ranges) != x2 - 18
    # a negative coefficient: no shift (FloorDiv would pull the multiple back out), and no rewrite
    ranges = {x0: 8}
    out = simplify_index(FloorDiv(-x0, 4), ranges)
    _assert_same_everywhere(FloorDiv(-x0, 4), out, ranges)
    # a flip keeps its numerator non-negative by the ranges
    out = simplify_index(FloorDiv(7 - x0, 8), ranges)
    assert out == 0


def test_bounds():
    ranges = {x0: 4, x1: 8}
    assert lower_bound(x1 - 18, ranges) == -18 and upper_bound(x1 - 18, ranges) == -11
    assert lower_bound(7 - x1, ranges) == 0 and upper_bound(7 - x1, ranges) == 7
    assert lower_bound(FloorDiv(x1 - 18, 8), ranges) == -3
    assert upper_bound(FloorDiv(x1 - 18, 8), ranges) == -2
    assert (lower_bound(ModularIndexing(x1 - 18, 1, 8), ranges), upper_bound(ModularIndexing(x1 - 18, 1, 8),
                                                                             ranges)) == (0, 7)
    assert lower_bound(s0 * x0 - 2, ranges) == -2
    assert upper_bound(s0 - 1 - x0, {x0: s0}) == s0 - 1 and lower_bound(s0 - 1 - x0, {x0: s0}) == 0
    # a product of factors of unknown sign has no bound
    assert upper_bound((x0 - 2) * (x1 - 3), ranges) is None
    assert known_nonnegative(7 - x1, ranges) and not known_nonnegative(6 - x1, ranges)
    assert FloorDiv(x1 - 18, 8).is_nonnegative is None and FloorDiv(x1 + 2, 8).is_nonnegative
    assert ModularIndexing(x1 - 18, 1, 8).is_nonnegative


def test_quotient_and_remainder_of_one_position_recombine():
    """m*FloorDiv(a, b*m) + ModularIndexing(a, b, m) is FloorDiv(a, b), for `a` of any sign: a reshape that
    splits a dim and merges it back (seen in fuzz seed 77 programs: a 704-long reduction row read as
    `64*FloorDiv(r0, 64) + ModularIndexing(r0, 1, 64)`), and the same after a pad's shift."""
    r0 = sympy.Symbol("r0", integer=True, nonnegative=True)
    assert simplify_index(64 * FloorDiv(r0, 64) + ModularIndexing(r0, 1, 64), {r0: 704}) == r0
    assert simplify_index(31 * FloorDiv(x0, 124) + ModularIndexing(x0, 4, 31), {x0: 620}) == FloorDiv(x0, 4)
    assert simplify_index(s0 * FloorDiv(x0, 3 * s0) + ModularIndexing(x0, 3, s0), {x0: 9 * s0}) == \
        FloorDiv(x0, 3)
    ranges = {x0: 8, x1: 9}
    shifted = 2 * x0 + 2 * FloorDiv(x1 - 9, 2) + ModularIndexing(x1 - 9, 1, 2)
    assert simplify_index(shifted, ranges) == 2 * x0 + x1 - 9
    # different coefficients or positions do not pair
    unpaired = 3 * FloorDiv(x1, 2) + ModularIndexing(x1, 1, 2)
    out = simplify_index(unpaired, ranges)
    assert out.has(FloorDiv)
    _assert_same_everywhere(unpaired, out, ranges)


def test_rules_apply_again_to_what_a_rewrite_builds():
    """A FloorDiv built by a rewrite, and a recombination hidden in a product, are simplified too (fuzz seed
    77, dynamic shapes): s*(x1 + FloorDiv(s*x2 + x3, 2*s)) with x2 < 2, x3 < s is s*x1, and
    s*(3 + FloorDiv(a, 2*s)) + ModularIndexing(a, 2, s) is 3*s + FloorDiv(a, 2)."""
    s76, s55 = size_symbol("s76"), size_symbol("s55")
    x3 = xvar(3)
    ranges = {x0: s0, x1: s55, x2: 2, x3: s76}
    flat = 2 * s76 * x1 + s76 * x2 + x3
    expr = (s55 * s76 * (x0 + FloorDiv(flat, 2 * s55 * s76)) + s76 * ModularIndexing(flat, 2 * s76, s55)
            + ModularIndexing(s76 * x2 + x3, 1, 2 * s76))
    assert sympy.expand(simplify_index(expr, ranges)) == s55 * s76 * x0 + s76 * x1 + s76 * x2 + x3
    hidden = s0 * (3 + FloorDiv(x1 - 7, 2 * s0)) + ModularIndexing(x1 - 7, 2, s0)
    out = simplify_index(hidden, {x1: 8})
    assert not out.has(ModularIndexing) and out.has(FloorDiv)
    for n in (1, 3, 4):
        _assert_same_everywhere(hidden, out, {x1: 8}, {"s0": n})

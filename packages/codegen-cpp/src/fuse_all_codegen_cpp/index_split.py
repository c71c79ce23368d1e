"""Ranges of an inner loop's counter where the masks of its loads do not change (index-set splitting).

A window that pokes past an edge along the innermost dim (a padded max-pool or convolution window over
NCHW rows, `x[2*j - 1]` behind `2*j - 1 >= 0`) masks its loads with a test of the inner counter. GCC 12
cannot vectorise a masked load at a stride ("no vectype" / "not suitable for gather"), so BatchNorm +
ReLU + 3x3/2 max-pool over NCHW ran its whole `omp simd` loop scalar. The tests are true or false on a
few ranges of the counter (here j = 0 and 1 <= j < n); rendering the loop once per range with each test
replaced by its constant value leaves plain strided loads that GCC vectorises, and the edge ranges are a
few iterations each.

Only tests of an affine integer expression of the inner counter against a value known at compile time
are split, at integer breakpoints of a loop with a known trip count, and only those that decide whether
a load reads (a select the vectoriser handles as it is).
"""
from __future__ import annotations

import sympy

from fuse_all_ir.program import Compute, Const, IndexValue, Load

_FLIPPED = {"ge": "le", "gt": "lt", "le": "ge", "lt": "gt"}
_RELATIONS = {sympy.GreaterThan: "ge", sympy.StrictGreaterThan: "gt", sympy.LessThan: "le",
              sympy.StrictLessThan: "lt"}
MAX_RANGES = 5      # an edge on each side and a gap between two windows: beyond that the copies cost more


def _integer_value(stmt) -> sympy.Expr | None:
    if isinstance(stmt, IndexValue) and stmt.dtype in ("int64", "int32"):
        return sympy.sympify(stmt.expr)
    if isinstance(stmt, Const) and isinstance(stmt.value, int) and not isinstance(stmt.value, bool):
        return sympy.Integer(stmt.value)
    return None


def _comparison(stmt, defs: dict) -> tuple[str, sympy.Expr] | None:
    """(op, lhs - rhs) of an integer comparison `stmt`, or None."""
    if isinstance(stmt, IndexValue) and type(stmt.expr) in _RELATIONS:
        return _RELATIONS[type(stmt.expr)], sympy.expand(stmt.expr.lhs - stmt.expr.rhs)
    if not (isinstance(stmt, Compute) and stmt.op in _FLIPPED and len(stmt.args) == 2):
        return None
    lhs, rhs = (_integer_value(defs.get(a)) for a in stmt.args)
    if lhs is None or rhs is None:
        return None
    return stmt.op, sympy.expand(lhs - rhs)


def _true_from(op: str, diff: sympy.Expr, counter: sympy.Symbol) -> tuple[int, bool] | None:
    """(t, rising): the test `diff op 0` is true exactly for counter >= t (rising) or counter < t; None
    when diff is not `a * counter + c` with integers a != 0 and c."""
    if op in ("le", "lt"):
        op, diff = _FLIPPED[op], -diff
    if op == "gt":
        diff -= 1                                    # integers: d > 0  <=>  d - 1 >= 0
    linear = _linear(diff, counter)
    if linear is None or not (linear[0].is_Integer and linear[0] != 0 and linear[1].is_Integer):
        return None
    a, c = int(linear[0]), int(linear[1])
    if a > 0:                                        # a x + c >= 0  <=>  x >= ceil(-c / a)
        return -(c // a), True
    return c // -a + 1, False                        # a < 0: x <= floor(c / -a)


def _linear(expr, counter: sympy.Symbol) -> tuple[sympy.Expr, sympy.Expr] | None:
    """(a, c) with expr == a * counter + c and c free of counter, or None (counter inside a floor
    division, a product, ...)."""
    expr = sympy.expand(sympy.sympify(expr))
    a = sympy.Integer(0)
    rest = []
    for term, coefficient in expr.as_coefficients_dict().items():
        if term == counter:
            a += coefficient
        elif counter in term.free_symbols:
            return None
        else:
            rest.append(term * coefficient)
    return a, sympy.Add(*rest)


def strided_in(index, counter: sympy.Symbol) -> bool:
    """Whether `index` moves with `counter` other than by one element per step."""
    if counter not in sympy.sympify(index).free_symbols:
        return False
    linear = _linear(index, counter)
    return linear is None or linear[0] not in (1, -1)


def _mask_sources(body, counter: sympy.Symbol, defs: dict) -> set[str]:
    """Values the masks of the loop's strided loads are computed from (transitively). A masked load of
    consecutive elements vectorises as it is."""
    pending = [s.mask for s in body if isinstance(s, Load) and s.mask is not None and strided_in(s.index, counter)]
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen or name not in defs:
            continue
        seen.add(name)
        stmt = defs[name]
        if isinstance(stmt, Compute):
            pending.extend(stmt.args)
    return seen


def split_ranges(body, counter: sympy.Symbol, trip_count) -> list[tuple[int, int, list]] | None:
    """[(lo, hi, body for lo <= counter < hi)] covering 0 <= counter < trip_count, each body with the
    load-mask tests that are constant on its range replaced by that constant; None when nothing splits."""
    count = sympy.sympify(trip_count)
    if not count.is_Integer:
        return None
    defs = {s.name: s for s in body if hasattr(s, "name")}
    tests = {}
    for name in _mask_sources(body, counter, defs):
        found = _comparison(defs[name], defs)
        edge = found and _true_from(*found, counter)
        if edge and 0 < edge[0] < int(count):
            tests[name] = edge
    if not tests:
        return None
    bounds = sorted({0, int(count), *(t for t, _ in tests.values())})
    if len(bounds) - 1 > MAX_RANGES:
        return None
    ranges = []
    for lo, hi in zip(bounds, bounds[1:]):
        values = {name: (lo >= t) == rising for name, (t, rising) in tests.items()}
        ranges.append((lo, hi, with_values(body, values)))
    return ranges


def invariant_tests(body, counter: sympy.Symbol, invariant: set[str], limit: int = 2) -> list[str] | None:
    """Tests that do not move with `counter` (names in `invariant`) from which the masks of strided loads
    are computed: comparisons, not the and/or of others. The loop is written once per combination of
    their values (loop unswitching, which GCC does only at -O3), each copy with plain loads; None when
    there are none or more than `limit`."""
    defs = {s.name: s for s in body if hasattr(s, "name")}
    tests = [name for name in _mask_sources(body, counter, defs)
             if name in invariant and getattr(defs[name], "dtype", None) == "bool"
             and (_comparison(defs[name], defs) is not None or isinstance(defs[name], IndexValue))]
    if not tests or len(tests) > limit:
        return None
    order = {s.name: i for i, s in enumerate(body) if hasattr(s, "name")}
    return sorted(tests, key=order.__getitem__)


def with_values(body, values: dict[str, bool]) -> list:
    """`body` with the statements named in `values` replaced by those constants."""
    return [Const(s.name, values[s.name], s.dtype) if getattr(s, "name", None) in values else s for s in body]

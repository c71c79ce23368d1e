"""Range-aware simplification of index expressions.

Views compose into `FloorDiv`/`ModularIndexing` chains (a reshape flattens then unflattens). Knowing each
loop variable's range removes most of them again, so kernels index with plain multiply-adds.
"""
from __future__ import annotations

import itertools

import sympy

from .symbolic import FloorDiv, ModularIndexing


def upper_bound(expr, ranges: dict):
    """An upper bound of a non-negative index expression, or None when unknown."""
    if expr.is_Integer:
        return expr
    if expr.is_Symbol:
        if expr in ranges:
            return ranges[expr] - 1
        return expr  # a size symbol bounds itself
    if expr.is_Add:
        parts = [upper_bound(a, ranges) for a in expr.args]
        return None if any(p is None for p in parts) else sympy.Add(*parts)
    if expr.is_Mul:
        coeff, rest = expr.as_coeff_Mul()
        if coeff < 0:
            return None
        bounds = [upper_bound(a, ranges) for a in sympy.Mul.make_args(rest)]
        return None if any(b is None for b in bounds) else coeff * sympy.Mul(*bounds)
    if isinstance(expr, FloorDiv):
        b = upper_bound(expr.args[0], ranges)
        return None if b is None else FloorDiv(b, expr.args[1])
    if isinstance(expr, ModularIndexing):
        return expr.args[2] - 1
    return None


def _known_less(a, b) -> bool:
    """True when a < b is certain (sizes are positive integers)."""
    if a is None:
        return False
    diff = sympy.expand(b - a)
    return bool(diff.is_positive)


def _factor_out(base, div, ranges):
    """(c*k + rest) // div == k // (div / c) when 0 <= rest < c and c divides div: the usual shape after a
    view flattens (k, c) and another unflattens it. Returns (k, div / c) or None."""
    if not base.is_Add:
        return None
    for term in base.args:
        coeff, k = term.as_coeff_Mul()
        if coeff <= 1 or not coeff.is_Integer or not (div / coeff).is_integer:
            continue
        rest = base - term
        if _known_less(upper_bound(rest, ranges), coeff) and (rest == 0 or rest.is_nonnegative is not False):
            return k, div / coeff
    return None


_SIMPLIFIED: dict = {}    # (expr, ranges) -> simplified; fusion probes rebuild the same kernels' indices
_SIMPLIFIED_MAX = 50_000


_RANGES_IDS: dict = {}
_NEXT_RANGES_ID = itertools.count()      # never reused: an id outliving a clear of the table stays unique


def ranges_id(ranges: dict) -> int:
    """A small key standing for these loop ranges in `simplify_index`'s memo (hashing the ranges' sympy
    values for every index is a Python call per value; a kernel builder asks once)."""
    key = tuple(ranges.items())
    found = _RANGES_IDS.get(key)
    if found is None:
        if len(_RANGES_IDS) >= _SIMPLIFIED_MAX:
            _RANGES_IDS.clear()
        found = _RANGES_IDS[key] = next(_NEXT_RANGES_ID)
    return found


def simplify_index(expr, ranges: dict, ranges_key: int | None = None):
    """`ranges_key`: `ranges_id(ranges)`, when the caller keeps it (a kernel builder asks per index)."""
    key = (expr, tuple(ranges.items()) if ranges_key is None else ranges_key)
    found = _SIMPLIFIED.get(key)
    if found is None:
        if len(_SIMPLIFIED) >= _SIMPLIFIED_MAX:
            _SIMPLIFIED.clear()
        expr = sympy.sympify(expr)
        found = _SIMPLIFIED[key] = _simplify_index(expr, ranges) if expr.has(FloorDiv, ModularIndexing) else expr
    return found


def _simplify_index(expr, ranges: dict):

    def rewrite(e):
        if not e.args:
            return e
        args = [rewrite(a) for a in e.args]
        e = e.func(*args) if any(a is not b for a, b in zip(args, e.args)) else e
        if isinstance(e, FloorDiv):
            base, div = e.args
            if _known_less(upper_bound(base, ranges), div):
                return sympy.Integer(0)
            factored = _factor_out(base, div, ranges)
            if factored is not None:
                return rewrite(FloorDiv(*factored))
        elif isinstance(e, ModularIndexing):
            base, div, mod = e.args
            factored = _factor_out(base, div, ranges)
            if factored is not None:
                return rewrite(ModularIndexing(factored[0], factored[1], mod))
            bound = upper_bound(base, ranges)
            if _known_less(bound, div * mod):
                return FloorDiv(base, div) if div != 1 else base
            if _known_less(bound, div):
                return sympy.Integer(0)
        return e
    return rewrite(expr)

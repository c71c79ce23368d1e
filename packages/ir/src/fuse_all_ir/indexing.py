"""Range-aware simplification of index expressions.

Views compose into `FloorDiv`/`ModularIndexing` chains (a reshape flattens then unflattens). Knowing each
loop variable's range removes most of them again, so kernels index with plain multiply-adds.

Both functions floor (Python semantics), and their numerator can be negative: a pad reads its input at
`x - before`, and FloorDiv's own rule `(a*d + b) // d == a + b // d` leaves `b` negative even where the
whole numerator is not (a pad of a reshaped view: `FloorDiv(x2 - 18, 8)`). So every rewrite below that
holds only for a non-negative numerator first proves it from the ranges (`known_nonnegative`), and a
numerator whose lower bound is a negative integer is shifted by a multiple of the divisor to make it
non-negative (`FloorDiv(x2 - 18, 8) == FloorDiv(x2 + 6, 8) - 3`): the codegens print a division of a
provably non-negative numerator with their native (truncating) `/` and `%`, any other with floor semantics.
"""
from __future__ import annotations

import itertools

import sympy

from .symbolic import FloorDiv, ModularIndexing


def upper_bound(expr, ranges: dict):
    """An upper bound of an index expression over `ranges` (index variable -> its extent), or None when
    unknown. Size symbols bound themselves."""
    return _bound(expr, ranges, upper=True)


def lower_bound(expr, ranges: dict):
    """A lower bound of an index expression over `ranges`, or None when unknown (index variables are >= 0)."""
    return _bound(expr, ranges, upper=False)


def _bound(expr, ranges: dict, upper: bool):
    if expr.is_Integer:
        return expr
    if expr.is_Symbol:
        if expr in ranges:
            return ranges[expr] - 1 if upper else sympy.Integer(0)
        return expr  # a size symbol bounds itself
    if expr.is_Add:
        parts = [_bound(a, ranges, upper) for a in expr.args]
        return None if any(p is None for p in parts) else sympy.Add(*parts)
    if expr.is_Mul:
        coeff, rest = expr.as_coeff_Mul()
        if not coeff.is_Rational:
            return None
        factors = sympy.Mul.make_args(rest)
        want_upper = upper if coeff >= 0 else not upper
        if len(factors) == 1:
            b = _bound(rest, ranges, want_upper)
            return None if b is None else coeff * b
        # a product of several factors: bounds multiply only when every factor is non-negative
        if not all(known_nonnegative(f, ranges) for f in factors):
            return None
        bounds = [_bound(f, ranges, want_upper) for f in factors]
        return None if any(b is None for b in bounds) else coeff * sympy.Mul(*bounds)
    if isinstance(expr, FloorDiv):
        base, div = expr.args
        if not div.is_positive:
            return None
        b = _bound(base, ranges, upper)   # floor(b / d) is monotone in b for d > 0
        return None if b is None else FloorDiv(b, div)
    if isinstance(expr, ModularIndexing):
        # (b // d) % m with m > 0 floors into [0, m) whatever b's sign
        return expr.args[2] - 1 if upper else sympy.Integer(0)
    return None


def known_nonnegative(expr, ranges: dict) -> bool:
    """True when `expr` >= 0 is certain over `ranges` (sizes are positive integers)."""
    if expr.is_nonnegative:
        return True
    low = lower_bound(expr, ranges)
    return low is not None and bool(sympy.expand(low).is_nonnegative)


def _known_less(a, b) -> bool:
    """True when a < b is certain (sizes are positive integers)."""
    if a is None:
        return False
    diff = sympy.expand(b - a)
    return bool(diff.is_positive)


def _factor_out(base, div, ranges):
    """(c*k + rest) // div == k // (div / c) when 0 <= rest < c and c divides div: the usual shape after a
    view flattens (k, c) and another unflattens it (it holds for a k of any sign). Returns (k, div / c) or
    None."""
    if not base.is_Add:
        return None
    for term in base.args:
        coeff, k = term.as_coeff_Mul()
        if coeff <= 1 or not coeff.is_Integer or not (div / coeff).is_integer:
            continue
        rest = base - term
        if _known_less(upper_bound(rest, ranges), coeff) and known_nonnegative(rest, ranges):
            return k, div / coeff
    return None


def _shift_to_nonnegative(base, period, ranges):
    """The multiple of `period` (a positive integer) to add to `base` so that its integer lower bound
    becomes >= 0, or None (bound unknown or symbolic, or the base already non-negative)."""
    if not (period.is_Integer and period > 0):
        return None
    low = lower_bound(base, ranges)
    if low is None:
        return None
    low = sympy.expand(low)
    if not low.is_Integer or low >= 0:
        return None
    return -(int(low) // int(period)) * period


def _recombine(e):
    """c*m*FloorDiv(a, b*m) + c*ModularIndexing(a, b, m) == c*FloorDiv(a, b) for `a` of any sign: a
    reshape that splits a shifted position into (quotient, remainder) of a dim it then merges back reads
    `a` itself (`2*FloorDiv(x1 + 1, 2) + ModularIndexing(x1 + 1, 1, 2)` is `x1 + 1`)."""
    if not any(isinstance(t.as_coeff_Mul()[1], ModularIndexing) for t in e.args):
        return e
    terms = list(sympy.Add.make_args(sympy.expand_mul(e)))   # s*(n + FloorDiv(..)) hides its FloorDiv term
    for i, term in enumerate(terms):
        coeff, mod = term.as_coeff_Mul()
        if not isinstance(mod, ModularIndexing):
            continue
        base, div, modulus = mod.args
        partner = sympy.expand_mul(coeff * modulus * FloorDiv(base, div * modulus))
        for j, other in enumerate(terms):
            if j != i and other == partner:
                rest = [t for k, t in enumerate(terms) if k not in (i, j)]
                return _recombine_again(sympy.Add(*rest, coeff * FloorDiv(base, div)))
    return e


def _recombine_again(e):
    return _recombine(e) if e.is_Add else e


def recombine(expr) -> sympy.Expr:
    """`expr` with its (quotient, remainder) pairs of one position merged back (`_recombine`), no ranges
    needed: a substitution that cut a position into dims laid out row-major again (column_split)."""
    return _recombine_again(sympy.sympify(expr))


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
            return _floordiv(e, rewrite)
        if isinstance(e, ModularIndexing):
            return _modular_indexing(e, rewrite)
        if e.is_Add:
            return _recombine(e)
        return e

    def _floordiv(e, rewrite):
        base, div = e.args
        shift = _shift_to_nonnegative(base, div, ranges)
        if shift is not None:
            shifted = FloorDiv(base + shift, div)   # floor((b + k*d) / d) == floor(b / d) + k
            if isinstance(shifted, FloorDiv) and known_nonnegative(shifted.args[0], ranges):
                return rewrite(shifted - shift / div)
        factored = _factor_out(base, div, ranges)
        if factored is not None:
            return rewrite(FloorDiv(*factored))
        if known_nonnegative(base, ranges) and _known_less(upper_bound(base, ranges), div):
            return sympy.Integer(0)
        return e

    def _modular_indexing(e, rewrite):
        base, div, mod = e.args
        shift = _shift_to_nonnegative(base, div * mod, ranges)
        if shift is not None:
            shifted = ModularIndexing(base + shift, div, mod)   # a multiple of div * mod changes nothing
            if isinstance(shifted, ModularIndexing) and known_nonnegative(shifted.args[0], ranges):
                return rewrite(shifted)
        factored = _factor_out(base, div, ranges)
        if factored is not None:
            return rewrite(ModularIndexing(factored[0], factored[1], mod))
        if not known_nonnegative(base, ranges):
            return e
        bound = upper_bound(base, ranges)
        if _known_less(bound, div * mod):
            return FloorDiv(base, div) if div != 1 else base
        if _known_less(bound, div):
            return sympy.Integer(0)
        return e
    # a rewrite can build a FloorDiv whose own rules then produce another one (FloorDiv(s*x1 + .., 2*s*n)
    # -> x1 + FloorDiv(..)): go again until nothing changes
    for _ in range(4):
        simpler = rewrite(expr)
        if simpler == expr:
            break
        expr = simpler
    return expr

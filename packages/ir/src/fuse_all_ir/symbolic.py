"""Integer index arithmetic: index variables and the two functions views need.

Index expressions are sympy expressions over non-negative integer symbols. `FloorDiv(a, b)` is ``a // b``
and `ModularIndexing(a, b, c)` is ``(a // b) % c`` with Python's floor semantics (b, c > 0). The numerator
`a` can be negative (a pad reads its input at `x - before`; `(a*d + b) // d == a + b // d` leaves a negative
`b`), so a printer uses its language's native (truncating) division and remainder only where `a` is
provably non-negative (`fuse_all_ir.indexing` makes it so wherever the loop ranges allow), and floor
semantics elsewhere.
"""
from __future__ import annotations

import functools

import sympy


@functools.lru_cache(None)
def xvar(i: int) -> sympy.Symbol:
    return sympy.Symbol(f"x{i}", integer=True, nonnegative=True)


@functools.lru_cache(None)
def rvar(i: int) -> sympy.Symbol:
    return sympy.Symbol(f"r{i}", integer=True, nonnegative=True)


def size_symbol(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, integer=True, positive=True)


def size_hint(expr, hints: dict, default: int) -> int:
    """`expr` evaluated at the example sizes `hints` (keyed by symbol or its name); a symbol without a hint
    counts as `default` (each codegen picks the size its heuristics should assume)."""
    expr = sympy.sympify(expr)
    subs = {s: hints.get(s, hints.get(str(s), default)) for s in expr.free_symbols}
    return int(expr.subs(subs)) if subs else int(expr)


class FloorDiv(sympy.Function):
    is_integer = True

    def _eval_is_nonnegative(self):
        base, divisor = self.args
        return base.is_nonnegative if divisor.is_positive else None   # floor(b / d) >= 0 iff b >= 0

    @classmethod
    def eval(cls, base, divisor):
        if divisor == 1:
            return base
        if base == 0:
            return sympy.Integer(0)
        if base.is_Integer and divisor.is_Integer:
            return sympy.Integer(int(base) // int(divisor))
        if isinstance(base, FloorDiv):
            return FloorDiv(base.args[0], base.args[1] * divisor)
        # (a*d + b) // d == a + b // d when every term of the sum is a multiple of d, except b
        if base.is_Add:
            multiples = [t for t in base.args if _divides(divisor, t)]
            if multiples:
                rest = [t for t in base.args if not _divides(divisor, t)]
                quotient = sympy.Add(*[t / divisor for t in multiples])
                if not rest:
                    return quotient
                return quotient + FloorDiv(sympy.Add(*rest), divisor)
        if _divides(divisor, base):
            return base / divisor
        return None


class ModularIndexing(sympy.Function):
    """(base // divisor) % modulus: in [0, modulus) whatever base's sign (Python's floor semantics)."""
    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, base, divisor, modulus):
        if base == 0 or modulus == 1:
            return sympy.Integer(0)
        if base.is_Integer and divisor.is_Integer and modulus.is_Integer:
            return sympy.Integer((int(base) // int(divisor)) % int(modulus))
        if base.is_Add:
            kept = [t for t in base.args if not _divides(divisor * modulus, t)]
            if len(kept) != len(base.args):
                return ModularIndexing(sympy.Add(*kept), divisor, modulus)
        if divisor != 1 and _divides(divisor, base) and base.is_Mul:
            return ModularIndexing(base / divisor, 1, modulus)
        return None


def _divides(divisor, term) -> bool:
    """Structural check (no simplify: it dominates compile time): term / divisor is a monomial with an
    integer coefficient and no negative powers."""
    if divisor == 1:
        return True
    quotient = term / divisor
    if quotient.is_Integer:
        return True
    if quotient.is_Add:
        return False
    coeff, rest = quotient.as_coeff_Mul()
    if not coeff.is_Integer:
        return False
    return all(not (f.is_Pow and f.exp.is_negative) for f in sympy.Mul.make_args(rest))


_SIZE_SYMBOLS: dict = {}    # expr -> its size symbols: every probe kernel of fusion asks for every index


def free_size_symbols(expr) -> set[sympy.Symbol]:
    """The size symbols (not index variables) an expression depends on."""
    expr = sympy.sympify(expr)
    found = _SIZE_SYMBOLS.get(expr)
    if found is None:
        if len(_SIZE_SYMBOLS) >= 50_000:
            _SIZE_SYMBOLS.clear()
        found = _SIZE_SYMBOLS[expr] = frozenset(
            s for s in expr.free_symbols if not (s.name[0] in "xr" and s.name[1:].isdigit()))
    return set(found)


def linear_index(offset, index, stride) -> sympy.Expr:
    """`offset + sum(index[d] * stride[d])` as one sympy `Add`: summing term by term builds (and flattens)
    a new `Add` per dimension, which was a tenth of lowering and fusion on ResNet-50 training."""
    key = (offset, tuple(index), tuple(stride))
    try:
        return _linear_index(*key)
    except TypeError:     # an unhashable index entry: build it unmemoised
        return _build_linear_index(*key)


@functools.lru_cache(maxsize=1 << 16)
def _linear_index(offset, index: tuple, stride: tuple) -> sympy.Expr:
    # memoised: a load's address is asked for again and again with the same symbols (each inlining probe
    # of lowering, `expr_stats`, evaluates a whole chain of loaders at `_i0, _i1, ...`; fusion's probe
    # kernels ask their members at `x0, x1, ...`). sympy's own cache still hashes and rebuilds every
    # product (~30 us a call), a new sum costs ~0.6 ms; the expression is immutable, so sharing it is safe.
    return _build_linear_index(offset, index, stride)


def _build_linear_index(offset, index, stride) -> sympy.Expr:
    return sympy.Add(offset, *[i * s for i, s in zip(index, stride) if not (_is_zero(i) or _is_zero(s))])


def _is_zero(x) -> bool:
    """`x == 0` without sympy's comparison (which sympifies the 0 each time); sympy's zero is a singleton."""
    return x is sympy.S.Zero or (type(x) is int and x == 0)


_EQUAL: dict = {}     # (x, y) -> whether the expressions are equal once expanded


def sizes_equal(x, y) -> bool:
    """`expand(x - y) == 0` for two sizes or strides, memoised (fusion's probes and buffer reuse compare
    the same sizes again and again; structurally equal ones need no sympy at all)."""
    if x is y:
        return True
    key = (x, y)
    found = _EQUAL.get(key)
    if found is None:
        if len(_EQUAL) >= 50_000:
            _EQUAL.clear()
        found = _EQUAL[key] = sympy.expand(sympy.sympify(x) - sympy.sympify(y)) == 0
    return found

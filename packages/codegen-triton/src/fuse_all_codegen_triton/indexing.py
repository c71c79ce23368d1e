"""Index expressions: printing them as Triton code, deriving x0../r0.. from the flat block index, and
choosing int32 or int64 index arithmetic.

int32 indexing is measurably faster (cheaper address math, fewer registers), so it is used whenever every
index value a kernel computes stays below 2**31. Bounds are computed symbolically; for symbolic sizes the
decision is made from the size hints at render time and re-checked at launch by a guard (a Python
expression over the size arguments) that routes to an int64 variant when it fails.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import sympy

from fuse_all_ir.host import py_index
from fuse_all_ir.sympy_functions import SymbolicPrinter, UnsupportedSymbolic, kind_of
from fuse_all_ir.program import IndexValue, Kernel, Load, Store
from fuse_all_ir.symbolic import rvar, size_hint, xvar

# Lanes past the end of the last block compute indices up to one block beyond the valid range (they are
# masked, but must not make valid lanes overflow), hence the headroom.
INT32_LIMIT = 2**31 - 2**20
DEFAULT_SIZE_HINT = 1024   # the size a symbol without a hint is assumed to have (index width, configs)


def _f64(text: str) -> str:
    return f"tl.cast({text}, tl.float64)"


def _nonnegative(expr, *divisors) -> bool:
    """Whether Triton's truncating `//` and `%` equal Python's floor ones here: a provably non-negative
    numerator and positive divisors. The IR's FloorDiv/ModularIndexing are no exception: a pad's shifted
    index can make their numerator negative (fuse_all_ir.indexing shifts it non-negative wherever the
    ranges allow)."""
    return bool(expr.args[0].is_nonnegative) and all(bool(d.is_positive) for d in divisors)


def _floordiv(p, e, a):
    if _nonnegative(e, e.args[1]):
        return f"({p.operand(e.args[0], a[0])} // {p.operand(e.args[1], a[1])})"
    return f"fa.floordiv_int({a[0]}, {a[1]})"


def _modular_indexing(p, e, a):
    base, div, mod = (p.operand(x, t) for x, t in zip(e.args, a))
    if _nonnegative(e, e.args[1], e.args[2]):
        return f"(({base} // {div}) % {mod})" if e.args[1] != 1 else f"({base} % {mod})"
    return f"fa.remainder_int(fa.floordiv_int({a[0]}, {a[1]}), {a[2]})"


def _mod(p, e, a):
    if _nonnegative(e, e.args[1]):
        return f"({p.operand(e.args[0], a[0])} % {p.operand(e.args[1], a[1])})"
    return f"fa.remainder_int({a[0]}, {a[1]})"


def _extreme(fn):
    def rule(p, e, a):
        args = [_f64(t) for t in a] if kind_of(e) == "float" else a
        return functools.reduce(lambda x, y: f"{fn}({x}, {y})", args)
    return rule


def _pow_natural(p, e, a):
    if e.args[1].is_Integer and 0 < int(e.args[1]) <= 8:
        return "(" + " * ".join([p.operand(e.args[0], a[0])] * int(e.args[1])) + ")"
    return f"fa.pow_int({a[0]}, {a[1]})"


def _binary(op):
    return lambda p, e, a: f"({p.operand(e.args[0], a[0])} {op} {p.operand(e.args[1], a[1])})"


_OPAQUE = {"sqrt": "tl.sqrt", "cos": "tl.cos", "sin": "tl.sin", "exp": "tl.exp", "log": "tl.log",
           "log2": "tl.log2", "cosh": "libdevice.cosh", "sinh": "libdevice.sinh", "tan": "libdevice.tan",
           "tanh": "libdevice.tanh", "asin": "libdevice.asin", "acos": "libdevice.acos",
           "atan": "libdevice.atan", "asinh": "libdevice.asinh"}

_RULES = {
    "floordiv": _floordiv,
    "ceildiv": lambda p, e, a: f"(-fa.floordiv_int(-({a[0]}), {a[1]}))",
    "modular_indexing": _modular_indexing,
    "mod": _mod,
    "int_truediv": lambda p, e, a: f"({_f64(a[0])} / {_f64(a[1])})",
    "float_truediv": lambda p, e, a: f"({_f64(a[0])} / {_f64(a[1])})",
    "max": _extreme("tl.maximum"),
    "min": _extreme("tl.minimum"),
    "pow_natural": _pow_natural,
    "float_pow": lambda p, e, a: f"libdevice.pow({_f64(a[0])}, {_f64(a[1])})",
    "trunc_to_int": lambda p, e, a: f"tl.cast({a[0]}, tl.int64)",
    "trunc_to_float": lambda p, e, a: f"libdevice.trunc({_f64(a[0])})",
    "round_to_int": lambda p, e, a: f"tl.cast(libdevice.nearbyint({_f64(a[0])}), tl.int64)",   # ties to even
    "floor_to_int": lambda p, e, a: f"tl.cast(tl.floor({_f64(a[0])}), tl.int64)",
    "ceil_to_int": lambda p, e, a: f"tl.cast(tl.ceil({_f64(a[0])}), tl.int64)",
    "to_float": lambda p, e, a: _f64(a[0]),
    "identity": lambda p, e, a: f"({a[0]})",
    "abs": lambda p, e, a: f"tl.abs({a[0]})",
    "where": lambda p, e, a: f"tl.where({a[0]}, {a[1]}, {a[2]})",
    "lshift": _binary("<<"), "rshift": _binary(">>"),
    "bitwise_and": _binary("&"), "bitwise_or": _binary("|"), "bitwise_xor": _binary("^"),
    **{f"opaque_{name}": (lambda p, e, a, _fn=fn: f"{_fn}({_f64(a[0])})") for name, fn in _OPAQUE.items()},
}


class TritonIndexPrinter(SymbolicPrinter):
    """sympy -> Triton: one rule per function of the IR's shared list. Integer `//` and `%` in Triton
    truncate (C), so they are used only where both operands are provably non-negative (where they equal
    Python's); elsewhere `fa.floordiv_int`/`fa.remainder_int`. Float values are float64 (`tl.cast`).

    Every operand of // and % that is not a symbol or an integer is parenthesised: `//` and `%` bind
    tighter than `+` and `*` is left-associative with them, so ``FloorDiv(3072*x0 + x1, 393216)`` must print
    as ``((3072*x0 + x1) // 393216)``, never ``(3072*x0 + x1 // 393216)`` (that wrong reading made BERT at
    32x128 load far out of bounds: "operation not supported on global/shared address space")."""
    language = "Triton"
    RULES = _RULES

    def operand(self, expr, text: str) -> str:
        if expr.is_Symbol or (expr.is_Integer and expr >= 0) or (text.startswith("(") and _balanced_outer(text)):
            return text
        return f"({text})"

    def _operand(self, expr) -> str:
        return self.operand(expr, self._print(expr))

    def exact_div(self, num, den):
        return f"(({num}) // ({den}))"

    def true_div(self, num, den):
        return f"({_f64(num)} / {_f64(den)})"

    def float_literal(self, value):
        if float(np.float32(value)) == value or not math.isfinite(value):
            return repr(float(value))
        return f"tl.full([1], {float(value)!r}, tl.float64)"   # a Python float literal is float32 in Triton

    def float_pow(self, base, exp):
        return f"libdevice.pow({_f64(base)}, {_f64(exp)})"

    AND, OR = " & ", " | "

    def logic_operand(self, expr):
        return self._operand(expr)

    def logic_not(self, operand):
        return f"({operand} == 0)"


def _balanced_outer(text: str) -> bool:
    """Whether `text` is one parenthesised group, "(...)" (not "(a) + (b)")."""
    depth = 0
    for i, c in enumerate(text):
        depth += c == "("
        depth -= c == ")"
        if depth == 0 and i < len(text) - 1:
            return False
    return depth == 0


_PRINTER = TritonIndexPrinter()


def triton_index(expr, value: bool = False) -> str:
    """A symbolic expression as Triton. Addresses and sizes must be integers; `value=True` (an IndexValue:
    a symbolic scalar such as `1 / n`) also takes float ones."""
    return _triton_index(sympy.sympify(expr), bool(value))


@functools.lru_cache(maxsize=1 << 16)   # a kernel prints the same indices (and masks) many times
def _triton_index(expr, value: bool) -> str:
    if not value and kind_of(expr) != "int":
        raise UnsupportedSymbolic(f"index expression {expr} is not integer arithmetic")
    return _PRINTER.doprint(expr)


def triton_expr_type(expr) -> str:
    """The IR dtype `triton_index(expr)` computes in when it is not index arithmetic: float64 or bool."""
    return {"int": "int64", "float": "float64", "bool": "bool"}[kind_of(sympy.sympify(expr))]


def is_index_var(sym) -> bool:
    return sym.name[:1] in ("x", "r") and sym.name[1:].isdigit()


def families(expr) -> frozenset:
    """Which index families ("x", "r") an expression depends on."""
    return frozenset(name[0] for name in symbol_names(expr) if name[:1] in ("x", "r") and name[1:].isdigit())


def symbol_names(expr) -> frozenset:
    """The names of an expression's free symbols."""
    return _symbol_names(sympy.sympify(expr))


@functools.lru_cache(maxsize=1 << 16)   # the renderer asks for every load's and store's index several times
def _symbol_names(expr) -> frozenset:
    return frozenset(s.name for s in expr.free_symbols)


def derive_index_vars(family: str, sizes, used: set) -> list[tuple[str, str]]:
    """(name, Triton expression) for each used x_i / r_i of a row-major space of `sizes`, from the flat
    ``xindex`` / ``rindex``."""
    flat = f"{family}index"
    lines = []
    n = len(sizes)
    for i in range(n):
        name = f"{family}{i}"
        if name not in used:
            continue
        stride = sympy.Mul(*sizes[i + 1:]) if i + 1 < n else sympy.Integer(1)
        # operands bracketed: `xindex // s1*s2` would read as `(xindex // s1) * s2`
        expr = flat if stride == 1 else f"{flat} // {_PRINTER._operand(sympy.sympify(stride))}"
        if i > 0:  # the outermost one needs no modulo: flat < numel
            size = _PRINTER._operand(sympy.sympify(sizes[i]))
            expr = f"{expr} % {size}" if stride == 1 else f"({expr}) % {size}"
        lines.append((name, expr))
    return lines


class Unbounded(Exception):
    pass


def _abs_bound(expr, var_max: dict, seen: list):
    """An upper bound of |expr|; appends the bounds of the intermediates Triton computes to `seen`."""
    if expr.is_Integer:
        return abs(expr)
    if expr.is_Symbol:
        return var_max.get(expr, expr)
    args = [_abs_bound(a, var_max, seen) for a in expr.args]
    name = type(expr).__name__
    if expr.is_Add:
        out = sympy.Add(*args)
    elif expr.is_Mul:
        out = sympy.Mul(*args)
    elif name == "FloorDiv":
        # |a // b| <= ceil(|a| / |b|): a split row's `802816*(r0 // 12544)` stays in int32 range
        divisor = expr.args[1]
        out = -(-args[0] // abs(divisor)) if divisor.is_Integer and divisor != 0 and args[0].is_number else args[0]
    elif name in ("ModularIndexing", "Mod"):
        out = args[-1]
    elif expr.is_Pow and expr.args[1].is_Integer and int(expr.args[1]) > 0:
        out = args[0] ** int(expr.args[1])
    else:
        raise Unbounded(str(expr))
    seen.extend(args)
    return out


def index_bounds(kernel: Kernel) -> list:
    """Bounds of every integer the kernel's index arithmetic computes (sympy, possibly symbolic)."""
    var_max = {xvar(i): n - 1 for i, n in enumerate(kernel.outer)}
    var_max.update({rvar(i): n - 1 for i, n in enumerate(kernel.reduction)})
    exprs = [sympy.Mul(*kernel.outer), sympy.Mul(*kernel.reduction), *kernel.size_symbols]
    for st in kernel.statements():
        if isinstance(st, (Load, Store)):
            exprs.append(st.index)
        elif isinstance(st, IndexValue):
            expr = sympy.sympify(st.expr)
            # a comparison (a chunk's row bound) computes its two sides
            exprs += list(expr.args) if isinstance(expr, sympy.core.relational.Relational) else [expr]
    ranges = tuple(var_max.items())
    unique: dict = {}     # insertion-ordered set
    for e in exprs:
        unique.update(dict.fromkeys(_expr_bounds(sympy.sympify(e), ranges)))
    return list(unique)


@functools.lru_cache(maxsize=1 << 14)
def _expr_bounds(expr, ranges: tuple) -> tuple:
    """The expanded bounds of `expr`'s intermediates, then of `expr`, with the index variables in `ranges`
    ((var, max) pairs). Memoised: the kernels of a graph repeat their indices and loop ranges (ResNet's
    blocks, BERT's layers), and expanding every bound was a third of rendering a kernel."""
    seen: list = []
    seen.append(_abs_bound(sympy.expand(expr), dict(ranges), seen))
    return tuple(sympy.expand(b) for b in seen)


def choose_index_dtype(kernel: Kernel, hints: dict) -> tuple[str, str | None]:
    """("int32" | "int64", guard): guard is None when the choice holds for every size, otherwise a Python
    expression over the size arguments that is True when the int32 variant is safe."""
    try:
        bounds = index_bounds(kernel)
    except Unbounded:
        return "int64", None
    concrete = [int(b) for b in bounds if b.is_number]
    symbolic = [b for b in bounds if not b.is_number]
    if concrete and max(concrete) >= INT32_LIMIT:
        return "int64", None
    if not symbolic:
        return "int32", None
    if any(size_hint(b, hints, DEFAULT_SIZE_HINT) >= INT32_LIMIT for b in symbolic):
        return "int64", None
    guard = " and ".join(f"{py_index(b)} < {INT32_LIMIT}" for b in _dominant(symbolic))
    return "int32", guard


def _dominant(bounds: list) -> list:
    """Drop bounds that another bound dominates term by term (keeps the launch guard short)."""
    keep = []
    for b in bounds:
        if any(_le(b, k) for k in keep):
            continue
        keep = [k for k in keep if not _le(k, b)] + [b]
    return keep


def _le(a, b) -> bool:
    """a <= b for all positive sizes, by a cheap sufficient test: b - a is a polynomial with no negative
    coefficient once every size is written as (1 + t), t >= 0."""
    diff = sympy.expand(b - a)
    if diff.is_number:
        return diff >= 0
    shifted = sympy.expand(diff.subs({s: s + 1 for s in diff.free_symbols}, simultaneous=True))
    if shifted.is_number:   # FloorDiv(s**2, s) folds to s once s + 1 > 0 is known (fuzz seed 132 #457)
        return bool(shifted >= 0)
    try:
        return all(c >= 0 for c in sympy.Poly(shifted, *shifted.free_symbols).coeffs())
    except (sympy.PolynomialError, sympy.polys.polyerrors.GeneratorsError):
        return False


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 2 ** math.ceil(math.log2(n))


def stride_along(expr, var) -> int | None:
    """The constant step of `expr` when `var` grows by one, or None (non-affine or symbolic)."""
    d = sympy.diff(sympy.sympify(expr), var)
    return int(d) if d.is_Integer else None

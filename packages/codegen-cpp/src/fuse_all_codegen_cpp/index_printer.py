"""sympy -> C++: index arithmetic and symbolic scalars, one rule per function of the IR's shared list
(`fuse_all_ir.sympy_functions`).

Integers are int64_t (index variables, size symbols and literals), so products and sums are 64-bit; float
values (IntTrueDiv, ToFloat, ...) are double, as Python computes them. Division and remainder follow
Python (floor) unless both operands are provably non-negative, where C's `/` and `%` agree and vectorise;
that holds for the IR's own FloorDiv/ModularIndexing only where sympy proves their numerator non-negative.
"""
from __future__ import annotations

import functools
import re

import sympy

from fuse_all_ir.sympy_functions import FUNCTIONS, SymbolicPrinter, UnsupportedSymbolic, kind_of


def c_name(name: str) -> str:
    """An identifier safe in C++ (IR names may be C++ keywords like `and`, or contain dots)."""
    return re.sub(r"\W", "_", name)


def _nonnegative(expr, *divisors) -> bool:
    """Whether C's truncating `/` and `%` equal Python's floor ones here: a provably non-negative numerator
    and positive divisors. The IR's FloorDiv/ModularIndexing are no exception: a pad's shifted index can
    make their numerator negative (fuse_all_ir.indexing shifts it non-negative wherever the ranges allow)."""
    return bool(expr.args[0].is_nonnegative) and all(bool(d.is_positive) for d in divisors)


def _i64(text: str) -> str:
    return f"(int64_t)({text})"


def _f64(text: str) -> str:
    return f"(double)({text})"


def _floordiv(p, e, a):
    if _nonnegative(e, e.args[1]):
        return f"(({a[0]}) / ({a[1]}))"
    return f"fa_floordiv<int64_t>({_i64(a[0])}, {_i64(a[1])})"


def _modular_indexing(p, e, a):
    if _nonnegative(e, e.args[1], e.args[2]):
        return f"((({a[0]}) / ({a[1]})) % ({a[2]}))"
    return f"fa_remainder<int64_t>(fa_floordiv<int64_t>({_i64(a[0])}, {_i64(a[1])}), {_i64(a[2])})"


def _mod(p, e, a):
    if _nonnegative(e, e.args[1]):
        return f"(({a[0]}) % ({a[1]}))"
    return f"fa_remainder<int64_t>({_i64(a[0])}, {_i64(a[1])})"


def _extreme(cmp):
    def rule(p, e, a):
        # a double when any argument is (Python's max(2, 2.5) is 2.5; max(3, 2.5) is 3, the same value)
        t = "double" if kind_of(e) == "float" else "int64_t"
        return functools.reduce(lambda x, y: f"fa_sym_{cmp}<{t}>({x}, {y})", a)
    return rule


def _abs(p, e, a):
    if kind_of(e) == "float":
        return f"__builtin_fabs({_f64(a[0])})"
    return f"fa_sym_max<int64_t>({a[0]}, -({a[0]}))"


def _pow_natural(p, e, a):
    if e.args[1].is_Integer and 0 < int(e.args[1]) <= 8:
        return "(" + " * ".join([f"({a[0]})"] * int(e.args[1])) + ")"
    return f"fa_ipow<int64_t>({_i64(a[0])}, {_i64(a[1])})"


def _libm(fn):
    return lambda p, e, a: f"__builtin_{fn}({_f64(a[0])})"


_RULES = {
    "floordiv": _floordiv,
    "ceildiv": lambda p, e, a: f"(-fa_floordiv<int64_t>(-{_i64(a[0])}, {_i64(a[1])}))",
    "modular_indexing": _modular_indexing,
    "mod": _mod,
    "int_truediv": lambda p, e, a: f"({_f64(a[0])} / {_f64(a[1])})",
    "float_truediv": lambda p, e, a: f"({_f64(a[0])} / {_f64(a[1])})",
    "max": _extreme("max"),
    "min": _extreme("min"),
    "pow_natural": _pow_natural,
    "float_pow": lambda p, e, a: f"__builtin_pow({_f64(a[0])}, {_f64(a[1])})",
    "trunc_to_int": lambda p, e, a: _i64(a[0]),
    "trunc_to_float": _libm("trunc"),
    "round_to_int": lambda p, e, a: _i64(f"__builtin_nearbyint({_f64(a[0])})"),   # ties to even
    "floor_to_int": lambda p, e, a: _i64(f"__builtin_floor({_f64(a[0])})"),
    "ceil_to_int": lambda p, e, a: _i64(f"__builtin_ceil({_f64(a[0])})"),
    "to_float": lambda p, e, a: _f64(a[0]),
    "identity": lambda p, e, a: f"({a[0]})",
    "abs": _abs,
    "where": lambda p, e, a: f"(({a[0]}) ? ({a[1]}) : ({a[2]}))",
    "lshift": lambda p, e, a: f"fa_shl<int64_t>({_i64(a[0])}, {_i64(a[1])})",
    "rshift": lambda p, e, a: f"fa_shr<int64_t>({_i64(a[0])}, {_i64(a[1])})",
    "bitwise_and": lambda p, e, a: f"(({a[0]}) & ({a[1]}))",
    "bitwise_or": lambda p, e, a: f"(({a[0]}) | ({a[1]}))",
    "bitwise_xor": lambda p, e, a: f"(({a[0]}) ^ ({a[1]}))",
    **{name: _libm(name.removeprefix("opaque_")) for name in FUNCTIONS if name.startswith("opaque_")},
}

class CppIndexPrinter(SymbolicPrinter):
    language = "C++"
    RULES = _RULES

    def _print_Symbol(self, expr):
        return c_name(expr.name)

    def _print_Integer(self, expr):
        v = int(expr)
        return f"{v}LL" if abs(v) >= 2**31 else str(v)

    def exact_div(self, num, den):
        return f"(({num}) / ({den}))"

    def true_div(self, num, den):
        return f"({_f64(num)} / {_f64(den)})"

    def float_literal(self, value):
        return repr(float(value))

    def float_pow(self, base, exp):
        return f"__builtin_pow({_f64(base)}, {_f64(exp)})"

    def bool_literal(self, value):
        return "true" if value else "false"

    AND, OR = " && ", " || "

    def logic_not(self, operand):
        return f"(!{operand})"


_PRINTER = CppIndexPrinter()


def cpp_index(expr, value: bool = False) -> str:
    """A symbolic expression as C++ (int64_t / double arithmetic). Addresses, loop bounds and sizes must be
    integers; `value=True` (an IndexValue: a symbolic scalar such as `1 / n`) also takes float ones."""
    return _cpp_index(sympy.sympify(expr), bool(value))


@functools.lru_cache(maxsize=1 << 16)   # a kernel prints the same indices (and masks) many times
def _cpp_index(expr, value: bool) -> str:
    if not value and kind_of(expr) != "int":
        raise UnsupportedSymbolic(f"index expression {expr} is not integer arithmetic")
    return _PRINTER.doprint(expr)


def cpp_expr_type(expr) -> str:
    """The C++ type `cpp_index(expr)` computes in: the IR dtype int64, float64 or bool."""
    return {"int": "int64", "float": "float64", "bool": "bool"}[kind_of(sympy.sympify(expr))]

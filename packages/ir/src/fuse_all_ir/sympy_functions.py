"""Every sympy function a symbolic size or scalar can contain, with its semantics: ONE list that each printer
(host Python here, C++ and Triton in their codegens) implements, so none prints a function by name.

torch builds sizes and SymInt/SymFloat values from `torch.utils._sympy.functions` (FloorDiv, IntTrueDiv,
Max, ToFloat, ...); sympy's own Max/Min/Mod/floor/ceiling/Abs can appear after simplification; the IR adds
its own FloorDiv/ModularIndexing for index arithmetic. A class missing in the running torch is skipped.

`evaluate` is the reference semantics on Python numbers (what eager computes: Python's `//` and `%` floor,
true division is float64, RoundToInt rounds half to even). `in_kernels` says whether kernels compute it (the
C++ and Triton printers must implement every such function); the others exist only in host programs, and a
lowering that would put one into a kernel runs that op in ATen instead.

A printer meeting a function that is not here raises `UnsupportedSymbolic` while compiling (the graph then
runs in ATen), never prints a name the generated program cannot resolve.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import sympy
from sympy.core.function import Application
from sympy.logic.boolalg import And, BooleanAtom, Not, Or

from . import symbolic


class UnsupportedSymbolic(NotImplementedError):
    """A symbolic expression a printer cannot express; raised at compile time (the graph runs in ATen)."""


@dataclass(frozen=True)
class SymbolicFunction:
    name: str                 # the key printers' rule tables use
    classes: tuple            # the sympy classes it covers
    result: str               # "int" | "float" | "bool" | "same" (the promoted kind of the value arguments)
    evaluate: Callable        # reference semantics on Python numbers
    in_kernels: bool = True
    doc: str = ""


def _floordiv(a, b):
    return a // b


def _round_half_even(x):
    return int(round(x))


_OPAQUE_UNARY = ("sqrt", "cos", "cosh", "sin", "sinh", "tan", "tanh", "asin", "acos", "atan", "exp", "log",
                 "asinh", "log2")


def _torch_classes(*names) -> tuple:
    """torch's classes by name, skipping those this torch version lacks."""
    try:
        import torch.utils._sympy.functions as tf
    except ImportError:  # pragma: no cover - torch always has it in supported versions
        return ()
    return tuple(getattr(tf, n) for n in names if hasattr(tf, n))


def _non_overlapping_and_dense(*args):
    from torch.fx.experimental.symbolic_shapes import eval_is_non_overlapping_and_dense
    n = len(args) // 2
    return int(eval_is_non_overlapping_and_dense(list(args[:n]), list(args[n:])))


def _build() -> list[SymbolicFunction]:
    f = SymbolicFunction
    fns = [
        f("floordiv", _torch_classes("FloorDiv", "CleanDiv") + (symbolic.FloorDiv,), "int", _floordiv,
          doc="a // b, rounding toward -inf (CleanDiv: the same, known exact)"),
        f("ceildiv", _torch_classes("CeilDiv"), "int", lambda a, b: -(-a // b), doc="ceil(a / b)"),
        f("modular_indexing", _torch_classes("ModularIndexing") + (symbolic.ModularIndexing,), "int",
          lambda a, b, c: (a // b) % c, doc="(a // b) % c"),
        f("mod", _torch_classes("PythonMod", "Mod") + (sympy.Mod,), "int", lambda a, b: a % b,
          doc="a % b with the divisor's sign (Python); torch's Mod is the same on its domain a >= 0, b > 0"),
        f("int_truediv", _torch_classes("IntTrueDiv"), "float", lambda a, b: a / b,
          doc="int / int -> float64 (Python true division)"),
        f("float_truediv", _torch_classes("FloatTrueDiv"), "float", lambda a, b: float(a) / float(b),
          doc="float / float"),
        f("max", _torch_classes("Max") + (sympy.Max,), "same", max, doc="largest argument"),
        f("min", _torch_classes("Min") + (sympy.Min,), "same", min, doc="smallest argument"),
        f("pow_natural", _torch_classes("PowByNatural"), "int", lambda a, b: a ** b, doc="a ** b, b >= 0"),
        f("float_pow", _torch_classes("FloatPow"), "float", lambda a, b: float(a) ** float(b),
          doc="float ** float"),
        f("trunc_to_int", _torch_classes("TruncToInt"), "int", lambda x: int(math.trunc(x)),
          doc="toward zero, to int"),
        f("trunc_to_float", _torch_classes("TruncToFloat"), "float", lambda x: float(math.trunc(x)),
          doc="toward zero, stays float"),
        f("round_to_int", _torch_classes("RoundToInt"), "int", _round_half_even,
          doc="round(x): nearest int, ties to even"),
        f("round_decimal", _torch_classes("RoundDecimal"), "float", lambda x, n: round(float(x), int(n)),
          in_kernels=False, doc="round(x, n) (host programs only)"),
        f("floor_to_int", _torch_classes("FloorToInt") + (sympy.floor,), "int", lambda x: math.floor(x),
          doc="floor(x) as int"),
        f("ceil_to_int", _torch_classes("CeilToInt") + (sympy.ceiling,), "int", lambda x: math.ceil(x),
          doc="ceil(x) as int"),
        f("to_float", _torch_classes("ToFloat"), "float", float, doc="int -> float64"),
        f("identity", _torch_classes("Identity"), "same", lambda x: x, doc="x"),
        f("abs", (sympy.Abs,), "same", abs, doc="|x|"),
        f("where", _torch_classes("Where"), "same", lambda c, p, q: p if c else q, doc="p if c else q"),
        f("lshift", _torch_classes("LShift"), "int", lambda a, b: a << b, doc="a << b"),
        f("rshift", _torch_classes("RShift"), "int", lambda a, b: a >> b, doc="a >> b (floor)"),
        f("bitwise_and", _torch_classes("BitwiseFn_bitwise_and"), "int", lambda a, b: a & b, doc="a & b"),
        f("bitwise_or", _torch_classes("BitwiseFn_bitwise_or"), "int", lambda a, b: a | b, doc="a | b"),
        f("bitwise_xor", _torch_classes("BitwiseFn_bitwise_xor"), "int", lambda a, b: a ^ b, doc="a ^ b"),
        f("is_non_overlapping_and_dense", _torch_classes("IsNonOverlappingAndDenseIndicator"), "int",
          _non_overlapping_and_dense, in_kernels=False,
          doc="1 if sizes/strides (first half/second half of the args) are non-overlapping and dense"),
    ]
    for name in _OPAQUE_UNARY:
        fns.append(f(f"opaque_{name}", _torch_classes(f"OpaqueUnaryFn_{name}"), "float",
                     lambda x, _m=getattr(math, name): _m(float(x)), doc=f"math.{name}(x) in float64"))
    return fns


FUNCTIONS: dict[str, SymbolicFunction] = {fn.name: fn for fn in _build()}
_BY_CLASS: dict[type, SymbolicFunction] = {cls: fn for fn in FUNCTIONS.values() for cls in fn.classes}

# The operators besides functions: arithmetic, comparisons, logic (printed by each printer's own rules).
RELATIONALS = {sympy.StrictLessThan: "<", sympy.LessThan: "<=", sympy.StrictGreaterThan: ">",
               sympy.GreaterThan: ">=", sympy.Equality: "==", sympy.Unequality: "!="}


def lookup(expr) -> SymbolicFunction | None:
    """The entry for `expr`'s function class (exact class: an unknown subclass is not assumed to match)."""
    return _BY_CLASS.get(type(expr))


def kind_of(expr) -> str:
    """"int", "float" or "bool": the type a symbolic value has at run time (what torch computes)."""
    if isinstance(expr, (bool, BooleanAtom, And, Or, Not)) or type(expr) in RELATIONALS:
        return "bool"
    if isinstance(expr, int):
        return "int"
    if isinstance(expr, float):
        return "float"
    if expr.is_Symbol:
        return "int" if expr.is_integer else "float"
    if expr.is_Number:
        return "int" if expr.is_Integer else "float"
    fn = lookup(expr)
    if fn is not None:
        if fn.result != "same":
            return fn.result
        values = expr.args[1:] if fn.name == "where" else expr.args
        return "float" if any(kind_of(a) == "float" for a in values) else "int"
    if expr.is_Pow:
        base, exp = expr.args
        return "int" if kind_of(base) == "int" and exp.is_Integer and exp >= 0 else "float"
    if expr.is_Add or expr.is_Mul:
        if any(kind_of(a) == "float" for a in expr.args):
            return "int" if expr.is_integer else "float"
        return "int"
    raise UnsupportedSymbolic(f"symbolic expression {expr} ({type(expr).__name__}) has no known meaning")


def unsupported_in_kernels(expr) -> list[str]:
    """Functions in `expr` that kernels cannot compute (unknown ones included), by class name."""
    bad = []
    for sub in sympy.preorder_traversal(sympy.sympify(expr)):
        if isinstance(sub, Application):
            fn = lookup(sub)
            if fn is None or not fn.in_kernels:
                bad.append(type(sub).__name__)
    return bad


def evaluate(expr, values: dict):
    """The value of `expr` under `values` (symbol -> Python number) with the reference semantics: the
    oracle the printers' tests compare against."""
    if isinstance(expr, (int, float, bool)):
        return expr
    if expr.is_Symbol:
        return values[expr] if expr in values else values[expr.name]
    if isinstance(expr, BooleanAtom):
        return bool(expr)
    if expr.is_Integer:
        return int(expr)
    if expr.is_Rational:
        return expr.p / expr.q
    if expr.is_Float:
        return float(expr)
    fn = lookup(expr)
    args = [evaluate(a, values) for a in expr.args]
    if fn is not None:
        return fn.evaluate(*args)
    if expr.is_Add:
        return sum(args[1:], args[0])
    if expr.is_Mul:
        num, den = sympy.fraction(expr)
        if den != 1 and kind_of(expr) == "int":   # an integer product with a rational coefficient: exact
            return evaluate(num, values) // evaluate(den, values)
        out = args[0]
        for a in args[1:]:
            out = out * a
        return out
    if expr.is_Pow:
        return args[0] ** args[1]
    if type(expr) in RELATIONALS:
        import operator
        ops = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
               "!=": operator.ne}
        return ops[RELATIONALS[type(expr)]](*args)
    if isinstance(expr, And):
        return all(args)
    if isinstance(expr, Or):
        return any(args)
    if isinstance(expr, Not):
        return not args[0]
    raise UnsupportedSymbolic(f"symbolic expression {expr} ({type(expr).__name__}) has no known meaning")


class SymbolicPrinter(sympy.printing.str.StrPrinter):
    """Base of the three printers: every function goes through `FUNCTIONS` and the printer's `RULES`
    (name -> callable(printer, expr, printed_args) -> str); anything unknown raises `UnsupportedSymbolic`.

    sympy would otherwise call torch's own `_sympystr` (FloorDiv prints `a//b`, a C++ comment) or print an
    unknown function by name (`Max(...)`: a NameError when the host program runs)."""

    printmethod = "_fuse_all_print"   # no class defines it: torch's `_sympystr` methods are bypassed
    language = "?"
    RULES: dict = {}

    def _print(self, expr, **kwargs):
        if isinstance(expr, sympy.Basic) and not isinstance(expr, (And, Or, Not)):
            fn = lookup(expr)
            if fn is not None:
                rule = self.RULES.get(fn.name)
                if rule is None:
                    raise UnsupportedSymbolic(f"{type(expr).__name__} ({fn.doc}) has no {self.language} form")
                return rule(self, expr, [self._print(a) for a in expr.args])
            if isinstance(expr, Application):
                raise UnsupportedSymbolic(f"unknown symbolic function {type(expr).__name__} in {expr}")
            if expr.is_Number and not expr.is_finite:
                raise UnsupportedSymbolic(f"non-finite value {expr} in a symbolic expression")
            if not (expr.is_Symbol or expr.is_Number or expr.is_Add or expr.is_Mul or expr.is_Pow
                    or type(expr) in RELATIONALS or isinstance(expr, BooleanAtom)):
                raise UnsupportedSymbolic(f"symbolic expression {expr} ({type(expr).__name__}) is not printable")
        return super()._print(expr, **kwargs)

    # ---- arithmetic shared by the printers; the language-specific pieces are the hooks below
    def exact_div(self, num: str, den: str) -> str:
        raise NotImplementedError

    def true_div(self, num: str, den: str) -> str:
        raise NotImplementedError

    def float_literal(self, value: float) -> str:
        return repr(float(value))

    def bool_literal(self, value: bool) -> str:
        return "True" if value else "False"

    def _factor(self, expr) -> str:
        text = self._print(expr)
        if expr.is_Symbol or (expr.is_Number and not expr.is_negative) or _one_group(text):
            return text
        return f"({text})"

    def _print_Float(self, expr):
        return self.float_literal(float(expr))

    def _print_Rational(self, expr):
        return self.true_div(str(expr.p), str(expr.q))

    def _print_Integer(self, expr):
        return str(int(expr))

    def _print_Mul(self, expr, **kwargs):
        num, den = sympy.fraction(expr)
        if den != 1:
            if kind_of(expr) == "int":   # sympy proved the quotient is an integer: exact division
                return self.exact_div(self._print(num), self._print(den))
            return self.true_div(self._print(num), self._print(den))
        coeff, rest = expr.as_coeff_Mul()
        factors = [self._factor(f) for f in sympy.Mul.make_args(rest)]
        if coeff == -1:
            return "-" + factors[0] if len(factors) == 1 else f"-({'*'.join(factors)})"
        if coeff != 1:
            factors.insert(0, self._factor(coeff))
        return "*".join(factors)

    def _print_Pow(self, expr, rational=False):
        base, exp = expr.args
        if exp.is_Integer and exp > 0:
            return "(" + "*".join([self._factor(base)] * int(exp)) + ")"
        if exp.is_Integer and exp < 0:
            return self.true_div("1", self._print(sympy.Pow(base, -exp)))
        return self.float_pow(self._print(base), self._print(exp))

    def float_pow(self, base: str, exp: str) -> str:
        raise UnsupportedSymbolic(f"{self.language} printer has no real-valued power")

    # boolean connectives: each language's spelling; `logic_operand` prints one operand
    AND, OR = " and ", " or "

    def logic_operand(self, expr) -> str:
        return self._print(expr)

    def logic_not(self, operand: str) -> str:
        return f"(not {operand})"

    def _print_And(self, expr):
        return "(" + self.AND.join(self.logic_operand(a) for a in expr.args) + ")"

    def _print_Or(self, expr):
        return "(" + self.OR.join(self.logic_operand(a) for a in expr.args) + ")"

    def _print_Not(self, expr):
        return self.logic_not(self.logic_operand(expr.args[0]))

    def _print_relational(self, expr):
        return f"({self._print(expr.lhs)} {RELATIONALS[type(expr)]} {self._print(expr.rhs)})"

    _print_StrictLessThan = _print_LessThan = _print_StrictGreaterThan = _print_relational
    _print_GreaterThan = _print_Equality = _print_Unequality = _print_relational

    def _print_BooleanTrue(self, expr):
        return self.bool_literal(True)

    def _print_BooleanFalse(self, expr):
        return self.bool_literal(False)


def _one_group(text: str) -> bool:
    """Whether `text` is one parenthesised group "(...)" (not "(a) + (b)")."""
    depth = 0
    for i, c in enumerate(text):
        depth += c == "("
        depth -= c == ")"
        if depth == 0 and i < len(text) - 1:
            return False
    return text.startswith("(") and depth == 0


def function_names() -> list[str]:
    return list(FUNCTIONS)

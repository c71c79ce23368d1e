"""The Triton rule table: IR op -> Triton expression, per dtype class of the arguments.

Values live in registers in their *compute* type: float16/bfloat16 as float32 (loads upcast, stores
downcast), everything else as itself. So float rules only ever see float32/float64 operands, which is
what `tl.math` and libdevice accept. Templates use {0}, {1}, {2} for the arguments and {T} for the
`tl.` dtype of the result.
"""
from __future__ import annotations

from fuse_all_ir.vocabulary import (DTYPE_INFO, INT_DTYPES, DTypeClass, NonFinite, compute_dtype, dtype_class,
                                    non_finite, scalar_value)

# Triton's integer ops may promote these to int32: cast results back
SMALL_INTS = tuple(d for d in INT_DTYPES if DTYPE_INFO[d].bits < 32)


def tl_type(dtype: str) -> str:
    return "tl." + {"bool": "int1"}.get(dtype, compute_dtype(dtype))


def tl_storage_type(dtype: str) -> str:
    return "tl." + {"bool": "int1"}.get(dtype, dtype)


_SAME_FOR_ALL = {
    "add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}",
    "eq": "{0} == {1}", "ne": "{0} != {1}", "lt": "{0} < {1}", "le": "{0} <= {1}", "gt": "{0} > {1}",
    "ge": "{0} >= {1}",
    "logical_not": "{0} == 0",
    "bitwise_and": "{0} & {1}", "bitwise_or": "{0} | {1}", "bitwise_xor": "{0} ^ {1}",
    "lshift": "{0} << {1}", "rshift": "{0} >> {1}", "bitwise_not": "~{0}",
    "where": "tl.where({0}, {1}, {2})",
    "isnan": "{0} != {0}",
}

_FLOAT = {
    "neg": "-{0}", "abs": "tl.abs({0})", "exp": "tl.exp({0})", "exp2": "tl.exp2({0})",
    "expm1": "libdevice.expm1({0})", "log": "tl.log({0})", "log2": "tl.log2({0})",
    "log10": "libdevice.log10({0})", "log1p": "libdevice.log1p({0})", "rsqrt": "libdevice.rsqrt({0})",
    "sin": "tl.sin({0})", "cos": "tl.cos({0})", "tan": "libdevice.tan({0})", "asin": "libdevice.asin({0})",
    "acos": "libdevice.acos({0})", "atan": "libdevice.atan({0})", "sinh": "libdevice.sinh({0})",
    "cosh": "libdevice.cosh({0})", "tanh": "libdevice.tanh({0})", "asinh": "libdevice.asinh({0})",
    "acosh": "libdevice.acosh({0})", "atanh": "libdevice.atanh({0})", "erf": "tl.erf({0})",
    "erfc": "libdevice.erfc({0})", "erfinv": "libdevice.erfinv({0})", "sigmoid": "tl.sigmoid({0})",
    "floor": "tl.floor({0})", "ceil": "tl.ceil({0})", "round": "libdevice.nearbyint({0})",
    "trunc": "libdevice.trunc({0})", "reciprocal": "1.0 / {0}", "lgamma": "libdevice.lgamma({0})",
    "sign": "({0} > 0).to({T}) - ({0} < 0).to({T})",
    "isinf": "tl.abs({0}) == float(\"inf\")", "isfinite": "tl.abs({0}) < float(\"inf\")",
    "truediv": "{0} / {1}", "floordiv": "fa.floordiv_float({0}, {1})",
    "remainder": "fa.remainder_float({0}, {1})", "fmod": "libdevice.fmod({0}, {1})", "pow": "libdevice.pow({0}, {1})",
    "maximum": "fa.maximum({0}, {1})", "minimum": "fa.minimum({0}, {1})",
    "atan2": "libdevice.atan2({0}, {1})", "copysign": "libdevice.copysign({0}, {1})",
    "hypot": "libdevice.hypot({0}, {1})",
}

_INT = {
    "neg": "-{0}", "abs": "tl.abs({0})", "sign": "({0} > 0).to({T}) - ({0} < 0).to({T})",
    "isinf": "{0} != {0}", "isfinite": "{0} == {0}",
    "floordiv": "fa.floordiv_int({0}, {1})", "remainder": "fa.remainder_int({0}, {1})", "fmod": "{0} % {1}",
    "truediv": "{0}.to(tl.float32) / {1}.to(tl.float32)",
    "maximum": "tl.maximum({0}, {1})", "minimum": "tl.minimum({0}, {1})", "pow": "fa.pow_int({0}, {1})",
    "rand": "fa.rand({0}.to(tl.int64), {1}.to(tl.int64))", "randn": "fa.randn({0}.to(tl.int64), {1}.to(tl.int64))",
}

_BOOL = {
    "maximum": "{0} | {1}", "minimum": "{0} & {1}", "isinf": "{0} != {0}", "isfinite": "{0} == {0}",
    "abs": "{0}", "sign": "{0}", "bitwise_not": "{0} == 0",
}
_UNSIGNED = {"bitwise_not": "{0} ^ 255"}   # ~x builds a -1 constant, which uint8 cannot hold

# not `&`, `|`, `^`: the interpreter keeps a comparison of 0-d values (a broadcast scalar) as a float and
# its bitwise ufuncs reject float with bool (fuzz seed 116 index 275); where and != read both as truth values
_LOGICAL = {"logical_and": "tl.where({0}, {1}, {0})", "logical_or": "tl.where({0}, {0}, {1})",
            "logical_xor": "{0} != {1}"}


def render_compute(op: str, args: list[tuple[str, str]], out_dtype: str) -> str:
    """`args` are (expression, IR dtype) pairs; returns the Triton expression of the result (in the
    result's compute type)."""
    codes = [c for c, _ in args]
    if op == "cast":
        if args[0][1] == out_dtype and compute_dtype(out_dtype) != out_dtype:
            # an unrounded float16/bfloat16 value rounded to its type (`fuse_all_ir.rounding`)
            return f"{_paren(codes[0])}.to(tl.{out_dtype}).to({tl_type(out_dtype)})"
        return render_cast(codes[0], args[0][1], out_dtype)
    if op in _LOGICAL:
        a, b = (_paren(c) if dt == "bool" else f"({c} != 0)" for c, dt in args)
        return _LOGICAL[op].format(a, b)
    if op == "where":
        cond = codes[0] if args[0][1] == "bool" else f"({codes[0]} != 0)"
        return f"tl.where({cond}, {codes[1]}, {codes[2]})"
    cls = dtype_class(args[0][1])
    if op == "sqrt" and cls is DTypeClass.FLOAT:   # tl.sqrt is the fast approximate one for float32
        return f"tl.sqrt({codes[0]})" if args[0][1] == "float64" else f"tl.sqrt_rn({codes[0]})"
    table = {DTypeClass.FLOAT: _FLOAT, DTypeClass.INT: _INT, DTypeClass.BOOL: _BOOL}[cls]
    template = (args[0][1] == "uint8" and _UNSIGNED.get(op)) or table.get(op) or _SAME_FOR_ALL.get(op)
    if template is None:
        raise NotImplementedError(f"op {op!r} on {args[0][1]} has no Triton rule")
    code = template.format(*[_paren(c) for c in codes], T=tl_type(out_dtype))
    if cls is DTypeClass.INT and out_dtype in SMALL_INTS and op not in ("eq", "ne", "lt", "le", "gt", "ge"):
        code = f"({code}).to({tl_type(out_dtype)})"
    return code


def render_cast(code: str, src: str, dst: str) -> str:
    """IR `cast`: torch's conversion semantics. Casts to float16/bfloat16 round through the narrow type
    (the value then stays in float32 registers), so an explicit `.half()` rounds like eager."""
    if src == dst:
        return code
    if dst == "bool":
        return f"{_paren(code)} != 0"
    if dst == "bfloat16" and compute_dtype(src) != "float32":
        # via float32: Triton's interpreter converts only float32/float16 to bfloat16 (the extra
        # rounding step can differ from a direct conversion only for float64 ties, and ints >= 2**24)
        code = f"{_paren(code)}.to(tl.float32)"
    if compute_dtype(dst) != dst:   # stored narrower than computed: round through the narrow type
        return f"{_paren(code)}.to(tl.{dst}).to({tl_type(dst)})"
    if compute_dtype(src) == compute_dtype(dst):
        return code
    return f"{_paren(code)}.to({tl_type(dst)})"


_NON_FINITE = {NonFinite.NAN: 'float("nan")', NonFinite.INF: 'float("inf")', NonFinite.NEG_INF: 'float("-inf")'}


def literal(value, dtype: str) -> str:
    """A Triton (Python) literal of `value` as a `dtype` value; bools are 0/1 (`tl.int1`)."""
    value = scalar_value(value, dtype)
    if isinstance(value, float):
        special = non_finite(value)
        return _NON_FINITE[special] if special is not None else repr(value)
    return str(int(value))


def _paren(code: str) -> str:
    """Parenthesise an argument unless it is a plain name or call (keeps the output readable)."""
    if code.isidentifier() or _is_call(code):
        return code
    return f"({code})"


def _is_call(code: str) -> bool:
    if not code.endswith(")") or "(" not in code:
        return False
    head = code[: code.index("(")]
    if not all(part.isidentifier() for part in head.split(".")):
        return False
    depth = 0
    for i, ch in enumerate(code):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i != len(code) - 1 and i >= len(head):
            return False
    return True

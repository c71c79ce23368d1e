"""The C++ rule table: IR dtypes -> C++ types, IR ops -> C++ expression templates, literals.

The renderer (`render.py`) is one walker over a kernel's statements; everything C++-specific about a value
lives here. A template is a `str.format` pattern over the argument expressions `{a}`, `{b}`, `{c}` and:
``{T}`` the result's C++ compute type, ``{U}`` an unsigned type at least as wide as ``{T}`` (wrapping integer
arithmetic without signed-overflow UB) and ``{f}`` the libm suffix ("f" for float, "" for double).

float16/bfloat16 values are computed in float32: loads and stores convert, a ``cast`` to them rounds (also a
cast to the value's own dtype: `fuse_all_ir.rounding` rounds each ATen op's result so).
"""
from __future__ import annotations

import functools
import math
import struct

from fuse_all_ir.vocabulary import (DType, DTypeClass, NonFinite, compute_dtype, dtype_class, non_finite,
                                    operand_dtype, reduction_identity)
from fuse_all_ir.vocabulary import bool_form as _bool_form

# the C type of each dtype's values; float16/bfloat16 are computed in float32 (`vocabulary.compute_dtype`)
# and stored as their bits
C_TYPES = {
    DType.BOOL: "bool", DType.UINT8: "uint8_t", DType.INT8: "int8_t", DType.INT16: "int16_t",
    DType.INT32: "int32_t", DType.INT64: "int64_t", DType.FLOAT32: "float", DType.FLOAT64: "double",
}
# Stored differently from how they compute. bool is stored as uint8_t (the same bytes, 0/1): GCC 12
# vectorises no `omp simd` reduction loop that loads a `bool` (a masked softmax's max and sum phases ran
# scalar, 2.4x slower), while a uint8_t load converted to bool vectorises.
_STORED_AS_BITS = {DType.FLOAT16: "uint16_t", DType.BFLOAT16: "uint16_t", DType.BOOL: "uint8_t"}
LOAD_CONVERT = {DType.FLOAT16: "fa_h2f({})", DType.BFLOAT16: "fa_b2f({})"}
STORE_CONVERT = {DType.FLOAT16: "fa_f2h({})", DType.BFLOAT16: "fa_f2b({})"}
# a float value rounded to the nearest float16/bfloat16, kept as a float (the IR's cast to them)
ROUND = {DType.FLOAT16: "fa_round_h({})", DType.BFLOAT16: "fa_round_b({})"}


def storage_type(dtype: str) -> str:
    return _STORED_AS_BITS.get(dtype) or C_TYPES[compute_dtype(dtype)]


def compute_type(dtype: str) -> str:
    return C_TYPES[compute_dtype(dtype)]


def _fields(dtype: str) -> dict:
    ctype = compute_type(dtype)
    return {"T": ctype, "U": "uint64_t" if dtype == "int64" else "uint32_t", "f": "" if ctype == "double" else "f"}


# ---- math functions: declared by the renderer, vectorised through glibc's libmvec where it has them ----
UNARY_LIBM = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin", "acos",
              "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "lgamma")
BINARY_LIBM = ("pow", "atan2", "hypot", "fmod")


@functools.lru_cache(None)
def libmvec_functions() -> frozenset[str]:
    """libm function names (float variants with the `f` suffix) that glibc's libmvec vectorises for every
    x86 ISA level GCC may pick (SSE4, AVX, AVX2, AVX-512), so `omp declare simd` on them is safe."""
    import ctypes
    import platform

    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return frozenset()
    try:
        handle = ctypes.CDLL("libmvec.so.1")._handle
        dlsym = ctypes.CDLL(None).dlsym
    except (OSError, AttributeError):
        return frozenset()
    dlsym.restype, dlsym.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]
    found = set()
    for name in UNARY_LIBM + BINARY_LIBM:   # raw dlsym: 10x cheaper than ctypes attribute lookups
        params = "v" if name in UNARY_LIBM else "vv"
        for fname, lanes in ((name + "f", (4, 8, 8, 16)), (name, (2, 4, 4, 8))):
            variants = [f"_ZGV{isa}N{n}{params}_{fname}".encode() for isa, n in zip("bcde", lanes)]
            if all(dlsym(handle, v) for v in variants):
                found.add(fname)
    return frozenset(found)


def math_declarations(vectorised: frozenset[str]) -> str:
    """libm's functions; those libmvec vectorises under our assembler names (`tanf` calls `fa_tanf`), which
    the translation unit defines through one libmvec variant each (libm_variants.py: equal inputs give
    equal results in a loop's vector body, its remainder and scalar code alike)."""
    lines = ['extern "C" {']
    for name in UNARY_LIBM + BINARY_LIBM:
        params = 1 if name in UNARY_LIBM else 2
        for fname, ctype in ((name + "f", "float"), (name, "double")):
            label = ""
            if fname in vectorised:
                lines.append("#pragma omp declare simd notinbranch")
                label = f' __asm__("fa_{fname}")'
            lines.append(f"{ctype} {fname}({', '.join([ctype] * params)}) noexcept{label};")
    lines.append("}")
    return "\n".join(lines)


# ---- op rules -----------------------------------------------------------------------------------------
_COMPARE = {"eq": "({a} == {b})", "ne": "({a} != {b})", "lt": "({a} < {b})", "le": "({a} <= {b})",
            "gt": "({a} > {b})", "ge": "({a} >= {b})"}
_LOGICAL = {"logical_and": "(({a} != 0) & ({b} != 0))", "logical_or": "(({a} != 0) | ({b} != 0))",
            "logical_xor": "(({a} != 0) != ({b} != 0))", "logical_not": "({a} == 0)",
            "where": "({a} ? {b} : {c})"}

FLOAT_RULES = {
    **_COMPARE, **_LOGICAL,
    **{op: f"{op}{{f}}({{a}})" for op in UNARY_LIBM},
    "exp": "fa_exp{f}({a})",   # float: the prelude's inline expf (no slow path); double: libm/libmvec
    "neg": "(-{a})", "abs": "__builtin_fabs{f}({a})", "sqrt": "__builtin_sqrt{f}({a})",
    "rsqrt": "(({T})1 / __builtin_sqrt{f}({a}))", "reciprocal": "(({T})1 / {a})",
    "sigmoid": "(({T})1 / (({T})1 + fa_exp{f}(-{a})))", "erfinv": "fa_erfinv({a})",
    "floor": "__builtin_floor{f}({a})", "ceil": "__builtin_ceil{f}({a})", "trunc": "__builtin_trunc{f}({a})",
    "round": "__builtin_rint{f}({a})",  # half to even, like torch.round
    "sign": "(({T})(({a} > 0) - ({a} < 0)))",  # 0 for NaN, like torch.sign on CPU
    "isnan": "({a} != {a})", "isinf": "(__builtin_fabs{f}({a}) == __builtin_inf{f}())",
    "isfinite": "(__builtin_fabs{f}({a}) < __builtin_inf{f}())",
    "add": "({a} + {b})", "sub": "({a} - {b})", "mul": "({a} * {b})", "truediv": "({a} / {b})",
    "floordiv": "fa_floordiv_float({a}, {b})", "remainder": "fa_remainder_float({a}, {b})",
    "fmod": "fmod{f}({a}, {b})",
    "pow": "pow{f}({a}, {b})", "atan2": "atan2{f}({a}, {b})", "hypot": "hypot{f}({a}, {b})",
    "maximum": "fa_max({a}, {b})", "minimum": "fa_min({a}, {b})", "copysign": "__builtin_copysign{f}({a}, {b})",
}

INT_RULES = {
    **_COMPARE, **_LOGICAL,
    "neg": "(({T})(0u - ({U}){a}))", "abs": "(({T})({a} < 0 ? 0u - ({U}){a} : ({U}){a}))",
    "sign": "(({T})(({a} > 0) - ({a} < 0)))", "bitwise_not": "(({T})~{a})",
    "isnan": "false", "isinf": "false", "isfinite": "true",
    "add": "(({T})(({U}){a} + ({U}){b}))", "sub": "(({T})(({U}){a} - ({U}){b}))",
    "mul": "(({T})(({U}){a} * ({U}){b}))",
    "floordiv": "fa_floordiv<{T}>({a}, {b})", "remainder": "fa_remainder<{T}>({a}, {b})",
    "fmod": "fa_fmod_int<{T}>({a}, {b})", "pow": "fa_ipow<{T}>({a}, {b})",
    "maximum": "({a} > {b} ? {a} : {b})", "minimum": "({a} < {b} ? {a} : {b})",
    "bitwise_and": "(({T})({a} & {b}))", "bitwise_or": "(({T})({a} | {b}))", "bitwise_xor": "(({T})({a} ^ {b}))",
    "lshift": "fa_shl<{T}>({a}, {b})", "rshift": "fa_shr<{T}>({a}, {b})",
    "floor": "{a}", "ceil": "{a}", "round": "{a}", "trunc": "{a}",
    "rand": "fa_rand((int64_t){a}, (int64_t){b})", "randn": "fa_randn((int64_t){a}, (int64_t){b})",
}

BOOL_RULES = {
    **_COMPARE, **_LOGICAL,
    "bitwise_and": "({a} & {b})", "bitwise_or": "({a} | {b})", "bitwise_xor": "({a} != {b})",
    "bitwise_not": "(!{a})", "add": "({a} | {b})", "mul": "({a} & {b})", "maximum": "({a} | {b})",
    "minimum": "({a} & {b})", "abs": "{a}", "sign": "{a}",
    "isnan": "false", "isinf": "false", "isfinite": "true",
}

RULES = {"float": FLOAT_RULES, "int": INT_RULES, "bool": BOOL_RULES}


def render_op(op: str, args: list[str], arg_dtypes: list[str], dtype: str) -> str:
    """The C++ expression of `op` on argument expressions `args` with result dtype `dtype`."""
    if op == "cast":
        if arg_dtypes[0] == dtype and dtype in ROUND:
            return ROUND[dtype].format(args[0])   # an unrounded float16/bfloat16 value rounded to its type
        return render_cast(args[0], arg_dtypes[0], dtype)
    # comparisons/logic yield bool but dispatch on their operands; `where` on its values
    operand = operand_dtype(op, arg_dtypes)
    table = RULES[dtype_class(operand)]
    if op not in table:
        raise NotImplementedError(f"op {op!r} on {operand} has no C++ rule")
    names = dict(zip("abc", args))
    return table[op].format(**names, **_fields(operand if op not in ("where",) else dtype))


def render_cast(expr: str, src: str, dst: str) -> str:
    if src == dst or (compute_dtype(src) == compute_dtype(dst) == dst):
        return expr   # same compute type (float16 -> float32 included: the value already is a float)
    if dst == "bool":
        return f"({expr} != 0)"
    ctype = compute_type(dst)
    if dtype_class(src) is DTypeClass.INT and dtype_class(dst) is DTypeClass.FLOAT:
        expr = _int_to_float(expr, compute_type(dst))
        return {"float16": f"fa_round_h({expr})", "bfloat16": f"fa_round_b({expr})"}.get(dst, expr)
    if dst == "float16":
        return f"fa_round_h((float){expr})"
    if dst == "bfloat16":
        return f"fa_round_b((float){expr})"
    if dtype_class(dst) is DTypeClass.INT and dtype_class(src) is DTypeClass.FLOAT and dst != "int64":
        # float -> narrow int through int64: defined wrap-around for values outside the target's range
        return f"(({ctype})(int64_t){expr})"
    return f"(({ctype}){expr})"


def _int_to_float(expr: str, ctype: str) -> str:
    """An integer as a float, zero as +0.0. Under -fno-trapping-math GCC (12 at least) folds
    `(float)(int64_t)x` of a float x into `truncf(x)`, which keeps the sign of zero: an int64 cast of -0.5
    read back as a float was -0.0, so `copysign(y, a.long())` flipped y's sign and `1 / a.long().float()`
    would give -inf (fuzz seed 106 index 201). The select on the integer is outside that pattern."""
    return f"({expr} == 0 ? ({ctype})0 : ({ctype}){expr})"


# ---- literals and accumulators --------------------------------------------------------------------------

def _round_float(value: float, dtype: str) -> float:
    """`value` as the nearest `dtype` number (how torch stores a Python scalar), as a Python float."""
    if dtype == "float16":
        try:
            return struct.unpack("<e", struct.pack("<e", value))[0]
        except OverflowError:
            return math.copysign(math.inf, value)
    if dtype in ("bfloat16", "float32"):
        try:
            f = struct.unpack("<f", struct.pack("<f", value))[0]
        except OverflowError:
            return math.copysign(math.inf, value)
        if dtype == "bfloat16" and math.isfinite(f):
            bits = struct.unpack("<I", struct.pack("<f", f))[0]
            bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
            f = struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]
        return f
    return value


_NON_FINITE = {NonFinite.NAN: '__builtin_nan{f}("")', NonFinite.INF: "__builtin_inf{f}()",
               NonFinite.NEG_INF: "-__builtin_inf{f}()"}


def literal(value, dtype: str) -> str:
    """A C++ literal of `dtype`'s compute type."""
    cls = dtype_class(dtype)
    if cls is DTypeClass.BOOL:
        return "true" if value else "false"
    if cls is DTypeClass.INT:
        v = int(value)
        if dtype == "int64":
            return f"(int64_t){v}LL" if -2**63 < v < 2**63 else "(int64_t)(-9223372036854775807LL - 1)"
        return f"(({compute_type(dtype)}){v})"
    f = "" if dtype == "float64" else "f"
    # in the compute type: a float16/bfloat16 constant is a float32 number, as eager's opmath scalar of
    # `x * 0.1` is (and Triton's literal); the IR rounds a constant ATen result (`full`) to its dtype
    v = _round_float(float(value), compute_dtype(dtype))
    special = non_finite(v)
    if special is not None:
        return _NON_FINITE[special].format(f=f)
    text = repr(v)
    if "e" not in text and "." not in text:
        text += ".0"
    return f"{text}{f}" if v >= 0 else f"({text}{f})"


def reduction_init(op: str, dtype: str) -> str:
    """The identity an accumulator of `op` starts from."""
    return literal(reduction_identity(op, dtype), dtype)


def reduction_update(op: str, acc: str, value: str, dtype: str) -> tuple[str, str | None]:
    """(statement updating `acc` with `value`, the OpenMP reduction identifier or None when the update
    cannot be an OpenMP reduction)."""
    op = _bool_form(op, dtype, dtype)
    if op == "sum":
        return f"{acc} = {acc} + {value};", "+"
    if op == "prod":
        return f"{acc} = {acc} * {value};", "*"
    if op == "any":
        return f"{acc} = {acc} | ({value} != 0);", "|"
    if op == "all":
        return f"{acc} = {acc} & ({value} != 0);", "&"
    if op in ("max", "min"):
        if dtype_class(dtype) is DTypeClass.FLOAT:
            return f"{acc} = fa_{op}({acc}, {value});", f"fa_{op}"
        cmp = ">" if op == "max" else "<"
        return f"{acc} = {value} {cmp} {acc} ? {value} : {acc};", op
    raise NotImplementedError(f"reduction {op!r} has no C++ accumulator update")


def combine(op: str, acc: str, part: str, dtype: str) -> str:
    """Statement merging a partial result `part` into `acc` (split reductions)."""
    return reduction_update(op, acc, part, dtype)[0]

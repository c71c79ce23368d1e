"""Lowerings of elementwise ATen ops: each builds an expression over the broadcast inputs."""
from __future__ import annotations

import math

import sympy
import torch

from . import dtypes, symbolic, sympy_functions
from .lowering import Unsupported, lowers, sym
from .nodes import E, Value, const, index_value, op

aten = torch.ops.aten


# ---- helpers ----------------------------------------------------------------------------------------

def cast(e: E, dtype: str) -> E:
    return e if e.dtype == dtype else op("cast", (e,), dtype)


def _dummy(x):
    if isinstance(x, Value):
        return torch.empty((0,) * x.ndim if x.ndim else (), dtype=dtypes.torch_dtype(x.dtype))
    if isinstance(x, sympy.Basic):
        return 1 if x.is_integer else 1.0
    return x


def _promotion_kind(x):
    """What torch's type promotion sees of an operand: a tensor's dtype and whether it is 0-dim, a python
    scalar's (or a sympy value's) type; None for anything else."""
    if isinstance(x, Value):
        return ("tensor", x.dtype, x.ndim == 0)
    if isinstance(x, sympy.Basic):
        return int if x.is_integer else float
    if type(x) in (bool, int, float):
        return type(x)
    return None


_PROMOTED: dict = {}    # operands' promotion kinds -> result dtype (an empty tensor per operand otherwise)


def result_dtype(*operands) -> str:
    """torch's elementwise type promotion (0-dim tensors and python scalars promote weakly)."""
    kinds = tuple(_promotion_kind(x) for x in operands if x is not None)
    if None in kinds:
        return _result_dtype(operands)
    found = _PROMOTED.get(kinds)
    if found is None:
        found = _PROMOTED[kinds] = _result_dtype(operands)
    return found


def _result_dtype(operands) -> str:
    items = [_dummy(x) for x in operands if x is not None]
    if len(items) == 1:
        item = items[0]
        return dtypes.dtype_name(item.dtype) if isinstance(item, torch.Tensor) else \
            ("bool" if isinstance(item, bool) else "int64" if isinstance(item, int) else "float32")
    result = torch.result_type(items[0], items[1])
    for item in items[2:]:
        result = torch.result_type(torch.empty((0,), dtype=result), item)
    return dtypes.dtype_name(result)


def out_size(g, *operands):
    val = g.current.meta.get("val") if g.current is not None else None
    if isinstance(val, torch.Tensor):
        return tuple(sym(s) for s in val.shape)
    return broadcast_sizes(*[x.size for x in operands if isinstance(x, Value)])


def broadcast_sizes(*shapes) -> tuple:
    """torch's broadcasting over sympy sizes (symbolic ones included: a lowering inside a multi-output op
    such as batch norm has no single result shape to copy)."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for d in range(ndim):
        dims = [sympy.sympify(s[d - ndim + len(s)]) for s in shapes if d - ndim + len(s) >= 0]
        not_one = [n for n in dims if n != 1]
        if any(n != not_one[0] for n in not_one[1:]):
            raise Unsupported(f"cannot broadcast sizes {', '.join(str(tuple(s)) for s in shapes)}")
        out.append(not_one[0] if not_one else sympy.Integer(1))
    return tuple(out)


def out_dtype(g, default: str) -> str:
    val = g.current.meta.get("val") if g.current is not None else None
    if isinstance(val, torch.Tensor):
        return dtypes.dtype_name(val.dtype)
    return default


def _broadcasts(n, out, hints: dict | None) -> bool:
    """Whether an operand dim of size `n` is broadcast to `out`. A symbolic size torch broadcast is 1 only
    under a guard (`s - (s + 1)//2` of a chunk is 1 for s in {2, 3}), so it is told from `out` by the
    example sizes: 1 there while `out` is not. Sizes without a hint are broadcast only when literally 1."""
    n, out = sympy.sympify(n), sympy.sympify(out)
    if n == 1 or n == out or not hints or not n.free_symbols:
        return n == 1 and out != 1
    try:
        return symbolic.size_hint(n, hints, -1) == 1 and symbolic.size_hint(out, hints, -1) != 1 \
            and all(s in hints or str(s) in hints for s in n.free_symbols | out.free_symbols)
    except (TypeError, ValueError):
        return False


def operand_loader(x, size, dtype: str, hints: dict | None = None):
    """A loader for `x` broadcast to `size`, cast to `dtype`; `hints`: the graph's example sizes."""
    if isinstance(x, Value):
        offset = len(size) - x.ndim
        broadcast = [_broadcasts(x.size[d], size[d + offset], hints) for d in range(x.ndim)]
        loader = x.loader

        def load_broadcast(index):
            inner = [sympy.Integer(0) if b else index[d + offset] for d, b in enumerate(broadcast)]
            return cast(loader(inner), dtype)
        return load_broadcast
    if isinstance(x, sympy.Basic) and not x.is_number:
        not_in_kernels = sympy_functions.unsupported_in_kernels(x)
        if not_in_kernels:
            raise Unsupported(f"symbolic scalar {x} uses {', '.join(not_in_kernels)}, which kernels don't compute")
        return lambda index: cast(index_value(x), dtype)
    value = _python_scalar(x, dtype)
    return lambda index: const(value, dtype)


def _python_scalar(x, dtype):
    if isinstance(x, sympy.Basic):
        x = int(x) if x.is_integer else float(x)
    if dtype == "bool":
        return bool(x)
    if dtypes.is_float(dtype):
        return float(x)
    if isinstance(x, float) and not math.isfinite(x):
        raise Unsupported(f"non-finite scalar {x} for {dtype}")
    return int(x)


def pointwise(g, fn, *operands, compute: str | None = None, result: str | None = None) -> Value:
    """The elementwise map `fn` over the broadcast operands, computed in `compute` dtype."""
    compute = compute or result_dtype(*operands)
    result = result or out_dtype(g, compute)
    size = out_size(g, *operands)
    loaders = [operand_loader(x, size, compute, g.size_hints) for x in operands]

    def loader(index):
        return cast(fn(*[load(index) for load in loaders]), result)
    return Value(size, result, loader)


def _float_compute(*operands) -> str:
    dtype = result_dtype(*operands)
    return dtype if dtypes.is_float(dtype) else "float32"


def unary(name: str):
    return lambda a: op(name, (a,), a.dtype)


def binary(name: str):
    return lambda a, b: op(name, (a, b), a.dtype)


# ---- unary math -------------------------------------------------------------------------------------

_FLOAT_UNARY = {
    aten.exp: "exp", aten.exp2: "exp2", aten.expm1: "expm1", aten.log: "log", aten.log2: "log2",
    aten.log10: "log10", aten.log1p: "log1p", aten.sqrt: "sqrt", aten.rsqrt: "rsqrt", aten.sin: "sin",
    aten.cos: "cos", aten.tan: "tan", aten.asin: "asin", aten.acos: "acos", aten.atan: "atan",
    aten.sinh: "sinh", aten.cosh: "cosh", aten.tanh: "tanh", aten.asinh: "asinh", aten.acosh: "acosh",
    aten.atanh: "atanh", aten.erf: "erf", aten.erfc: "erfc", aten.erfinv: "erfinv", aten.sigmoid: "sigmoid",
    aten.reciprocal: "reciprocal", aten.lgamma: "lgamma",
}
_SAME_TYPE_UNARY = {aten.neg: "neg", aten.abs: "abs", aten.sign: "sign"}
_ROUNDING = {aten.floor: "floor", aten.ceil: "ceil", aten.trunc: "trunc", aten.round: "round"}


def _register_unary():
    for target, name in _FLOAT_UNARY.items():
        lowers(target.default)(lambda g, a, _n=name: pointwise(g, unary(_n), a, compute=_float_compute(a)))
    for target, name in _SAME_TYPE_UNARY.items():
        lowers(target.default)(lambda g, a, _n=name: pointwise(g, unary(_n), a))
    for target, name in _ROUNDING.items():
        def rounding(g, a, _n=name):
            if not dtypes.is_float(a.dtype):
                return pointwise(g, lambda x: x, a)
            return pointwise(g, unary(_n), a)
        lowers(target.default)(rounding)


_register_unary()


@lowers(aten.isnan.default, aten.isinf.default)
def _isnan_isinf(g, a):
    name = "isnan" if g.current.target is aten.isnan.default else "isinf"
    if not dtypes.is_float(a.dtype):
        return pointwise(g, lambda x: const(False, "bool"), a, result="bool")
    return pointwise(g, lambda x: op(name, (x,), "bool"), a, result="bool")


@lowers(aten.logical_not.default)
def _logical_not(g, a):
    return pointwise(g, lambda x: op("logical_not", (x,), "bool"), a, compute="bool", result="bool")


@lowers(aten.bitwise_not.default)
def _bitwise_not(g, a):
    if a.dtype == "bool":
        return pointwise(g, lambda x: op("logical_not", (x,), "bool"), a)
    return pointwise(g, unary("bitwise_not"), a)


@lowers(aten.relu.default)
def _relu(g, a):
    return pointwise(g, lambda x: op("maximum", (x, const(0, x.dtype)), x.dtype), a)


@lowers(aten.gelu.default)
def _gelu(g, a, approximate="none"):
    def gelu(x):
        dt = x.dtype
        half = op("mul", (x, const(0.5, dt)), dt)
        if approximate == "tanh":
            cube = op("mul", (op("mul", (x, x), dt), x), dt)
            inner = op("mul", (const(math.sqrt(2 / math.pi), dt),
                               op("add", (x, op("mul", (cube, const(0.044715, dt)), dt)), dt)), dt)
            return op("mul", (half, op("add", (const(1.0, dt), op("tanh", (inner,), dt)), dt)), dt)
        erf = op("erf", (op("mul", (x, const(math.sqrt(0.5), dt)), dt),), dt)
        return op("mul", (half, op("add", (const(1.0, dt), erf), dt)), dt)
    return pointwise(g, gelu, a, compute=_float_compute(a))


@lowers(aten.silu.default)
def _silu(g, a):
    return pointwise(g, lambda x: op("mul", (x, op("sigmoid", (x,), x.dtype)), x.dtype), a,
                     compute=_float_compute(a))


# ---- binary -----------------------------------------------------------------------------------------

_SIMPLE_BINARY = {
    aten.mul: "mul", aten.maximum: "maximum", aten.minimum: "minimum", aten.fmod: "fmod",
    aten.remainder: "remainder", aten.bitwise_and: "bitwise_and", aten.bitwise_or: "bitwise_or",
    aten.bitwise_xor: "bitwise_xor", aten.bitwise_left_shift: "lshift", aten.bitwise_right_shift: "rshift",
    aten.copysign: "copysign", aten.hypot: "hypot",
}
_COMPARE = {aten.eq: "eq", aten.ne: "ne", aten.lt: "lt", aten.le: "le", aten.gt: "gt", aten.ge: "ge"}
_LOGICAL = {aten.logical_and: "logical_and", aten.logical_or: "logical_or", aten.logical_xor: "logical_xor"}
_BOOL_AS = {"mul": "logical_and", "bitwise_and": "logical_and", "bitwise_or": "logical_or",
            "bitwise_xor": "logical_xor", "maximum": "logical_or", "minimum": "logical_and"}


def _register_binary():
    for target, name in _SIMPLE_BINARY.items():
        def simple(g, a, b, _n=name):
            dt = result_dtype(a, b)
            if dt == "bool" and _n in _BOOL_AS:
                return pointwise(g, binary(_BOOL_AS[_n]), a, b)
            if dt == "bool":
                raise Unsupported(f"{_n} on bool")
            return pointwise(g, binary(_n), a, b)
        for overload in ("Tensor", "Scalar", "default"):
            if hasattr(target, overload):
                lowers(getattr(target, overload))(simple)
    for target, name in _COMPARE.items():
        for overload in ("Tensor", "Scalar"):
            lowers(getattr(target, overload))(
                lambda g, a, b, _n=name: pointwise(g, lambda x, y: op(_n, (x, y), "bool"), a, b, result="bool"))
    for target, name in _LOGICAL.items():
        lowers(target.default)(
            lambda g, a, b, _n=name: pointwise(g, lambda x, y: op(_n, (x, y), "bool"), a, b, compute="bool",
                                               result="bool"))


_register_binary()


@lowers(aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar)
def _add_sub(g, a, b, alpha=1):
    name = "add" if g.current.target in (aten.add.Tensor, aten.add.Scalar) else "sub"
    dt = result_dtype(a, b)
    if dt == "bool":
        if name == "sub":
            raise Unsupported("sub on bool")
        return pointwise(g, binary("logical_or"), a, b)

    def add(x, y):
        if alpha != 1:
            y = op("mul", (y, const(_python_scalar(alpha, x.dtype), x.dtype)), x.dtype)
        return op(name, (x, y), x.dtype)
    return pointwise(g, add, a, b)


@lowers(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(g, a, b, alpha=1):
    def rsub(x, y):
        if alpha != 1:
            x = op("mul", (x, const(_python_scalar(alpha, x.dtype), x.dtype)), x.dtype)
        return op("sub", (y, x), x.dtype)
    return pointwise(g, rsub, a, b)


@lowers(aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div(g, a, b, rounding_mode=None):
    dt = result_dtype(a, b)
    if rounding_mode is None:
        return pointwise(g, binary("truediv"), a, b, compute=dt if dtypes.is_float(dt) else "float32")
    if rounding_mode == "floor":
        return pointwise(g, binary("floordiv"), a, b)
    if dtypes.is_float(dt):
        # eager rounds the quotient to the tensor's dtype before truncating (matters for float16/bfloat16):
        # divide in float32 and cast explicitly, which every codegen rounds
        wide = "float64" if dt == "float64" else "float32"
        return pointwise(g, lambda x, y: op("trunc", (cast(op("truediv", (cast(x, wide), cast(y, wide)), wide),
                                                           dt),), dt), a, b)

    def trunc_div(x, y):
        quotient = op("floordiv", (x, y), dt)
        remainder = op("remainder", (x, y), dt)
        zero = const(0, dt)
        inexact = op("ne", (remainder, zero), "bool")
        signs_differ = op("ne", (op("lt", (x, zero), "bool"), op("lt", (y, zero), "bool")), "bool")
        bump = op("logical_and", (inexact, signs_differ), "bool")
        return op("where", (bump, op("add", (quotient, const(1, dt)), dt), quotient), dt)
    return pointwise(g, trunc_div, a, b)


@lowers(aten.floor_divide.default, aten.floor_divide.Scalar)
def _floor_divide(g, a, b):
    return pointwise(g, binary("floordiv"), a, b)


@lowers(aten.atan2.default)
def _atan2(g, a, b):
    return pointwise(g, binary("atan2"), a, b, compute=_float_compute(a, b))


@lowers(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar)
def _pow(g, a, b):
    if isinstance(b, (int, float)) and not isinstance(b, bool) and isinstance(a, Value):
        if b == 2:
            return pointwise(g, lambda x: op("mul", (x, x), x.dtype), a, compute=result_dtype(a, b))
        if b == 1:
            return pointwise(g, lambda x: x, a, compute=result_dtype(a, b))
        # ATen's pow_tensor_scalar special cases, the same arithmetic (GPT-2's tanh GELU has x ** 3: a
        # vector powf there was most of the kernel's time, and goes scalar for negative bases in libmvec)
        if b == 3:
            return pointwise(g, lambda x: op("mul", (op("mul", (x, x), x.dtype), x), x.dtype), a,
                             compute=result_dtype(a, b))
        if dtypes.is_float(result_dtype(a, b)):
            if b == 0.5:
                return pointwise(g, unary("sqrt"), a, compute=result_dtype(a, b))
            if b == -0.5:
                return pointwise(g, unary("rsqrt"), a, compute=result_dtype(a, b))
            if b == -1:
                return pointwise(g, unary("reciprocal"), a, compute=result_dtype(a, b))
            if b == -2:
                return pointwise(g, lambda x: op("reciprocal", (op("mul", (x, x), x.dtype),), x.dtype), a,
                                 compute=result_dtype(a, b))
    dt = result_dtype(a, b)
    if not dtypes.is_float(dt) and isinstance(b, Value):
        raise Unsupported("integer pow with tensor exponent")
    return pointwise(g, binary("pow"), a, b, compute=dt)


@lowers(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(g, cond, a, b):
    dt = out_dtype(g, result_dtype(a, b))
    size = out_size(g, cond, a, b)
    cond_load = operand_loader(cond, size, "bool", g.size_hints)
    a_load, b_load = operand_loader(a, size, dt, g.size_hints), operand_loader(b, size, dt, g.size_hints)
    return Value(size, dt, lambda i: op("where", (cond_load(i), a_load(i), b_load(i)), dt))


@lowers(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(g, x, mask, value):
    dt = x.dtype
    size = out_size(g, x, mask)
    x_load, m_load, v_load = operand_loader(x, size, dt, g.size_hints), \
        operand_loader(mask, size, "bool", g.size_hints), operand_loader(value, size, dt, g.size_hints)
    return Value(size, dt, lambda i: op("where", (m_load(i), v_load(i), x_load(i)), dt))


@lowers(aten.clamp.default, aten.clamp.Tensor, aten.clamp_min.default, aten.clamp_max.default,
        aten.clamp_min.Tensor, aten.clamp_max.Tensor)
def _clamp(g, x, lo=None, hi=None):
    if g.current.target in (aten.clamp_max.default, aten.clamp_max.Tensor):
        lo, hi = None, lo
    operands = [x] + [v for v in (lo, hi) if v is not None]
    dt = out_dtype(g, result_dtype(*operands))

    def clamp(v, *bounds):
        bounds = list(bounds)
        if lo is not None:
            v = op("maximum", (v, bounds.pop(0)), dt)
        if hi is not None:
            v = op("minimum", (v, bounds.pop(0)), dt)
        return v
    return pointwise(g, clamp, *operands, compute=dt)


@lowers(aten.hardtanh.default)
def _hardtanh(g, x, lo=-1.0, hi=1.0):
    return pointwise(g, lambda v: op("minimum", (op("maximum", (v, const(lo, v.dtype)), v.dtype),
                                                 const(hi, v.dtype)), v.dtype), x)


@lowers(aten.leaky_relu.default)
def _leaky_relu(g, x, slope=0.01):
    def leaky(v):
        dt = v.dtype
        return op("where", (op("gt", (v, const(0, dt)), "bool"), v, op("mul", (v, const(slope, dt)), dt)), dt)
    return pointwise(g, leaky, x)


# ---- copies and casts ---------------------------------------------------------------------------------

@lowers(aten._to_copy.default, aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default,
        aten.detach.default, aten.contiguous.default, aten._conj.default)
def _copy(g, x, **kwargs):
    val = g.current.meta.get("val")
    if isinstance(val, torch.Tensor) and str(val.device) != g.device and val.device.type != "meta":
        raise Unsupported(f"copy to another device ({val.device})")
    dt = out_dtype(g, x.dtype)
    if dt == x.dtype and g.current.target in (aten.alias.default, aten.detach.default):
        return x
    return Value(x.size, dt, lambda i: cast(x.loader(i), dt))


@lowers(aten.copy.default)
def _functional_copy(g, dst, src, non_blocking=False):
    size = dst.size
    load = operand_loader(src, size, dst.dtype, g.size_hints)
    return Value(size, dst.dtype, load)

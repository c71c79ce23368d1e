"""Pointwise lowerings against eager: unary/binary math, scalars, type promotion, where, casts, clamp,
activations, NaN/inf semantics. Each test compiles one graph computing a group of ops on the same inputs
(returned as a dict, so a failure names the op; `check_ops` re-checks the ops one by one when a group
fails)."""
import math

import pytest
import torch
import torch.nn.functional as F

from fuse_all_optest import check_ops, make, params

S4 = (2, 3, 6, 17)  # 4-D so channels_last applies; odd innermost size exercises vector tails
NAN, INF = math.nan, math.inf

# ---------------------------------------------------------------------------------------------- unary
# every op gets an input inside its domain: x in [-4, 4], pos in [0.1, 8], unit in (-0.95, 0.95), big in [1.05, 8]
UNARY = {
    "arith": {
        "neg": lambda x, pos, unit, big: torch.neg(x),
        "abs": lambda x, pos, unit, big: torch.abs(x),
        "reciprocal": lambda x, pos, unit, big: torch.reciprocal(pos),
        "reciprocal_neg": lambda x, pos, unit, big: torch.reciprocal(-pos),
        "sign": lambda x, pos, unit, big: torch.sign(x),
        "sqrt": lambda x, pos, unit, big: torch.sqrt(pos),
        "rsqrt": lambda x, pos, unit, big: torch.rsqrt(pos),
        "floor": lambda x, pos, unit, big: torch.floor(x),
        "ceil": lambda x, pos, unit, big: torch.ceil(x),
        "round": lambda x, pos, unit, big: torch.round(x),  # x holds exact .5s: half to even
        "trunc": lambda x, pos, unit, big: torch.trunc(x),
        "sigmoid": lambda x, pos, unit, big: torch.sigmoid(x),
    },
    "explog": {
        "exp": lambda x, pos, unit, big: torch.exp(x),
        "exp2": lambda x, pos, unit, big: torch.exp2(x),
        "expm1": lambda x, pos, unit, big: torch.expm1(x),
        "expm1_small": lambda x, pos, unit, big: torch.expm1(unit * 1e-3),
        "log": lambda x, pos, unit, big: torch.log(pos),
        "log2": lambda x, pos, unit, big: torch.log2(pos),
        "log10": lambda x, pos, unit, big: torch.log10(pos),
        "log1p": lambda x, pos, unit, big: torch.log1p(unit),
        "erf": lambda x, pos, unit, big: torch.erf(x),
        "erfc": lambda x, pos, unit, big: torch.erfc(x),
    },
    "trig": {
        "sin": lambda x, pos, unit, big: torch.sin(x),
        "cos": lambda x, pos, unit, big: torch.cos(x),
        "tan": lambda x, pos, unit, big: torch.tan(unit * 1.4),
        "asin": lambda x, pos, unit, big: torch.asin(unit),
        "acos": lambda x, pos, unit, big: torch.acos(unit),
        "atan": lambda x, pos, unit, big: torch.atan(x),
        "sinh": lambda x, pos, unit, big: torch.sinh(x),
        "cosh": lambda x, pos, unit, big: torch.cosh(x),
        "tanh": lambda x, pos, unit, big: torch.tanh(x),
        "asinh": lambda x, pos, unit, big: torch.asinh(x),
        "acosh": lambda x, pos, unit, big: torch.acosh(big),
        "atanh": lambda x, pos, unit, big: torch.atanh(unit),
    },
    "predicates": {  # x carries nan / inf / -inf here
        "isnan": lambda x, pos, unit, big: torch.isnan(x),
        "isinf": lambda x, pos, unit, big: torch.isinf(x),
        "isfinite": lambda x, pos, unit, big: torch.isfinite(x),
        "logical_not": lambda x, pos, unit, big: torch.logical_not(x),
        "logical_not_of_cmp": lambda x, pos, unit, big: torch.logical_not(x > 0),
        "abs_special": lambda x, pos, unit, big: torch.abs(x),
        "neg_special": lambda x, pos, unit, big: -x,
        "sign_special": lambda x, pos, unit, big: torch.sign(x),
        "exp_special": lambda x, pos, unit, big: torch.exp(x),
        "floor_special": lambda x, pos, unit, big: torch.floor(x),
    },
}

UNARY_CASES = ([(g, torch.float32, lay) for g in UNARY for lay in ("contiguous", "transposed", "sliced",
                                                                   "expanded", "channels_last")]
               + [(g, torch.float64, lay) for g in UNARY for lay in ("contiguous", "transposed")]
               + [(g, d, "contiguous") for g in UNARY for d in (torch.float16, torch.bfloat16)])


def _unary_inputs(group, dtype, layout):
    special = {"arith": (0.5, -0.5, 1.5, 2.5, -2.5, 3.5), "predicates": (NAN, INF, -INF, 0.0)}.get(group, ())
    return (make(S4, dtype, layout, special=special),
            make(S4, dtype, layout, low=0.1, high=8.0),
            make(S4, dtype, layout, low=-0.95, high=0.95),
            make(S4, dtype, layout, low=1.05, high=8.0))


@pytest.mark.parametrize(
    "group,dtype,layout,codegen",
    params(UNARY_CASES, triton=lambda g, d, lay: d == torch.float32 and (
        lay == "contiguous" or (lay == "transposed" and g == "arith"))))
def test_unary_float(group, dtype, layout, codegen):
    check_ops(UNARY[group], *_unary_inputs(group, dtype, layout), codegen=codegen)


INT_UNARY = {
    "neg": torch.neg, "abs": torch.abs, "sign": torch.sign, "bitwise_not": torch.bitwise_not,
    "invert_op": lambda i: ~i, "logical_not": torch.logical_not, "isnan": torch.isnan, "isinf": torch.isinf,
    "square": torch.square,
}
BOOL_UNARY = {"bitwise_not": torch.bitwise_not, "invert_op": lambda b: ~b, "logical_not": torch.logical_not,
              "isnan": torch.isnan, "abs_of_int": lambda b: torch.abs(b.int())}


@pytest.mark.parametrize("dtype,layout,codegen", params(
    [(torch.int32, "contiguous"), (torch.int32, "sliced"), (torch.int64, "transposed"),
     (torch.int64, "channels_last"), (torch.bool, "contiguous"), (torch.bool, "expanded")],
    triton=lambda d, lay: lay == "contiguous"))
def test_unary_int_bool(dtype, layout, codegen):
    x = make(S4, dtype, layout)
    check_ops(BOOL_UNARY if dtype == torch.bool else INT_UNARY, x, codegen=codegen)


# ---------------------------------------------------------------------------------------------- binary
def _tie(a, b):
    """b, with ~30% of its elements equal to a's (so eq/le/ge/maximum see ties)."""
    return torch.where(torch.rand(torch.broadcast_shapes(a.shape, b.shape)) < 0.3, a, b) \
        if a.shape == b.shape else b


FLOAT_BINARY = {
    "add": lambda a, b, d, p: torch.add(a, b),
    "add_alpha": lambda a, b, d, p: torch.add(a, b, alpha=2.5),
    "sub": lambda a, b, d, p: torch.sub(a, b),
    "sub_alpha": lambda a, b, d, p: torch.sub(a, b, alpha=-0.5),
    "rsub": lambda a, b, d, p: torch.rsub(a, b),
    "mul": lambda a, b, d, p: a * b,
    "div": lambda a, b, d, p: a / d,
    "div_floor": lambda a, b, d, p: torch.div(a, d, rounding_mode="floor"),
    "div_trunc": lambda a, b, d, p: torch.div(a, d, rounding_mode="trunc"),
    "floor_divide": lambda a, b, d, p: torch.floor_divide(a, d),
    "remainder": lambda a, b, d, p: torch.remainder(a, d),
    "fmod": lambda a, b, d, p: torch.fmod(a, d),
    "pow_tensor": lambda a, b, d, p: torch.pow(p, b),
    "pow_int_exponent_tensor": lambda a, b, d, p: torch.pow(a, torch.round(b)),
    "maximum": lambda a, b, d, p: torch.maximum(a, b),
    "minimum": lambda a, b, d, p: torch.minimum(a, b),
    "atan2": lambda a, b, d, p: torch.atan2(a, b),
    "eq": lambda a, b, d, p: a == b, "ne": lambda a, b, d, p: a != b,
    "lt": lambda a, b, d, p: a < b, "le": lambda a, b, d, p: a <= b,
    "gt": lambda a, b, d, p: a > b, "ge": lambda a, b, d, p: a >= b,
    "logical_and": lambda a, b, d, p: torch.logical_and(a > 0, b),
    "logical_or": lambda a, b, d, p: torch.logical_or(a, b < 0),
    "logical_xor": lambda a, b, d, p: torch.logical_xor(a > 1, b > 1),
}

# (a layout, b shape kind, b layout): b is full-size, a row (last dim), a "column" (size-1 dims), a
# two-sided broadcast, or a 0-d tensor
BIN_CFGS = [("contiguous", "same", "contiguous"), ("transposed", "same", "contiguous"),
            ("channels_last", "same", "transposed"), ("sliced", "row", "contiguous"),
            ("expanded", "column", "contiguous"), ("contiguous", "both", "sliced"),
            ("transposed", "0d", "contiguous")]


def _b_shape(kind):
    return {"same": S4, "row": (S4[-1],), "column": (S4[0], 1, S4[2], 1), "0d": (),
            "both": (S4[1], 1, S4[3])}[kind]


def _a_shape(kind):
    return (S4[0], 1, S4[2], S4[3]) if kind == "both" else S4


def _binary_inputs(dtype, a_layout, kind, b_layout, **kw):
    a_shape, b_shape = _a_shape(kind), _b_shape(kind)
    a_layout = a_layout if a_layout != "channels_last" or len(a_shape) == 4 else "contiguous"
    b_layout = b_layout if len(b_shape) >= 2 or b_layout in ("contiguous", "sliced") else "contiguous"
    b_layout = "contiguous" if len(b_shape) == 0 else b_layout
    a = make(a_shape, dtype, a_layout, **kw)
    b = make(b_shape, dtype, b_layout, **kw)
    if kind == "same":  # ties, keeping b's layout
        b.copy_(_tie(a, b))
    return a, b


@pytest.mark.parametrize("dtype,cfg,codegen", params(
    [(torch.float32, c) for c in BIN_CFGS] + [(torch.float64, BIN_CFGS[0]), (torch.float64, BIN_CFGS[3]),
                                              (torch.float16, BIN_CFGS[0]), (torch.bfloat16, BIN_CFGS[1])],
    triton=lambda d, c: d == torch.float32 and c in (BIN_CFGS[0], BIN_CFGS[2], BIN_CFGS[3]),
    ids=lambda d, c: f"{str(d)[6:]}-{c[0]}-{c[1]}-{c[2]}"))
def test_binary_float(dtype, cfg, codegen):
    a, b = _binary_inputs(dtype, *cfg)
    d = make(b.shape, dtype, "contiguous", nonzero=True)
    d = torch.where(torch.rand(d.shape) < 0.5, -d, d)
    p = make(a.shape, dtype, "contiguous", low=0.1, high=6.0)
    check_ops(FLOAT_BINARY, a, b, d, p, codegen=codegen)


INT_BINARY = {
    "add": lambda a, b, d, e: a + b,
    "add_alpha": lambda a, b, d, e: torch.add(a, b, alpha=3),
    "sub": lambda a, b, d, e: a - b,
    "sub_alpha": lambda a, b, d, e: torch.sub(a, b, alpha=-2),
    "mul": lambda a, b, d, e: a * b,
    "true_div": lambda a, b, d, e: a / d,
    "div_floor": lambda a, b, d, e: torch.div(a, d, rounding_mode="floor"),
    "div_trunc": lambda a, b, d, e: torch.div(a, d, rounding_mode="trunc"),
    "floor_divide": lambda a, b, d, e: a // d,
    "remainder": lambda a, b, d, e: a % d,
    "fmod": lambda a, b, d, e: torch.fmod(a, d),
    "pow": lambda a, b, d, e: torch.pow(a, e),
    "maximum": lambda a, b, d, e: torch.maximum(a, b),
    "minimum": lambda a, b, d, e: torch.minimum(a, b),
    "eq": lambda a, b, d, e: a == b, "ne": lambda a, b, d, e: a != b,
    "lt": lambda a, b, d, e: a < b, "le": lambda a, b, d, e: a <= b,
    "gt": lambda a, b, d, e: a > b, "ge": lambda a, b, d, e: a >= b,
    "logical_and": lambda a, b, d, e: torch.logical_and(a, b),
    "logical_or": lambda a, b, d, e: torch.logical_or(a, b),
    "logical_xor": lambda a, b, d, e: torch.logical_xor(a, b),
    "bitwise_and": lambda a, b, d, e: a & b,
    "bitwise_or": lambda a, b, d, e: torch.bitwise_or(a, b),
    "bitwise_xor": lambda a, b, d, e: a ^ b,
    "lshift": lambda a, b, d, e: a << e,
    "rshift": lambda a, b, d, e: a >> e,
    "bitwise_left_shift": lambda a, b, d, e: torch.bitwise_left_shift(b, e),
    "bitwise_right_shift": lambda a, b, d, e: torch.bitwise_right_shift(a * 37, e),
}


@pytest.mark.parametrize("dtype,cfg,codegen", params(
    [(torch.int32, BIN_CFGS[0]), (torch.int32, BIN_CFGS[3]), (torch.int64, BIN_CFGS[1]),
     (torch.int64, BIN_CFGS[4])],
    triton=(0, 2), ids=lambda d, c: f"{str(d)[6:]}-{c[0]}-{c[1]}-{c[2]}"))
def test_binary_int(dtype, cfg, codegen):
    a, b = _binary_inputs(dtype, *cfg)          # both in [-9, 10): negatives for floor/trunc/remainder
    d = make(b.shape, dtype, "contiguous", low=-7, high=8, nonzero=True)
    e = make(b.shape, dtype, "contiguous", low=0, high=4)   # exponents and shift amounts
    check_ops(INT_BINARY, a, b, d, e, codegen=codegen)


BOOL_BINARY = {
    "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or, "logical_xor": torch.logical_xor,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b, "ge": lambda a, b: a >= b,
    "add": lambda a, b: a + b, "mul": lambda a, b: a * b, "maximum": torch.maximum, "minimum": torch.minimum,
}


@pytest.mark.parametrize("layouts,codegen", params(
    [(("contiguous", "contiguous"),), (("transposed", "sliced"),)], triton=(0,)))
def test_binary_bool(layouts, codegen):
    a = make(S4, torch.bool, layouts[0])
    b = make(S4, torch.bool, layouts[1])
    check_ops(BOOL_BINARY, a, b, codegen=codegen)


# ---------------------------------------------------------------------------------------------- scalars
SCALAR_OPS = {
    torch.float32: {
        "add": lambda x, n, p: x + 2, "radd": lambda x, n, p: 2 + x, "sub": lambda x, n, p: x - 0.5,
        "rsub": lambda x, n, p: 1 - x, "mul": lambda x, n, p: x * -1.5, "div": lambda x, n, p: x / 3,
        "rdiv": lambda x, n, p: 3 / n, "floordiv": lambda x, n, p: x // 0.7, "mod": lambda x, n, p: x % 1.3,
        "mod_neg": lambda x, n, p: x % -1.3, "fmod": lambda x, n, p: torch.fmod(x, -1.3),
        "rpow": lambda x, n, p: 2 ** x, "sq": lambda x, n, p: x ** 2, "cube": lambda x, n, p: x ** 3,
        "pow_half": lambda x, n, p: p ** 0.5, "pow_m1": lambda x, n, p: n ** -1, "pow_mhalf": lambda x, n, p: p ** -0.5,
        "pow_frac": lambda x, n, p: p ** 1.7, "pow_m2": lambda x, n, p: n ** -2, "cube_neg": lambda x, n, p: n ** 3.0,
        "add_alpha": lambda x, n, p: torch.add(x, 1, alpha=2),
        "gt": lambda x, n, p: x > 0.5, "rlt": lambda x, n, p: 1 < x, "eq": lambda x, n, p: x == 1,
        "div_floor": lambda x, n, p: torch.div(x, -2.5, rounding_mode="floor"),
        "maximum_scalar_tensor": lambda x, n, p: torch.maximum(x, torch.tensor(0.25)),
    },
    torch.int32: {
        "add": lambda x, n, p: x + 2, "mul": lambda x, n, p: x * 3, "floordiv": lambda x, n, p: x // 2,
        "floordiv_neg": lambda x, n, p: x // -2, "mod": lambda x, n, p: x % 3, "mod_neg": lambda x, n, p: x % -3,
        "truediv": lambda x, n, p: x / 2, "mul_float": lambda x, n, p: x * 2.5, "add_bool": lambda x, n, p: x + True,
        "pow": lambda x, n, p: x ** 2, "cube": lambda x, n, p: x ** 3, "rpow": lambda x, n, p: 2 ** p, "neg": lambda x, n, p: -x,
        "gt": lambda x, n, p: x > 3, "fmod": lambda x, n, p: torch.fmod(x, -4), "rshift": lambda x, n, p: x >> 1,
        "lshift": lambda x, n, p: x << 2, "and": lambda x, n, p: x & 5, "rfloordiv": lambda x, n, p: 20 // n,
        "rmod": lambda x, n, p: 7 % n, "div_trunc": lambda x, n, p: torch.div(x, -4, rounding_mode="trunc"),
    },
    torch.bool: {
        "and": lambda x, n, p: x & True, "or": lambda x, n, p: x | False, "xor": lambda x, n, p: x ^ True,
        "add_int": lambda x, n, p: x + 1, "mul_float": lambda x, n, p: x * 2.5, "invert": lambda x, n, p: ~x,
        "eq": lambda x, n, p: x == True, "sub_int": lambda x, n, p: 3 - x.int(),  # noqa: E712
    },
}


@pytest.mark.parametrize("dtype,layout,codegen", params(
    [(torch.float32, "contiguous"), (torch.float32, "channels_last"), (torch.float64, "sliced"),
     (torch.int32, "contiguous"), (torch.int64, "transposed"), (torch.bool, "contiguous")],
    triton=(0, 3)))
def test_scalar_operands(dtype, layout, codegen):
    ops = SCALAR_OPS[torch.float32 if dtype.is_floating_point else torch.int32 if dtype != torch.bool else torch.bool]
    if dtype.is_floating_point:
        x, n, p = make(S4, dtype, layout), make(S4, dtype, layout, nonzero=True), make(S4, dtype, layout, low=0.1, high=5)
    else:
        x, n, p = (make(S4, dtype, layout), make(S4, dtype, layout, nonzero=True),
                   make(S4, dtype, layout, low=0, high=5))
    check_ops(ops, x, n, p, codegen=codegen)


# ---------------------------------------------------------------------------------------------- promotion
PROMOTION = {
    "f32+f64": lambda x, y, i, j, b, h, g: x + y,
    "i32+f32": lambda x, y, i, j, b, h, g: i + x,
    "bool+i32": lambda x, y, i, j, b, h, g: b + i,
    "bool*f32": lambda x, y, i, j, b, h, g: b * x,
    "i32+i64": lambda x, y, i, j, b, h, g: i + j,
    "f16+f32": lambda x, y, i, j, b, h, g: h + x,
    "f16+bf16": lambda x, y, i, j, b, h, g: h + g,
    "i32/i32": lambda x, y, i, j, b, h, g: i / (j.abs() + 1).int(),
    "i32+f64_0d": lambda x, y, i, j, b, h, g: i + torch.tensor(1.5, dtype=torch.float64),
    "f32+f64_0d": lambda x, y, i, j, b, h, g: x + torch.tensor(1.5, dtype=torch.float64),
    "f16+f32_0d": lambda x, y, i, j, b, h, g: h * torch.tensor(0.3),
    "i32+i64_0d": lambda x, y, i, j, b, h, g: i + torch.tensor(7),
    "bool+i64_0d": lambda x, y, i, j, b, h, g: b + torch.tensor(7),
    "i32*pyfloat": lambda x, y, i, j, b, h, g: i * 1.5,
    "bf16*pyfloat": lambda x, y, i, j, b, h, g: g * 1.5,
    "i64+pyint": lambda x, y, i, j, b, h, g: j + 3,
    "maximum(i32,f32)": lambda x, y, i, j, b, h, g: torch.maximum(i, x),
    "eq(i32,f32)": lambda x, y, i, j, b, h, g: torch.eq(i, x.round()),
    "where(b,i32,f64)": lambda x, y, i, j, b, h, g: torch.where(b, i, y),
    "f16_chain": lambda x, y, i, j, b, h, g: (h * 2 + 1).exp() - h,
}


@pytest.mark.parametrize("layout,codegen", params(["contiguous", "transposed"], triton=(0,)))
def test_type_promotion(layout, codegen):
    x = make(S4, torch.float32, layout)
    y = make((S4[-1],), torch.float64)
    i = make(S4, torch.int32, layout)
    j = make((S4[2], S4[3]), torch.int64)
    b = make(S4, torch.bool, "sliced")
    h = make(S4, torch.float16, layout, low=-2, high=2)
    g = make(S4, torch.bfloat16, layout)
    check_ops(PROMOTION, x, y, i, j, b, h, g, codegen=codegen)


# ---------------------------------------------------------------------------------------------- where
WHERE = {
    "tensors": lambda c, x, y, i, m: torch.where(c, x, y),
    "row_mask": lambda c, x, y, i, m: torch.where(m, x, y),
    "scalar_other": lambda c, x, y, i, m: torch.where(c, x, 0.0),
    "scalar_self": lambda c, x, y, i, m: torch.where(c, 1.5, x),
    "two_scalars": lambda c, x, y, i, m: torch.where(c, 2.0, -1.0),
    "int_float": lambda c, x, y, i, m: torch.where(c, i, x),
    "int_scalar": lambda c, x, y, i, m: torch.where(c, i, 100),
    "from_cmp": lambda c, x, y, i, m: torch.where(x > 0, x, -x),
    "bool_values": lambda c, x, y, i, m: torch.where(m, c, x > y),
    "nested": lambda c, x, y, i, m: torch.where(c, torch.where(m, x, y), x * y),
}


@pytest.mark.parametrize("layout,codegen", params(["contiguous", "channels_last", "transposed"], triton=(0,)))
def test_where(layout, codegen):
    c = make(S4, torch.bool, layout)
    x = make(S4, torch.float32, layout)
    y = make(S4, torch.float32, "sliced")
    i = make(S4, torch.int32, layout)
    m = make((S4[-1],), torch.bool)
    check_ops(WHERE, c, x, y, i, m, codegen=codegen)


# ---------------------------------------------------------------------------------------------- casts
CAST_DTYPES = (torch.bool, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.float64)


@pytest.mark.parametrize("src,layout,codegen", params(
    [(d, "contiguous") for d in CAST_DTYPES] + [(torch.float32, "transposed"), (torch.int64, "channels_last"),
                                               (torch.bool, "sliced")],
    triton=lambda d, lay: lay == "contiguous" and d in (torch.bool, torch.int64, torch.float32)))
def test_casts(src, layout, codegen):
    """`.to(dtype)` from `src` to every dtype: float->int truncates toward zero, ->bool is `!= 0`,
    int->bf16/f16 round to nearest even, f32->bf16 rounds to nearest even."""
    if src.is_floating_point:
        x = make(S4, src, layout, low=-100.0, high=100.0, special=(0.0, 0.5, -0.5, 1.0, -1.0, 2.5))
    elif src == torch.bool:
        x = make(S4, src, layout)
    else:
        x = make(S4, src, layout, low=-1000, high=1000, special=(0, 1, -1, 257, -257, 2049))
    ops = {dtype_name(d): (lambda t, d=d: t.to(d)) for d in CAST_DTYPES if d != src}
    ops["roundtrip"] = lambda t: t.to(torch.float64).to(src) + t.to(torch.float32).to(src)
    check_ops(ops, x, codegen=codegen)


def dtype_name(d):
    return str(d).replace("torch.", "")


# ---------------------------------------------------------------------------------------------- clamp
FLOAT_CLAMP = {
    "clamp": lambda x, lo, hi: torch.clamp(x, -1, 2),
    "clamp_min_only": lambda x, lo, hi: torch.clamp(x, min=-1),
    "clamp_max_only": lambda x, lo, hi: torch.clamp(x, max=1),
    "clamp_min": lambda x, lo, hi: torch.clamp_min(x, 0.5),
    "clamp_max": lambda x, lo, hi: torch.clamp_max(x, -0.5),
    "clamp_tensors": lambda x, lo, hi: torch.clamp(x, lo, hi),
    "clamp_tensor_min": lambda x, lo, hi: torch.clamp(x, min=lo),
    "clamp_tensor_max": lambda x, lo, hi: torch.clamp(x, max=hi),
    "clamp_min_gt_max": lambda x, lo, hi: torch.clamp(x, 2, -1),
    "clip": lambda x, lo, hi: torch.clip(x, -0.25, 0.25),
}
INT_CLAMP = {
    "clamp": lambda x, lo, hi: torch.clamp(x, -3, 4),
    "clamp_min": lambda x, lo, hi: torch.clamp_min(x, 0),
    "clamp_max": lambda x, lo, hi: torch.clamp(x, max=-2),
    "clamp_tensors": lambda x, lo, hi: torch.clamp(x, lo, hi),
    "clamp_float_bound": lambda x, lo, hi: torch.clamp(x, min=0.5),
}


@pytest.mark.parametrize("dtype,layout,codegen", params(
    [(torch.float32, "contiguous"), (torch.float32, "channels_last"), (torch.float64, "transposed"),
     (torch.int32, "sliced"), (torch.int64, "contiguous")],
    triton=(0, 3)))
def test_clamp(dtype, layout, codegen):
    x = make(S4, dtype, layout)
    if dtype.is_floating_point:
        lo = make((S4[-1],), dtype, low=-2, high=0)
        hi = make((S4[0], 1, S4[2], 1), dtype, low=0, high=2)
    else:
        lo = make((S4[-1],), dtype, low=-5, high=0)
        hi = make((S4[0], 1, S4[2], 1), dtype, low=0, high=5)
    check_ops(FLOAT_CLAMP if dtype.is_floating_point else INT_CLAMP, x, lo, hi, codegen=codegen)


# ---------------------------------------------------------------------------------------------- activations
ACT = {
    "piecewise": {
        "relu": F.relu, "relu6": F.relu6, "leaky_relu": F.leaky_relu,
        "leaky_relu_0.2": lambda x: F.leaky_relu(x, 0.2), "elu": F.elu, "elu_0.5": lambda x: F.elu(x, alpha=0.5),
        "selu": F.selu, "celu_1.3": lambda x: F.celu(x, alpha=1.3), "hardtanh": F.hardtanh,
        "hardtanh_-2_3": lambda x: F.hardtanh(x, -2.0, 3.0), "hardswish": F.hardswish,
        "hardsigmoid": F.hardsigmoid, "threshold": lambda x: F.threshold(x, 1.0, -7.0),
        "torch.relu": torch.relu,
    },
    "smooth": {
        "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu, "mish": F.mish,
        "softplus": F.softplus, "softplus_b2_t5": lambda x: F.softplus(x, beta=2.0, threshold=5.0),
        "logsigmoid": F.logsigmoid, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "F.tanh": F.tanh,
        "softsign": F.softsign,
    },
}
ACT_CASES = [(g, torch.float32, lay) for g in ACT for lay in ("contiguous", "channels_last", "sliced")] + \
            [(g, d, "contiguous") for g in ACT for d in (torch.float64, torch.float16, torch.bfloat16)]


@pytest.mark.parametrize("group,dtype,layout,codegen", params(
    ACT_CASES, triton=lambda g, d, lay: d == torch.float32 and (lay == "contiguous" or g == "piecewise"
                                                                 and lay == "channels_last")))
def test_activations(group, dtype, layout, codegen):
    # values on the branch points (0, +-1, +-3, 6, 2.5 = threshold/beta, 20 and 25 past softplus' threshold)
    x = make(S4, dtype, layout, low=-8, high=8, special=(0.0, 1.0, -1.0, 3.0, -3.0, 6.0, 2.5, 20.0, 25.0, -25.0))
    check_ops(ACT[group], x, codegen=codegen)


# ---------------------------------------------------------------------------------------------- nan / inf
NAN_OPS = {
    "maximum": lambda x, y: torch.maximum(x, y),      # propagates nan
    "minimum": lambda x, y: torch.minimum(x, y),
    "fmax": lambda x, y: torch.fmax(x, y),            # ignores nan
    "fmin": lambda x, y: torch.fmin(x, y),
    "clamp": lambda x, y: torch.clamp(x, -1, 1),      # nan stays nan
    "clamp_min": lambda x, y: torch.clamp_min(x, 0.0),
    "clamp_tensor": lambda x, y: torch.clamp(y, min=x),
    "relu": lambda x, y: torch.relu(x),
    "hardtanh": lambda x, y: F.hardtanh(x),
    "relu6": lambda x, y: F.relu6(x),
    "eq": lambda x, y: x == x, "ne": lambda x, y: x != y, "lt": lambda x, y: x < y,
    "sign": lambda x, y: torch.sign(x),
    "where_isnan": lambda x, y: torch.where(torch.isnan(x), torch.zeros_like(x), x),
    "nan_to_num": lambda x, y: torch.nan_to_num(x, nan=0.5, posinf=100.0, neginf=-100.0),
    "sigmoid": lambda x, y: torch.sigmoid(x), "tanh": lambda x, y: torch.tanh(x),
    "exp": lambda x, y: torch.exp(x), "log_inf": lambda x, y: torch.log(x.abs()),
    "mul_inf_zero": lambda x, y: x * 0.0, "div_by_inf": lambda x, y: 1.0 / x,
    "softplus": lambda x, y: F.softplus(x), "silu": lambda x, y: F.silu(x),
    # (not gelu: eager's CPU gelu(+inf) is nan, an eager quirk nobody should have to reproduce)
}


@pytest.mark.parametrize("dtype,layout,codegen", params(
    [(torch.float32, "contiguous"), (torch.float64, "transposed"), (torch.float16, "contiguous")], triton=(0,)))
def test_nan_inf_semantics(dtype, layout, codegen):
    x = make(S4, dtype, layout, special=(NAN, INF, -INF, 0.0, -0.0), special_frac=0.3)
    y = make(S4, dtype, "contiguous", special=(NAN, INF, -INF), special_frac=0.2)
    check_ops(NAN_OPS, x, y, codegen=codegen)


# ---------------------------------------------------------------------------------------------- composites
COMPOSITE = {
    "round_decimals": lambda x, y, z: torch.round(x, decimals=2),
    "square": lambda x, y, z: torch.square(x),
    "lerp_scalar": lambda x, y, z: torch.lerp(x, y, 0.3),
    "lerp_tensor": lambda x, y, z: torch.lerp(x, y, z.sigmoid()),
    "addcmul": lambda x, y, z: torch.addcmul(x, y, z, value=0.5),
    "addcdiv": lambda x, y, z: torch.addcdiv(x, y, z.abs() + 1, value=-2),
    "frac": lambda x, y, z: torch.frac(x),
    "hypot": lambda x, y, z: torch.hypot(x, y),
    "xlogy": lambda x, y, z: torch.xlogy(x, z.abs() + 0.5),
    "chain": lambda x, y, z: ((x * y + z).sin() * 2).exp().clamp(max=5) - x.abs().sqrt(),
}


@pytest.mark.parametrize("layout,codegen", params(["contiguous", "transposed"], triton=(0,)))
def test_composite_pointwise(layout, codegen):
    x, y, z = (make(S4, torch.float32, layout) for _ in range(3))
    check_ops(COMPOSITE, x, y, z, codegen=codegen)

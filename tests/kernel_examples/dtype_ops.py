"""Examples that sweep the op vocabulary per dtype: integer arithmetic, every float unary and binary op,
and every dtype-to-dtype cast."""
from __future__ import annotations

import math

import torch

from fuse_all_ir import DTYPES, Compute, Load, Store
from kernel_program_builders import Example, nonzero_randn, pointwise, program, spec, uniform, x0


INT_BINARY = ("add", "sub", "mul", "floordiv", "remainder", "maximum", "minimum",
              "bitwise_and", "bitwise_or", "bitwise_xor", "lshift", "rshift")
INT_UNARY = ("neg", "abs", "sign", "bitwise_not")


def _torch_int_op(op, a, b=None):
    fns = {
        "add": torch.add, "sub": torch.sub, "mul": torch.mul,
        "floordiv": lambda a, b: torch.div(a, b, rounding_mode="floor"), "remainder": torch.remainder,
        "maximum": torch.maximum, "minimum": torch.minimum, "bitwise_and": torch.bitwise_and,
        "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor,
        "lshift": torch.bitwise_left_shift, "rshift": torch.bitwise_right_shift,
        "neg": torch.neg, "abs": torch.abs, "sign": torch.sign, "bitwise_not": torch.bitwise_not,
    }
    return fns[op](a) if b is None else fns[op](a, b)


def int_ops(device, dtype="int32"):
    """Integer arithmetic with negatives: Python floordiv/remainder, bit ops, shifts, sign, abs."""
    N = 1031
    ops = INT_BINARY + INT_UNARY
    body = [Load("a", "arg0", x0, dtype), Load("b", "arg1", x0, dtype), Load("sh", "arg2", x0, dtype)]
    for i, op in enumerate(ops):
        args = ("a",) if op in INT_UNARY else (("a", "sh") if op.endswith("shift") else ("a", "b"))
        body += [Compute(f"v{i}", op, args, dtype), Store("buf0", i * N + x0, f"v{i}")]
    k = pointwise("kernel_0", [N], body, ["arg0", "arg1", "arg2"], ["buf0"])
    p = program(f"int_ops_{dtype}", device, {n: spec(dtype, [N]) for n in ("arg0", "arg1", "arg2")},
                {"buf0": spec(dtype, [len(ops), N])}, [k])
    tdt = getattr(torch, dtype)
    a = torch.randint(-1000, 1000, (N,), device=device).to(tdt)
    b = torch.randint(1, 40, (N,), device=device).to(tdt) * (torch.randint(0, 2, (N,), device=device) * 2 - 1).to(tdt)
    sh = torch.randint(0, 8, (N,), device=device).to(tdt)

    def expected(ins):
        a, b, sh = ins
        rows = [_torch_int_op(op, a) if op in INT_UNARY else
                _torch_int_op(op, a, sh if op.endswith("shift") else b) for op in ops]
        return (torch.stack(rows),)
    return Example(p, [a, b, sh], expected)



# op -> (low, high) of its random inputs, inside the op's domain
FLOAT_UNARY_DOMAINS = {
    "neg": (-10, 10), "abs": (-10, 10), "exp": (-80, 80), "exp2": (-100, 100), "expm1": (-5, 5),
    "log": (1e-3, 1e3), "log2": (1e-3, 1e3), "log10": (1e-3, 1e3), "log1p": (-0.9, 100), "sqrt": (0.0, 1e4),
    "rsqrt": (1e-2, 1e4), "sin": (-100, 100), "cos": (-100, 100), "tan": (-1.5, 1.5), "asin": (-1, 1),
    "acos": (-1, 1), "atan": (-50, 50), "sinh": (-10, 10), "cosh": (-10, 10), "tanh": (-10, 10),
    "asinh": (-50, 50), "acosh": (1, 50), "atanh": (-0.99, 0.99), "erf": (-4, 4), "erfc": (-4, 4),
    "erfinv": (-0.999, 0.999), "sigmoid": (-30, 30), "floor": (-100, 100), "ceil": (-100, 100),
    "round": (-100, 100), "trunc": (-100, 100), "reciprocal": (0.01, 100), "sign": (-2, 2),
    "lgamma": (0.05, 30), "isnan": (-1, 1), "isinf": (-1, 1), "isfinite": (-1, 1),
}
_BOOL_RESULT = ("isnan", "isinf", "isfinite")
_TORCH_UNARY = {"neg": torch.neg, "exp2": torch.exp2, "reciprocal": torch.reciprocal,
                "round": torch.round, "sigmoid": torch.sigmoid, "erfinv": torch.erfinv}


def _torch_unary(op, t):
    fn = _TORCH_UNARY.get(op) or getattr(torch, op)
    return fn(t)


def float_unary(device, dtype="float32", special=False, n=517):
    """Every unary float op of the vocabulary, one kernel per op (so each loop vectorises on its own), op k
    on row k of the input; float results in `buf0`, the bool ones (isnan, ...) in `buf1`. With `special`, every row holds the special values (nan, ±inf, ±0,
    tiny, huge) instead of random values in the op's domain."""
    ops = list(FLOAT_UNARY_DOMAINS)
    float_ops = [op for op in ops if op not in _BOOL_RESULT]
    N = 16 if special else n
    acc = "float32" if dtype in ("float16", "bfloat16") else dtype
    kernels = []
    for i, op in enumerate(ops):
        is_bool = op in _BOOL_RESULT
        body = [Load(f"a{i}", "arg0", i * N + x0, dtype)]
        src = f"a{i}"
        if acc != dtype:
            body.append(Compute(f"u{i}", "cast", (src,), acc))
            src = f"u{i}"
        body.append(Compute(f"v{i}", op, (src,), "bool" if is_bool else acc))
        val = f"v{i}"
        if not is_bool and acc != dtype:
            body.append(Compute(f"w{i}", "cast", (val,), dtype))
            val = f"w{i}"
        row = _BOOL_RESULT.index(op) if is_bool else float_ops.index(op)
        out = "buf1" if is_bool else "buf0"
        body.append(Store(out, row * N + x0, val))
        kernels.append(pointwise(f"kernel_{op}", [N], body, ["arg0"], [out]))
    p = program(f"float_unary_{dtype}", device, {"arg0": spec(dtype, [len(ops), N])},
                {"buf0": spec(dtype, [len(float_ops), N]), "buf1": spec("bool", [len(_BOOL_RESULT), N])}, kernels)
    tdt = getattr(torch, dtype)
    if special:
        vals = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-30, -1e-30, 1e30, -1e30, 1.0, -1.0, 0.5, -0.5,
                2.5, -2.5, 88.0]
        x = torch.tensor([vals] * len(ops), dtype=tdt, device=device)
    else:
        x = torch.stack([uniform(*FLOAT_UNARY_DOMAINS[op], N, dtype=torch.float64, device=device)
                         for op in ops]).to(tdt)
        x = torch.where(x == 0, torch.full_like(x, 0.25), x)

    def expected(ins):
        x = ins[0].to(getattr(torch, acc))
        floats = [_torch_unary(op, x[i]).to(tdt) for i, op in enumerate(ops) if op not in _BOOL_RESULT]
        bools = [_torch_unary(op, x[i]) for i, op in enumerate(ops) if op in _BOOL_RESULT]
        return torch.stack(floats), torch.stack(bools)

    rtol = {"float32": 1e-5, "float64": 1e-7}.get(dtype, 1e-2)
    return Example(p, [x], expected, rtol=rtol, atol=rtol)



FLOAT_BINARY = ("add", "sub", "mul", "truediv", "floordiv", "remainder", "fmod", "pow", "maximum", "minimum",
                "atan2", "copysign", "hypot")
COMPARE_OPS = ("eq", "ne", "lt", "le", "gt", "ge")
_TORCH_BINARY = {"truediv": torch.true_divide, "floordiv": lambda a, b: torch.div(a, b, rounding_mode="floor")}


def float_binary(device, dtype="float32"):
    """Binary float ops incl. Python floordiv/remainder on negatives, NaN-propagating maximum/minimum, and
    comparisons to bool."""
    N = 1029
    loads = [Load("a", "arg0", x0, dtype), Load("b", "arg1", x0, dtype), Load("pa", "arg2", x0, dtype)]
    args = ["arg0", "arg1", "arg2"]
    kernels = []
    for i, op in enumerate(FLOAT_BINARY):    # one kernel per op: libm calls that don't vectorise stay apart
        operands = ("pa", "b") if op == "pow" else ("a", "b")
        kernels.append(pointwise(f"kernel_{op}", [N], loads + [
            Compute("v", op, operands, dtype), Store("buf0", i * N + x0, "v")], args, ["buf0"]))
    body = list(loads)
    for i, op in enumerate(COMPARE_OPS):
        body += [Compute(f"c{i}", op, ("a", "b"), "bool"), Store("buf1", i * N + x0, f"c{i}")]
    kernels.append(pointwise("kernel_compare", [N], body, args, ["buf1"]))
    p = program(f"float_binary_{dtype}", device, {n: spec(dtype, [N]) for n in args},
                {"buf0": spec(dtype, [len(FLOAT_BINARY), N]), "buf1": spec("bool", [len(COMPARE_OPS), N])}, kernels)
    tdt = getattr(torch, dtype)
    a = nonzero_randn(N, device=device, scale=10).to(tdt)
    b = nonzero_randn(N, device=device, scale=3).to(tdt)
    b[::7] = a[::7]                                       # equal values for comparisons
    a[5], b[6], a[8], b[8] = math.nan, math.nan, math.inf, -math.inf
    pa = uniform(0.1, 5, N, device=device).to(tdt)

    def expected(ins):
        a, b, pa = ins
        vals = [(_TORCH_BINARY.get(op) or getattr(torch, op))(pa if op == "pow" else a, b) for op in FLOAT_BINARY]
        cmps = [getattr(torch, op)(a, b) for op in COMPARE_OPS]
        return torch.stack(vals), torch.stack(cmps)
    return Example(p, [a, b, pa], expected, rtol=1e-5 if dtype == "float32" else 1e-7, atol=1e-5)



def casts(device):
    """Every dtype cast to every dtype. Values are non-negative (float -> unsigned of a negative is
    undefined in C) and in range of the smallest type; floats carry fractions (truncation toward zero)."""
    N = 301
    body = []
    for i, src in enumerate(DTYPES):
        body.append(Load(f"in{i}", f"arg{i}", x0, src))
        for j, dst in enumerate(DTYPES):
            body += [Compute(f"c{i}_{j}", "cast", (f"in{i}",), dst), Store(f"buf{j}", i * N + x0, f"c{i}_{j}")]
    k = pointwise("kernel_0", [N], body, [f"arg{i}" for i in range(len(DTYPES))],
                  [f"buf{j}" for j in range(len(DTYPES))])
    p = program("casts", device, {f"arg{i}": spec(d, [N]) for i, d in enumerate(DTYPES)},
                {f"buf{j}": spec(d, [len(DTYPES), N]) for j, d in enumerate(DTYPES)}, [k])
    base = uniform(0.0, 120.0, N, dtype=torch.float64, device=device)
    base[::5] = torch.floor(base[::5])                    # exact integers too
    base[1::11] = 0.0                                     # zero casts to False
    ins = [(base > 60) if d == "bool" else base.to(getattr(torch, d)) for d in DTYPES]

    def expected(ins):
        return tuple(torch.stack([t.to(getattr(torch, dst)) for t in ins]) for dst in DTYPES)
    return Example(p, ins, expected)


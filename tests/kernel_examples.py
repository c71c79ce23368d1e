"""Hand-built `Program`s that exercise the codegen contract (`fuse_all_ir.program`), shared by the C++ and
Triton codegen tests.

Each entry of `EXAMPLES` maps a name to a function `make(device) -> Example`. An `Example` is a tuple
``(program, inputs, expected)``: run ``render_host_program(program, target)`` through `load_host_program`,
call ``module.call(list(inputs))`` and compare with ``expected(inputs)`` (a tuple of tensors, one per
program output) using `assert_outputs_match`, which applies dtype-appropriate tolerances.

Inputs are random and never zero (a kernel that writes nothing or reads the wrong element does not pass by
accident); sizes are odd so that vector remainders and partial tiles are exercised.
"""
from __future__ import annotations

import math
from typing import Callable

import sympy
import torch

from fuse_all_ir import (
    DTYPES, Compute, Const, Free, IndexValue, Kernel, Load, Loop, Reduce, Store, size_symbol, xvar, rvar,
)

x0, x1, x2 = xvar(0), xvar(1), xvar(2)
r0, r1 = rvar(0), rvar(1)
s0, s1 = size_symbol("s0"), size_symbol("s1")


from kernel_program_builders import (  # noqa: E402,F401 - re-exported for the tests that use `ke.<name>`
    Example, assert_outputs_match, contiguous_strides, nonzero_randn, pointwise, program, spec, uniform,
)


def cos_sin(device):
    """sin(cos(x)) over a symbolic size s0: the smallest fused graph."""
    k = pointwise("kernel_0", [s0], [
        Load("a", "arg0", x0, "float32"),
        Compute("b", "cos", ("a",), "float32"),
        Compute("c", "sin", ("b",), "float32"),
        Store("buf0", x0, "c"),
    ], ["arg0"], ["buf0"], [s0])
    p = program("cos_sin", device, {"arg0": spec("float32", [s0])}, {"buf0": spec("float32", [s0])}, [k],
                size_symbols={s0: "arg0.size(0)"}, size_hints={s0: 10_000})
    x = nonzero_randn(10_007, device=device, scale=3)
    return Example(p, [x], lambda ins: (torch.sin(torch.cos(ins[0])),))


def broadcast_add_transposed(device):
    """out[s0, s1] = a.T + b: `a` is a transposed (column-major) view, `b` broadcasts along rows."""
    k = pointwise("kernel_0", [s0, s1], [
        Load("a", "arg0", x0 + x1 * s0, "float32"),
        Load("b", "arg1", x1, "float32"),
        Compute("c", "add", ("a", "b"), "float32"),
        Store("buf0", x0 * s1 + x1, "c"),
    ], ["arg0", "arg1"], ["buf0"], [s0, s1])
    p = program("broadcast_add", device,
                {"arg0": spec("float32", [s0, s1], [1, s0]), "arg1": spec("float32", [s1])},
                {"buf0": spec("float32", [s0, s1])}, [k],
                size_symbols={s0: "arg0.size(0)", s1: "arg0.size(1)"}, size_hints={s0: 37, s1: 53})
    a = nonzero_randn(53, 37, device=device).t()
    b = nonzero_randn(53, device=device)
    return Example(p, [a, b], lambda ins: (ins[0] + ins[1],))


def _softmax_kernel(rows, cols, dtype: str) -> Kernel:
    idx = x0 * cols + r0
    acc = "float32" if dtype in ("float16", "bfloat16") else dtype

    def load(name):
        if acc == dtype:
            return [Load(name, "arg0", idx, dtype)]
        return [Load(name + "_raw", "arg0", idx, dtype), Compute(name, "cast", (name + "_raw",), acc)]

    return Kernel("kernel_0", (sympy.sympify(rows),), (sympy.sympify(cols),), [
        Loop(True, load("a") + [Reduce("m", "max", "a", acc)]),
        Loop(True, load("b") + [
            Compute("b1", "sub", ("b", "m"), acc),
            Compute("b2", "exp", ("b1",), acc),
            Reduce("s", "sum", "b2", acc),
        ]),
        Loop(True, load("c") + [
            Compute("c1", "sub", ("c", "m"), acc),
            Compute("c2", "exp", ("c1",), acc),
            Compute("c3", "truediv", ("c2", "s"), acc),
        ] + ([] if acc == dtype else [Compute("c4", "cast", ("c3",), dtype)]) +
            [Store("buf0", idx, "c3" if acc == dtype else "c4")]),
    ], ("arg0",), ("buf0",), ())


def softmax(device, dtype="float32", rows=67, cols=1001):
    """Softmax over the last dim as ONE reduction kernel with three phases (max, sum of exp, normalise)."""
    k = _softmax_kernel(rows, cols, dtype)
    p = program(f"softmax_{dtype}", device, {"arg0": spec(dtype, [rows, cols])},
                {"buf0": spec(dtype, [rows, cols])}, [k])
    tdt = getattr(torch, dtype)
    x = nonzero_randn(rows, cols, device=device, scale=4).to(tdt)
    return Example(p, [x], lambda ins: (torch.softmax(ins[0].float(), -1).to(tdt),))


def mean_var(device):
    """Two reductions in one kernel with two outputs; non-reduction phases between them."""
    R, C = 45, 3001
    idx = x0 * C + r0
    k = Kernel("kernel_0", (sympy.Integer(R),), (sympy.Integer(C),), [
        Loop(True, [Load("a", "arg0", idx, "float32"), Reduce("s", "sum", "a", "float32")]),
        Loop(False, [Const("n", float(C), "float32"), Compute("mean", "truediv", ("s", "n"), "float32"),
                     Store("buf0", x0, "mean")]),
        Loop(True, [Load("b", "arg0", idx, "float32"), Compute("d", "sub", ("b", "mean"), "float32"),
                    Compute("d2", "mul", ("d", "d"), "float32"), Reduce("ss", "sum", "d2", "float32")]),
        Loop(False, [Compute("var", "truediv", ("ss", "n"), "float32"), Store("buf1", x0, "var")]),
    ], ("arg0",), ("buf0", "buf1"), ())
    p = program("mean_var", device, {"arg0": spec("float32", [R, C])},
                {"buf0": spec("float32", [R]), "buf1": spec("float32", [R])}, [k])
    x = nonzero_randn(R, C, device=device) + 3.0
    return Example(p, [x], lambda ins: (ins[0].mean(1), ins[0].var(1, unbiased=False)), rtol=1e-4, atol=1e-5)


def welford(device):
    """One-pass variance: welford_mean and welford_m2 sharing one accumulator, and a second group whose
    Reduce mask leaves out the points r0 >= 1000 (a split's tail chunk); values around 100."""
    R, C, K = 37, 3001, 1000
    idx = x0 * C + r0
    k = Kernel("kernel_0", (sympy.Integer(R),), (sympy.Integer(C),), [
        Loop(True, [Load("a", "arg0", idx, "float32"), Reduce("m", "welford_mean", "a", "float32"),
                    Reduce("q", "welford_m2", "a", "float32"),
                    IndexValue("keep", sympy.StrictLessThan(r0, K), "bool"), Const("two", 2.0, "float32"),
                    Compute("b", "mul", ("a", "two"), "float32"),
                    Reduce("mk", "welford_mean", "b", "float32", mask="keep"),
                    Reduce("qk", "welford_m2", "b", "float32", mask="keep")]),
        Loop(False, [Store("buf0", x0, "m"), Store("buf1", x0, "q"), Store("buf2", x0, "mk"),
                     Store("buf3", x0, "qk")]),
    ], ("arg0",), ("buf0", "buf1", "buf2", "buf3"), ())
    p = program("welford", device, {"arg0": spec("float32", [R, C])},
                {f"buf{i}": spec("float32", [R]) for i in range(4)}, [k])
    x = nonzero_randn(R, C, device=device) + 100.0

    def expected(ins):
        a = ins[0].double()
        b = 2 * a[:, :K]
        return tuple(t.float() for t in (a.mean(1), (a - a.mean(1, keepdim=True)).square().sum(1),
                                          b.mean(1), (b - b.mean(1, keepdim=True)).square().sum(1)))
    return Example(p, [x], expected, rtol=1e-4, atol=1e-3)


def arg_reductions_nan(device):
    """argmax/argmin/max/min over a 2-D reduction space (flattened positions), with NaN in some rows."""
    R, C1, C2 = 9, 13, 17
    idx = x0 * (C1 * C2) + r0 * C2 + r1
    k = Kernel("kernel_0", (sympy.Integer(R),), (sympy.Integer(C1), sympy.Integer(C2)), [
        Loop(True, [Load("a", "arg0", idx, "float32"),
                    Reduce("amax", "argmax", "a", "int64"), Reduce("amin", "argmin", "a", "int64"),
                    Reduce("mx", "max", "a", "float32"), Reduce("mn", "min", "a", "float32")]),
        Loop(False, [Store("buf0", x0, "amax"), Store("buf1", x0, "amin"),
                     Store("buf2", x0, "mx"), Store("buf3", x0, "mn")]),
    ], ("arg0",), ("buf0", "buf1", "buf2", "buf3"), ())
    p = program("arg_reductions", device, {"arg0": spec("float32", [R, C1, C2])},
                {"buf0": spec("int64", [R]), "buf1": spec("int64", [R]),
                 "buf2": spec("float32", [R]), "buf3": spec("float32", [R])}, [k])
    x = nonzero_randn(R, C1, C2, device=device)
    x[1, 5, 3] = x[1, 7, 2] = float("nan")       # two NaNs: the first one wins
    x[2, 0, 0] = float("nan")
    x[3, 12, 16] = float("nan")                  # last element
    x[4, 2, 2] = x[4, 9, 9] = 100.0              # tie: first occurrence
    x[5, 1, 1] = x[5, 11, 1] = -100.0

    def expected(ins):
        flat = ins[0].reshape(R, -1)
        return flat.argmax(1), flat.argmin(1), flat.amax(1), flat.amin(1)
    return Example(p, [x], expected)


def masked_pad(device):
    """constant_pad_nd(x, (1, 2), value=-1.5) on the last dim: a masked load at negative/overflowing
    offsets, which must not be read."""
    R, C = 23, 301
    Cp = C + 3
    k = pointwise("kernel_0", [R, Cp], [
        IndexValue("j", x1, "int64"),
        Const("lo", 1, "int64"), Const("hi", C + 1, "int64"),
        Compute("m1", "ge", ("j", "lo"), "bool"), Compute("m2", "lt", ("j", "hi"), "bool"),
        Compute("m", "logical_and", ("m1", "m2"), "bool"),
        Load("a", "arg0", x0 * C + x1 - 1, "float32", mask="m", other=-1.5),
        Store("buf0", x0 * Cp + x1, "a"),
    ], ["arg0"], ["buf0"])
    p = program("masked_pad", device, {"arg0": spec("float32", [R, C])}, {"buf0": spec("float32", [R, Cp])}, [k])
    x = nonzero_randn(R, C, device=device)
    return Example(p, [x], lambda ins: (torch.nn.functional.pad(ins[0], (1, 2), value=-1.5),))


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


def bool_where(device):
    """Bool logic on bool inputs, a where on floats selected by a comparison, bool and uint8 stores."""
    N = 777
    k = pointwise("kernel_0", [N], [
        Load("p", "arg0", x0, "bool"), Load("q", "arg1", x0, "bool"),
        Load("a", "arg2", x0, "float32"), Load("b", "arg3", x0, "float32"),
        Compute("and", "logical_and", ("p", "q"), "bool"), Store("buf0", x0, "and"),
        Compute("or", "logical_or", ("p", "q"), "bool"), Store("buf0", N + x0, "or"),
        Compute("xor", "logical_xor", ("p", "q"), "bool"), Store("buf0", 2 * N + x0, "xor"),
        Compute("not", "logical_not", ("p",), "bool"), Store("buf0", 3 * N + x0, "not"),
        Compute("gt", "gt", ("a", "b"), "bool"),
        Compute("sel", "where", ("gt", "a", "b"), "float32"), Store("buf1", x0, "sel"),
        Compute("sel2", "where", ("p", "a", "b"), "float32"), Store("buf1", N + x0, "sel2"),
        Compute("u", "cast", ("xor",), "uint8"), Store("buf2", x0, "u"),
    ], ["arg0", "arg1", "arg2", "arg3"], ["buf0", "buf1", "buf2"])
    p = program("bool_where", device,
                {"arg0": spec("bool", [N]), "arg1": spec("bool", [N]), "arg2": spec("float32", [N]),
                 "arg3": spec("float32", [N])},
                {"buf0": spec("bool", [4, N]), "buf1": spec("float32", [2, N]), "buf2": spec("uint8", [N])}, [k])
    ins = [torch.rand(N, device=device) > 0.5, torch.rand(N, device=device) > 0.5,
           nonzero_randn(N, device=device), nonzero_randn(N, device=device)]

    def expected(ins):
        p, q, a, b = ins
        return (torch.stack([p & q, p | q, p ^ q, ~p]),
                torch.stack([torch.where(a > b, a, b), torch.where(p, a, b)]), (p ^ q).to(torch.uint8))
    return Example(p, ins, expected)


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


def full_reduction(device):
    """sum/max/prod over all s0 elements into 0-d outputs: an empty outer space."""
    k = Kernel("kernel_0", (), (s0,), [
        Loop(True, [Load("a", "arg0", r0, "float32"), Reduce("s", "sum", "a", "float32"),
                    Reduce("m", "max", "a", "float32"),
                    Load("b", "arg1", r0, "float64"), Reduce("p", "prod", "b", "float64")]),
        Loop(False, [Store("buf0", sympy.Integer(0), "s"), Store("buf1", sympy.Integer(0), "m"),
                     Store("buf2", sympy.Integer(0), "p")]),
    ], ("arg0", "arg1"), ("buf0", "buf1", "buf2"), (s0,))
    p = program("full_reduction", device, {"arg0": spec("float32", [s0]), "arg1": spec("float64", [s0])},
                {"buf0": spec("float32", []), "buf1": spec("float32", []), "buf2": spec("float64", [])}, [k],
                size_symbols={s0: "arg0.size(0)"}, size_hints={s0: 200_003})
    n = 200_003
    a = nonzero_randn(n, device=device)
    b = uniform(0.999, 1.001, n, dtype=torch.float64, device=device)
    return Example(p, [a, b], lambda ins: (ins[0].double().sum().float(), ins[0].amax(), ins[1].prod()),
                   rtol=1e-5, atol=1e-2)


def misc_reductions(device):
    """prod/any/all/min and an int64 sum over rows, and a column sum (reduction stride != 1)."""
    R, C = 33, 129
    idx = x0 * C + r0
    k0 = Kernel("kernel_0", (sympy.Integer(R),), (sympy.Integer(C),), [
        Loop(True, [Load("a", "arg0", idx, "float32"), Reduce("p", "prod", "a", "float32"),
                    Load("q", "arg1", idx, "bool"), Reduce("any", "any", "q", "bool"), Reduce("all", "all", "q", "bool"),
                    Load("i", "arg2", idx, "int64"), Reduce("isum", "sum", "i", "int64"),
                    Reduce("imin", "min", "i", "int64")]),
        Loop(False, [Store("buf0", x0, "p"), Store("buf1", x0, "any"), Store("buf2", x0, "all"),
                     Store("buf3", x0, "isum"), Store("buf4", x0, "imin")]),
    ], ("arg0", "arg1", "arg2"), ("buf0", "buf1", "buf2", "buf3", "buf4"), ())
    k1 = Kernel("kernel_1", (sympy.Integer(C),), (sympy.Integer(R),), [
        Loop(True, [Load("a", "arg0", r0 * C + x0, "float32"), Reduce("s", "sum", "a", "float32")]),
        Loop(False, [Store("buf5", x0, "s")]),
    ], ("arg0",), ("buf5",), ())
    p = program("misc_reductions", device,
                {"arg0": spec("float32", [R, C]), "arg1": spec("bool", [R, C]), "arg2": spec("int64", [R, C])},
                {"buf0": spec("float32", [R]), "buf1": spec("bool", [R]), "buf2": spec("bool", [R]),
                 "buf3": spec("int64", [R]), "buf4": spec("int64", [R]), "buf5": spec("float32", [C])}, [k0, k1])
    a = uniform(0.98, 1.02, R, C, device=device)
    q = torch.rand(R, C, device=device) > 0.02
    q[0] = False
    q[1] = True
    i = torch.randint(-10**12, 10**12, (R, C), device=device)

    def expected(ins):
        a, q, i = ins
        return a.prod(1), q.any(1), q.all(1), i.sum(1), i.amin(1), a.sum(0)
    return Example(p, [a, q, i], expected, rtol=1e-5, atol=1e-5)


def arange(device):
    """IndexValue: out[x0, x1] = x0 * 41 + x1 as int64, and x1 * 0.5 as float32."""
    R, C = 19, 41
    k = pointwise("kernel_0", [R, C], [
        IndexValue("i", x0 * C + x1, "int64"), Store("buf0", x0 * C + x1, "i"),
        IndexValue("j", x1, "int64"), Compute("jf", "cast", ("j",), "float32"), Const("h", 0.5, "float32"),
        Compute("v", "mul", ("jf", "h"), "float32"), Store("buf1", x0 * C + x1, "v"),
    ], [], ["buf0", "buf1"])
    p = program("arange", device, {}, {"buf0": spec("int64", [R, C]), "buf1": spec("float32", [R, C])}, [k])

    def expected(ins):
        i = torch.arange(R * C, device=device).reshape(R, C)
        return i, (i % C).float() * 0.5
    return Example(p, [], expected)


def two_kernels(device):
    """A temporary between two kernels: buf0 = exp(x) (freed after), out = buf0.sum(-1) over a symbolic
    reduction size."""
    k0 = pointwise("kernel_0", [s0 * s1], [
        Load("a", "arg0", x0, "float32"), Compute("e", "exp", ("a",), "float32"), Store("buf0", x0, "e"),
    ], ["arg0"], ["buf0"], [s0, s1])
    k1 = Kernel("kernel_1", (s0,), (s1,), [
        Loop(True, [Load("a", "buf0", x0 * s1 + r0, "float32"), Reduce("s", "sum", "a", "float32")]),
        Loop(False, [Store("buf1", x0, "s")]),
    ], ("buf0",), ("buf1",), (s0, s1))
    p = program("two_kernels", device, {"arg0": spec("float32", [s0, s1])}, {"buf1": spec("float32", [s0])},
                [k0, k1], temps={"buf0": spec("float32", [s0, s1])},
                size_symbols={s0: "arg0.size(0)", s1: "arg0.size(1)"}, size_hints={s0: 31, s1: 257})
    p.steps.append(Free("buf0"))
    x = nonzero_randn(31, 257, device=device)
    return Example(p, [x], lambda ins: (ins[0].exp().sum(-1),), rtol=1e-5, atol=1e-5)


def column_reductions(device):
    """Reductions along a strided dim (the vector loop must run across the contiguous outer dim instead):
    softmax over dim 0 of (R, s0) with three phases, and mean over dim 1 of (A, B, C) with a phase after
    the reduction that reuses its result."""
    R, A, B, C = 300, 5, 77, 45
    idx = r0 * s0 + x0
    k0 = Kernel("kernel_0", (s0,), (sympy.Integer(R),), [
        Loop(True, [Load("a", "arg0", idx, "float32"), Reduce("m", "max", "a", "float32")]),
        Loop(True, [Load("b", "arg0", idx, "float32"), Compute("b1", "sub", ("b", "m"), "float32"),
                    Compute("b2", "exp", ("b1",), "float32"), Reduce("s", "sum", "b2", "float32")]),
        Loop(False, [Const("one", 1.0, "float32"), Compute("inv", "truediv", ("one", "s"), "float32")]),
        Loop(True, [Load("c", "arg0", idx, "float32"), Compute("c1", "sub", ("c", "m"), "float32"),
                    Compute("c2", "exp", ("c1",), "float32"), Compute("c3", "mul", ("c2", "inv"), "float32"),
                    Store("buf0", idx, "c3")]),
    ], ("arg0",), ("buf0",), (s0,))
    k1 = Kernel("kernel_1", (sympy.Integer(A), sympy.Integer(C)), (sympy.Integer(B),), [
        Loop(True, [Load("a", "arg1", x0 * (B * C) + r0 * C + x1, "float64"), Reduce("s", "sum", "a", "float64")]),
        Loop(False, [Const("n", float(B), "float64"), Compute("mean", "truediv", ("s", "n"), "float64"),
                     Store("buf1", x0 * C + x1, "mean")]),
    ], ("arg1",), ("buf1",), ())
    p = program("column_reductions", device,
                {"arg0": spec("float32", [R, s0]), "arg1": spec("float64", [A, B, C])},
                {"buf0": spec("float32", [R, s0]), "buf1": spec("float64", [A, C])}, [k0, k1],
                size_symbols={s0: "arg0.size(1)"}, size_hints={s0: 45})
    ins = [nonzero_randn(R, 45, device=device, scale=3), nonzero_randn(A, B, C, dtype=torch.float64, device=device)]
    return Example(p, ins, lambda ins: (torch.softmax(ins[0], 0), ins[1].mean(1)), rtol=1e-5, atol=1e-6)


def unit_and_mergeable_dims(device):
    """Iteration spaces with size-1 dims (batch 1) and dims that merge: a contiguous (1, s0, 1, 3) relu
    and a (1, 5) x (7, 1, 11) sum/argmax. Codegens may squeeze and merge; results must not change."""
    k0 = pointwise("kernel_0", [1, s0, 1, 3], [
        Load("a", "arg0", x1 * 3 + xvar(3), "float32"), Const("z", 0.0, "float32"),
        Compute("r", "maximum", ("a", "z"), "float32"), Store("buf0", x1 * 3 + xvar(3), "r"),
    ], ["arg0"], ["buf0"], [s0])
    idx = x1 * 77 + r0 * 11 + rvar(2)
    k1 = Kernel("kernel_1", (sympy.Integer(1), sympy.Integer(5)), (sympy.Integer(7), sympy.Integer(1), sympy.Integer(11)), [
        Loop(True, [Load("a", "arg1", idx, "float32"), Reduce("s", "sum", "a", "float32"),
                    Reduce("i", "argmax", "a", "int64")]),
        Loop(False, [Store("buf1", x1, "s"), Store("buf2", x1, "i")]),
    ], ("arg1",), ("buf1", "buf2"), ())
    p = program("unit_dims", device, {"arg0": spec("float32", [1, s0, 1, 3]), "arg1": spec("float32", [1, 5, 7, 1, 11])},
                {"buf0": spec("float32", [1, s0, 1, 3]), "buf1": spec("float32", [1, 5]), "buf2": spec("int64", [1, 5])},
                [k0, k1], size_symbols={s0: "arg0.size(1)"}, size_hints={s0: 50})
    ins = [nonzero_randn(1, 50, 1, 3, device=device), nonzero_randn(1, 5, 7, 1, 11, device=device)]

    def expected(ins):
        flat = ins[1].reshape(1, 5, -1)
        return torch.relu(ins[0]), flat.sum(-1), flat.argmax(-1)
    return Example(p, ins, expected)


def twenty_kernels(device, count=20):
    """A chain of `count` kernels (softmax reductions and pointwise tanh/sin/sigmoid) over a symbolic
    number of rows: a translation unit of realistic size for compile-time tests."""
    C = 129
    kernels, temps = [], {}
    prev = "arg0"
    for i in range(count):
        out = f"buf{i}"
        if i % 4 == 0:
            k = _softmax_kernel(s0, C, "float32")
            k = Kernel(f"kernel_{i}", k.outer, k.reduction, [
                Loop(loop.over_reduction, [
                    Load(st.name, prev, st.index, st.dtype) if isinstance(st, Load) else
                    Store(out, st.index, st.value) if isinstance(st, Store) else st for st in loop.body])
                for loop in k.loops], (prev,), (out,), (s0,))
        else:
            op = ("tanh", "sin", "sigmoid")[i % 4 - 1]
            k = pointwise(f"kernel_{i}", [s0 * C], [
                Load("a", prev, x0, "float32"), Compute("b", op, ("a",), "float32"), Const("c", 1.5, "float32"),
                Compute("d", "mul", ("b", "c"), "float32"), Store(out, x0, "d"),
            ], [prev], [out], [s0])
        kernels.append(k)
        temps[out] = spec("float32", [s0, C])
        prev = out
    last = temps.pop(prev)
    p = program(f"twenty_kernels_{count}", device, {"arg0": spec("float32", [s0, C])}, {prev: last}, kernels,
                temps=temps, size_symbols={s0: "arg0.size(0)"}, size_hints={s0: 64})
    x = nonzero_randn(61, C, device=device)

    def expected(ins):
        t = ins[0]
        for i in range(count):
            if i % 4 == 0:
                t = torch.softmax(t, -1)
            else:
                t = (torch.tanh, torch.sin, torch.sigmoid)[i % 4 - 1](t) * 1.5
        return (t,)
    return Example(p, [x], expected)


def in_place(device):
    """Kernels writing their output in place of an input that dies with them (fuse_all_ir.in_place, planned
    by `memory.plan_reuse`): each reads the input through its output, only at the element it writes,
    before writing it. buf0 = exp(x); buf1 = buf0 / row sums (a row reduction, three reads of each
    element before the write); buf2 = buf1 / column maxima (a column reduction); out = 2 * buf2 + x."""
    from fuse_all_ir import Alloc, KernelCall
    from fuse_all_ir.memory import plan_reuse

    R = 67
    row, col = x0 * s0 + r0, r0 * s0 + x0
    k0 = pointwise("kernel_0", [R, s0], [Load("a", "arg0", x0 * s0 + x1, "float32"), Compute("e", "exp", ("a",), "float32"),
                                         Store("buf0", x0 * s0 + x1, "e")], ["arg0"], ["buf0"], [s0])
    k1 = Kernel("kernel_1", (sympy.Integer(R),), (s0,), [
        Loop(True, [Load("a", "buf0", row, "float32"), Reduce("s", "sum", "a", "float32")]),
        Loop(True, [Load("b", "buf0", row, "float32"), Compute("c", "truediv", ("b", "s"), "float32"),
                    Store("buf1", row, "c")]),
    ], ("buf0",), ("buf1",), (s0,))
    k2 = Kernel("kernel_2", (s0,), (sympy.Integer(R),), [
        Loop(True, [Load("a", "buf1", col, "float32"), Reduce("m", "max", "a", "float32")]),
        Loop(True, [Load("b", "buf1", col, "float32"), Compute("c", "truediv", ("b", "m"), "float32"),
                    Store("buf2", col, "c")]),
    ], ("buf1",), ("buf2",), (s0,))
    k3 = pointwise("kernel_3", [R, s0], [Load("a", "buf2", x0 * s0 + x1, "float32"), Const("two", 2.0, "float32"),
                                         Compute("b", "mul", ("a", "two"), "float32"),
                                         Load("x", "arg0", x0 * s0 + x1, "float32"), Compute("c", "add", ("b", "x"), "float32"),
                                         Store("buf3", x0 * s0 + x1, "c")], ["buf2", "arg0"], ["buf3"], [s0])
    layout = spec("float32", [R, s0], device=device)     # a donor must be on the program's device
    p = program("in_place", device, {"arg0": layout}, {"buf3": layout}, [k0, k1, k2, k3],
                temps={"buf0": layout, "buf1": layout, "buf2": layout},
                size_symbols={s0: "arg0.size(1)"}, size_hints={s0: 301})
    p.steps = [Alloc("buf0"), KernelCall("kernel_0"), Alloc("buf1"), KernelCall("kernel_1"), Free("buf0"),
               Alloc("buf2"), KernelCall("kernel_2"), Free("buf1"), Alloc("buf3"), KernelCall("kernel_3"), Free("buf2")]
    plan_reuse(p)
    taken = {s.buffer: s.reuse for s in p.steps if isinstance(s, Alloc) and s.in_place}
    assert taken == {"buf1": "buf0", "buf2": "buf1", "buf3": "buf2"}, p.steps

    def expected(ins):
        e = ins[0].exp()
        e = e / e.sum(-1, keepdim=True)
        return (2 * (e / e.amax(0, keepdim=True)) + ins[0],)
    return Example(p, [nonzero_randn(R, 301, device=device)], expected, rtol=1e-5, atol=1e-5)


EXAMPLES: dict[str, Callable[[str], Example]] = {
    "cos_sin": cos_sin,
    "broadcast_add_transposed": broadcast_add_transposed,
    "softmax": softmax,
    "softmax_float16": lambda d: softmax(d, "float16", 13, 515),
    "softmax_bfloat16": lambda d: softmax(d, "bfloat16", 13, 515),
    "mean_var": mean_var,
    "welford": welford,
    "arg_reductions_nan": arg_reductions_nan,
    "masked_pad": masked_pad,
    "int_ops_int32": int_ops,
    "int_ops_int64": lambda d: int_ops(d, "int64"),
    "int_ops_int16": lambda d: int_ops(d, "int16"),
    "int_ops_int8": lambda d: int_ops(d, "int8"),
    "int_ops_uint8": lambda d: int_ops(d, "uint8"),
    "float_unary_float32": float_unary,
    "float_unary_float64": lambda d: float_unary(d, "float64"),
    "float_unary_float16": lambda d: float_unary(d, "float16"),
    "float_unary_bfloat16": lambda d: float_unary(d, "bfloat16"),
    "float_unary_special": lambda d: float_unary(d, "float32", special=True),
    "float_binary_float32": float_binary,
    "float_binary_float64": lambda d: float_binary(d, "float64"),
    "bool_where": bool_where,
    "casts": casts,
    "full_reduction": full_reduction,
    "misc_reductions": misc_reductions,
    "arange": arange,
    "two_kernels": two_kernels,
    "column_reductions": column_reductions,
    "unit_and_mergeable_dims": unit_and_mergeable_dims,
    "twenty_kernels": twenty_kernels,
    "in_place": in_place,
}

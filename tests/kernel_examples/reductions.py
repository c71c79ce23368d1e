"""Reduction examples: multi-phase softmax, mean/var and welford, arg-reductions with NaN, full and column
reductions, size-1 and mergeable dims."""
from __future__ import annotations

import sympy
import torch

from fuse_all_ir import Compute, Const, IndexValue, Kernel, Load, Loop, Reduce, Store, rvar, xvar
from kernel_program_builders import (
    Example, nonzero_randn, pointwise, program, r0, r1, s0, spec, uniform, x0, x1,
)


def softmax_kernel(rows, cols, dtype: str) -> Kernel:
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
    k = softmax_kernel(rows, cols, dtype)
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


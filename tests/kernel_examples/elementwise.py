"""Pointwise examples: fused unary chains, transposed and broadcast operands, masked loads, bool logic and
index values."""
from __future__ import annotations

import torch

from fuse_all_ir import Compute, Const, IndexValue, Load, Store
from kernel_program_builders import Example, nonzero_randn, pointwise, program, s0, s1, spec, x0, x1


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


"""Programs of several kernels: a temporary between two kernels, a long chain of kernels, and outputs
written in place of dying inputs."""
from __future__ import annotations

import sympy
import torch

from fuse_all_ir import Alloc, Compute, Const, Free, Kernel, KernelCall, Load, Loop, Reduce, Store
from fuse_all_ir.memory import plan_reuse
from kernel_program_builders import Example, nonzero_randn, pointwise, program, r0, s0, s1, spec, x0, x1

from .reductions import softmax_kernel


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



def twenty_kernels(device, count=20):
    """A chain of `count` kernels (softmax reductions and pointwise tanh/sin/sigmoid) over a symbolic
    number of rows: a translation unit of realistic size for compile-time tests."""
    C = 129
    kernels, temps = [], {}
    prev = "arg0"
    for i in range(count):
        out = f"buf{i}"
        if i % 4 == 0:
            k = softmax_kernel(s0, C, "float32")
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


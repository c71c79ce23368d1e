"""float16/bfloat16 reduction phases read their shared rounded prefix back from scratch (reuse.py) instead of
converting and rounding it again, when that costs more than a scratch read; float32 trees without a libm
call, values the same for every reduction index, and cheap bfloat16 trees are recomputed as before."""
from __future__ import annotations

import re

import sympy

from fuse_all_codegen_cpp import render_kernel
from fuse_all_codegen_cpp.reuse import plan_reuse
from fuse_all_ir import Compute, Const, Load, Loop, Reduce, Store
from fuse_all_ir.program import Kernel
from fuse_all_ir.symbolic import rvar, xvar


def _prefix(tag: str, dtype: str, rounded: bool, index) -> list:
    """`x * 0.5 + 1` on a `dtype` load, each op's result rounded to `dtype` when `rounded` (as
    fuse_all_ir.rounding writes a float16 ATen op's result)."""
    stmts = [Load(f"{tag}x", "arg0", index, dtype), Const(f"{tag}h", 0.5, dtype), Const(f"{tag}o", 1.0, dtype),
             Compute(f"{tag}m", "mul", (f"{tag}x", f"{tag}h"), dtype)]
    last = f"{tag}m"
    if rounded:
        stmts.append(Compute(f"{tag}mr", "cast", (last,), dtype))
        last = f"{tag}mr"
    stmts.append(Compute(f"{tag}a", "add", (last, f"{tag}o"), dtype))
    last = f"{tag}a"
    if rounded:
        stmts.append(Compute(f"{tag}ar", "cast", (last,), dtype))
        last = f"{tag}ar"
    return stmts, last


def _softmax_of_prefix(dtype: str, rows=64, cols=1024, rounded=True, index=None) -> Kernel:
    index = xvar(0) * cols + rvar(0) if index is None else index
    loops = []
    p1, a = _prefix("p", dtype, rounded, index)
    loops.append(Loop(True, p1 + [Reduce("mx", "max", a, "float32")]))
    p2, b = _prefix("q", dtype, rounded, index)
    loops.append(Loop(True, p2 + [Compute("qs", "sub", (b, "mx"), "float32"), Compute("qe", "exp", ("qs",), "float32"),
                                  Reduce("sm", "sum", "qe", "float32")]))
    p3, c = _prefix("r", dtype, rounded, index)
    loops.append(Loop(True, p3 + [Compute("rs", "sub", (c, "mx"), "float32"), Compute("re", "exp", ("rs",), "float32"),
                                  Compute("rd", "truediv", ("re", "sm"), "float32"),
                                  Compute("rc", "cast", ("rd",), dtype), Store("buf0", index, "rc")]))
    return Kernel("kernel_0", (sympy.Integer(rows),), (sympy.Integer(cols),), loops, ("arg0",), ("buf0",), ())


def test_a_rounded_float16_prefix_is_read_back_not_recomputed():
    plan = plan_reuse(_softmax_of_prefix("float16"))
    # the sum phase reads x * 0.5 + 1 (a load and two roundings) back from the max phase; the normalise
    # phase reads exp back from the sum phase
    assert plan["qar"] == (plan["qar"][0], "par") and plan["re"][1] == "qe"
    source = render_kernel(_softmax_of_prefix("float16"))
    # the portable loops (F16C hosts also get each float16 phase with explicit vectors: vector_loops.py)
    portable = re.sub(r"#if FA_VEC\n.*?#else\n", "", source, flags=re.S)
    assert portable.count("fa_scratch_") >= 6 and portable.count("expf(") == 1


def test_float32_and_cheap_bfloat16_prefixes_are_recomputed():
    for kernel in (_softmax_of_prefix("float32", rounded=False), _softmax_of_prefix("bfloat16", rounded=False)):
        assert {later: earlier for later, (_, earlier) in plan_reuse(kernel).items()} == {"re": "qe"}
    # bfloat16 with its two roundings (1 + 6 + 6 vector ops) is worth a scratch array
    assert plan_reuse(_softmax_of_prefix("bfloat16"))["qar"][1] == "par"


def test_values_the_same_for_every_reduction_index_are_not_reused():
    """A row's first element (the two-pass variance's shift) is computed once before each loop (hoist.py):
    a scratch array of it would only add a store and a load, and keep it inside the loop."""
    assert plan_reuse(_softmax_of_prefix("float16", index=xvar(0) * 1024)) == {}


def test_a_bfloat16_sum_of_two_loads_rounded_is_read_back():
    """add + LayerNorm's prefix in bfloat16: two loads and one rounding (8 vector ops) per phase."""
    cols, index = 768, xvar(0) * 768 + rvar(0)

    def prefix(tag):
        return [Load(f"{tag}x", "arg0", index, "bfloat16"), Load(f"{tag}y", "arg1", index, "bfloat16"),
                Compute(f"{tag}s", "add", (f"{tag}x", f"{tag}y"), "bfloat16"),
                Compute(f"{tag}r", "cast", (f"{tag}s",), "bfloat16")]
    kernel = Kernel("kernel_0", (sympy.Integer(64),), (sympy.Integer(cols),), [
        Loop(True, prefix("p") + [Reduce("sm", "sum", "pr", "float32")]),
        Loop(True, prefix("q") + [Compute("qd", "sub", ("qr", "sm"), "float32"), Store("buf0", index, "qd")]),
    ], ("arg0", "arg1"), ("buf0",), ())
    assert {later: earlier for later, (_, earlier) in plan_reuse(kernel).items()} == {"qr": "pr"}

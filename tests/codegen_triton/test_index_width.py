"""int32 vs int64 index arithmetic in Triton kernels (issue 9, item 1): int32 only when every value the
index arithmetic computes -- flat indices, products of sizes, reduction offsets one block past the end --
stays below 2**31; with symbolic sizes a launch guard sends larger sizes to the int64 twin."""
from __future__ import annotations

import pytest
import sympy

from fuse_all_ir import Kernel, Load, Loop, Reduce, Store, rvar, size_symbol, xvar

s0, s1 = size_symbol("s0"), size_symbol("s1")
x0, r0, r1 = xvar(0), rvar(0), rvar(1)


def reduction(outer, red, index, symbols=()):
    store_index = x0 if outer else sympy.Integer(0)
    return Kernel("k", tuple(map(sympy.sympify, outer)), tuple(map(sympy.sympify, red)), [
        Loop(True, [Load("a", "in", index, "float32"), Reduce("s", "sum", "a", "float32")]),
        Loop(False, [Store("out", store_index, "s")])], ("in",), ("out",), tuple(symbols))


def render(kernel, hints=None, **options):
    from fuse_all_codegen_triton.choices import TritonChoices
    from fuse_all_codegen_triton.render import RenderOptions, render_kernel
    return render_kernel(kernel, hints=hints or {}, options=RenderOptions(choices=TritonChoices(**options)))


def uses_int64(rendered):
    return "int64 indexing" in rendered.source and "tl.program_id(0).to(tl.int64)" in rendered.source


@pytest.mark.parametrize("outer,red,index", [
    ((3,), (2**30,), x0 * 2**30 + r0),                  # each size fits; row 2's offsets do not
    ((), (2**31 - 100,), r0),                           # the last block's offsets pass 2**31
    ((), (2**16, 2**16), r0 * 2**16 + r1),              # a 2-D reduction whose flat index passes 2**31
    ((5,), (7,), x0 * 2**31 + r0),                      # a stride past 2**31 on a tiny kernel
])
def test_any_index_value_past_2_31_switches_to_int64(outer, red, index):
    rendered = render(reduction(outer, red, index))
    assert uses_int64(rendered), rendered.source
    assert rendered.spec["size_type"] == "i64" and rendered.spec["int32_guard"] is None


def test_looped_reduction_offsets_are_int64():
    rendered = render(reduction((), (2**31 + 7,), r0), force_looped=True)
    assert uses_int64(rendered) and "rbase = tl.arange(0, RBLOCK)[None, :].to(tl.int64)" in rendered.source


def test_products_of_symbolic_sizes_are_guarded():
    """x0 * s1 + r0 fits for the hinted sizes, not for every size: an int32 kernel behind a guard on the
    product, and an int64 twin."""
    rendered = render(reduction((s0,), (s1,), x0 * s1 + r0, (s0, s1)), hints={s0: 100, s1: 1000})
    guard = rendered.spec["int32_guard"]
    assert guard and rendered.source_int64 and "int32 indexing" in rendered.source
    assert eval(guard, {"s0": 100, "s1": 1000})
    assert not eval(guard, {"s0": 2**16, "s1": 2**16})      # each < 2**31, the product is not
    assert not eval(guard, {"s0": 1, "s1": 2**31})
    hinted_big = render(reduction((s0,), (s1,), x0 * s1 + r0, (s0, s1)), hints={s0: 2**16, s1: 2**16})
    assert uses_int64(hinted_big) and hinted_big.source_int64 is None


def test_bounds_that_fold_to_numbers_once_sizes_are_positive_are_compared():
    """Fuzz seed 132 #457: the launch guard's bounds 3*s0**2 and 3*s0*(s0**2 // s0) - 1 differ by a number
    only once s0 > 0 is known (FloorDiv folds); comparing them raised sympy's GeneratorsNeeded and the whole
    backward graph ran in ATen."""
    from torch.utils._sympy.functions import FloorDiv   # sizes from the shape environment carry torch's

    from fuse_all_codegen_triton.indexing import _dominant
    large, small = 3 * s0**2, 3 * s0 * FloorDiv(s0**2, s0) - 1
    assert _dominant([large, small]) == [large]
    assert _dominant([small, large]) == [large]


def test_a_floor_division_bounds_its_quotient_not_its_dividend():
    """A split row of an NCHW BatchNorm: chunk x0 of 2 images, r0 walks (image, pixel) as
    802816 * (r0 // 12544) + r0 % 12544. The quotient is at most 2, so every value stays in int32 (the
    dividend's bound, 802816 * 25087, sent it to int64: 41 against ~30 us on the H200)."""
    from fuse_all_ir import FloorDiv, ModularIndexing
    index = 1605632 * x0 + 802816 * FloorDiv(r0, 12544) + ModularIndexing(r0, 1, 12544)
    rendered = render(reduction((16,), (25088,), index))
    assert not uses_int64(rendered) and rendered.spec["size_type"] == "i32", rendered.source
    # the same walk over 1400 chunks does pass 2**31
    assert uses_int64(render(reduction((1400,), (25088,), index)))

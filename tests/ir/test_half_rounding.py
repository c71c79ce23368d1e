"""fuse_all_ir.rounding: every ATen op's float16/bfloat16 result is rounded once, as eager's tensors are."""
from __future__ import annotations

import pytest
import torch

import fuse_all_ir as ir
from ir_testing import lower


def _roundings(compiled) -> dict[str, int]:
    """Per dtype, how many `cast`s of a value to its own dtype (a rounding) the kernels compute."""
    counts: dict[str, int] = {}
    for kernel in compiled.program.kernels.values():
        statements = list(kernel.statements())
        dtypes = {s.name: s.dtype for s in statements if hasattr(s, "name") and hasattr(s, "dtype")}
        for s in statements:
            if isinstance(s, ir.Compute) and s.op == "cast" and dtypes.get(s.args[0]) == s.dtype:
                counts[s.dtype] = counts.get(s.dtype, 0) + 1
    return counts


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_each_aten_result_of_a_narrow_float_chain_is_rounded_once(dtype):
    def fn(x, y):
        # mul, add, sigmoid, sub: rounded; abs, neg and maximum of rounded values are exact; the output
        # is stored, and the store rounds: its mul is not rounded before
        return (torch.maximum(-(x - y).abs(), torch.sigmoid(x * y + x)) * 0.5,)
    x, y = torch.randn(64, dtype=dtype), torch.randn(64, dtype=dtype)
    assert _roundings(lower(fn, x, y)) == {str(dtype).replace("torch.", ""): 4}


def test_float32_chains_are_not_rounded():
    def fn(x, y):
        return (torch.sigmoid(x * y + x) * (x - y).abs(),)
    assert _roundings(lower(fn, torch.randn(64), torch.randn(64))) == {}


def test_a_layer_norm_rounds_its_output_not_its_internals():
    """Eager's layer norm computes in float32 and rounds its output once; the lowering does the same
    (its add input is an ATen result of its own: one more rounding)."""
    ln = torch.nn.LayerNorm(32, dtype=torch.float16)

    def fn(x, y):
        return (torch.nn.functional.gelu(ln(x + y)),)
    with torch.no_grad():
        compiled = lower(fn, torch.randn(8, 32, dtype=torch.float16), torch.randn(8, 32, dtype=torch.float16))
    counts = _roundings(compiled)
    assert 0 < counts.get("float16", 0) <= 4, counts

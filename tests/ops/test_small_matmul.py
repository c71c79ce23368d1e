"""Skinny matrix products as generated reductions (fuse_all_ir/lowerings_matmul.py; Triton's
`small_matmul_rows`): `mm`/`addmm` with few rows or few columns are a sum over K fused with their bias add and
consumers, in every operand layout and float dtype, with gradients and symbolic sizes; larger products, float64
and the C++ target keep ATen. Values are judged against float64 relative to eager's own error (a sum over K in
another order rounds differently; a real loss of precision does not pass)."""
import pytest
import torch
import torch.nn.functional as F

import fuse_all
from fuse_all_optest import BOTH, TOL, assert_near_float64, check, compile_fn, extern_targets, make

PRODUCTS = {"aten.mm.default", "aten.addmm.default"}
TRITON = pytest.param("triton", marks=pytest.mark.triton)


def judged(fn, *inputs, codegen="triton", dynamic=None):
    """Compile `fn`, run it on `inputs`, and hold its output to float64 relative to eager's error."""
    fuse_all.reset()
    torch._dynamo.reset()
    actual = compile_fn(fn, codegen, dynamic=dynamic)(*inputs)
    eager = fn(*inputs)
    reference = fn(*[x.double() if x.is_floating_point() else x for x in inputs])
    assert_near_float64(actual, eager, reference, "output", atol=TOL[actual.dtype][0])
    return actual


@pytest.mark.parametrize("rows", [1, 5, 12])
@pytest.mark.parametrize("codegen", BOTH)
def test_small_batch_linear_and_its_activation_are_one_kernel(codegen, rows):
    x, w, b = make((rows, 40)), make((24, 40)), make((24,))
    judged(lambda x, w, b: F.gelu(F.linear(x, w, b)), x, w, b, codegen=codegen)
    graph = fuse_all.compiled_graphs()[0]
    if codegen == "triton":
        assert extern_targets(PRODUCTS) == [] and len(graph.kernels) == 1, (graph.kernels, graph.externs)
    else:
        assert extern_targets(PRODUCTS) == ["aten.addmm.default"]


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("side", ["few_rows", "few_columns"])
def test_every_operand_layout_from_either_side(side, layout):
    if side == "few_rows":
        a, b = make((3, 50), layout=layout), make((50, 64), layout=layout)
    else:
        a, b = make((64, 50), layout=layout), make((50, 3), layout=layout)
    judged(lambda a, b: a @ b, a, b)
    assert extern_targets(PRODUCTS) == []


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_operands_accumulate_in_float32_and_round_once(dtype):
    x, w, b = make((4, 96), dtype), make((32, 96), dtype), make((32,), dtype)
    out = judged(lambda x, w, b: F.linear(x, w, b), x, w, b)
    assert out.dtype == dtype and extern_targets(PRODUCTS) == []


@pytest.mark.parametrize("shape, why", [
    (((17, 32), (32, 24)), "neither side small"),
    (((12, 32), (32, 2048)), "more outputs than pay"),
])
def test_larger_products_stay_in_aten(shape, why, caplog):
    """By design (cuBLAS is faster there): the report gives the reason, and no fallback warning is logged."""
    (a, b) = (make(s) for s in shape)
    with caplog.at_level("WARNING", logger="fuse_all"):
        judged(lambda a, b: a @ b, a, b)
    assert extern_targets(PRODUCTS) == ["aten.mm.default"], why
    (extern,) = [e for g in fuse_all.compiled_graphs() for e in g.externs]
    assert "product" in extern.reason
    assert "instead of fused kernels" not in caplog.text


def test_float64_stays_in_aten():
    a, b = make((2, 8), torch.float64), make((8, 8), torch.float64)
    check(lambda a, b: a @ b, a, b, codegen="triton")
    assert extern_targets(PRODUCTS) == ["aten.mm.default"]


def test_a_computed_operand_is_computed_once_not_per_output():
    """gelu(x) read by a product: written once and read by the reduction (inlined, each GELU would be
    evaluated once per output column)."""
    x, w = make((6, 64)), make((64, 32))
    judged(lambda x, w: F.gelu(x) @ w, x, w)
    graph = fuse_all.compiled_graphs()[0]
    reductions = [k for k in graph.kernels if k.reduction]
    assert len(reductions) == 1 and len(graph.kernels) == 2, graph.kernels
    source = open(graph.output_code).read()
    assert source.count("erf(") == 1, "the GELU is evaluated in one kernel, once"


def test_small_batch_training_gradients():
    net = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    check(net, make((4, 16)), codegen="triton", grad=True, grad_vs_float64=True, atol=1e-4, rtol=1e-4)
    # forward: both layers; backward: the input gradients (4 rows) and the 3-column weight gradient's
    # transpose stay reductions where small; the 8 x 16 weight gradient (over 4 rows) is an ATen call
    assert "aten.addmm.default" not in extern_targets(PRODUCTS)


def test_matrix_vector_products_with_symbolic_sizes():
    """One row (specialized by Dynamo) times a matrix whose sizes vary between calls."""
    fuse_all.reset()
    torch._dynamo.reset()

    def fn(x, w):
        return torch.tanh(x @ w)
    compiled = compile_fn(fn, "triton", dynamic=True)
    for k, n in ((24, 40), (33, 17)):
        x, w = make((1, k)), make((k, n))
        actual = compiled(x, w)
        assert_near_float64(actual, fn(x, w), fn(x.double(), w.double()), f"output {k}x{n}", atol=1e-5)
    assert extern_targets(PRODUCTS) == []

"""`route_matmuls`: which traced float32 products go to the target's own product op (`FusionChoices.fp32_matmul`)
and that the rewritten graph computes the same. The graphs are traced with fake CUDA tensors (no GPU needed)
and run on CPU, where a stand-in op does the product in float64."""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from fuse_all_ir import matmul_route
from fuse_all_ir.lowering import EXTERN_REASON
from fuse_all_ir.matmul_route import refusal, route_matmuls

aten = torch.ops.aten


def stand_in(a, b, bias=None):
    """What the op computes, for running rewritten graphs here."""
    product = torch.matmul(a.double(), b.double())
    return (product if bias is None else product + bias.double()).float()


def _trace(fn, *shapes, dtype=torch.float32, device="cuda"):
    with FakeTensorMode():
        args = [torch.empty(s, dtype=dtype, device=device) for s in shapes]
        return make_fx(fn)(*args)


def _routed(gm):
    return [n for n in gm.graph.nodes if n.target is stand_in]


def _linear(x, w, b):
    return torch.relu(aten.addmm(b, x, w.t()))


def test_large_products_route_and_compute_the_same():
    def fn(x, w, b, q, k):
        return _linear(x, w, b), aten.mm(x, w.t()), aten.bmm(q, k.transpose(1, 2))
    shapes = ((1024, 768), (512, 768), (512,), (256, 128, 64), (256, 128, 64))
    gm = _trace(fn, *shapes)
    assert route_matmuls(gm, stand_in) == 3
    gm.graph.lint()
    routed = _routed(gm)
    assert len(routed) == 3 and all(n.meta[EXTERN_REASON] == matmul_route.REASON for n in routed)
    assert not [n for n in gm.graph.nodes if n.target in matmul_route.PRODUCTS]
    addmm = routed[0]
    assert addmm.args[2].target is not None and len(addmm.args) == 3   # (x, w.t(), bias)
    assert tuple(addmm.meta["val"].shape) == (1024, 512)
    args = [torch.randn(s) for s in shapes]
    for got, expected in zip(gm(*args), fn(*[a.double() for a in args])):
        torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case, why", [
    ("small", "multiply-adds"), ("skinny", "skinny"), ("half", "float32 only"), ("cpu", "CUDA"),
    ("scaled", "beta or alpha"), ("int_bias", "bias"),
])
def test_what_stays_aten(case, why):
    shapes, dtype, device = ((256, 256), (256, 256), (256,)), torch.float32, "cuda"
    fn = _linear
    if case == "skinny":
        shapes = ((64, 4096), (4096, 4096), (4096,))
    elif case == "half":
        shapes, dtype = ((1024, 1024), (1024, 1024), (1024,)), torch.float16
    elif case == "cpu":
        shapes, device = ((1024, 1024), (1024, 1024), (1024,)), "cpu"
    elif case == "scaled":
        shapes = ((1024, 1024), (1024, 1024), (1024,))
        fn = lambda x, w, b: aten.addmm(b, x, w, beta=0.5)   # noqa: E731
    elif case == "int_bias":
        shapes = ((1024, 1024), (1024, 1024))
        fn = lambda x, w: aten.addmm(torch.ones(1024, dtype=torch.int64, device=x.device), x, w)  # noqa: E731
    gm = _trace(fn, *shapes, dtype=dtype, device=device)
    product = next(n for n in gm.graph.nodes if n.target in matmul_route.PRODUCTS)
    assert why in refusal(product)
    assert route_matmuls(gm, stand_in) == 0


def test_symbolic_sizes_route_and_the_op_decides_per_call():
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    shape_env = ShapeEnv()
    rows = shape_env.create_symintnode(shape_env.create_symbol(300, ConstantSource("rows")), hint=300)
    graph = torch.fx.Graph()
    x, w = graph.placeholder("x"), graph.placeholder("w")
    product = graph.call_function(aten.mm.default, (x, graph.call_function(aten.t.default, (w,))))
    graph.output(product)
    with FakeTensorMode(shape_env=shape_env):
        x.meta["val"], w.meta["val"] = torch.empty(rows, 256, device="cuda"), torch.empty(128, 256, device="cuda")
        product.args[1].meta["val"] = w.meta["val"].t()
        product.meta["val"] = torch.mm(x.meta["val"], product.args[1].meta["val"])
    assert refusal(product) is None     # rows x 256 x 128: no static size test (the op benchmarks per call)
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    assert route_matmuls(gm, stand_in) == 1


def test_the_triton_choice_is_off_without_a_cuda_gpu(monkeypatch):
    from fuse_all_codegen_triton import TritonChoices
    from fuse_all_ir import FusionChoices
    assert FusionChoices().fp32_matmul("cuda") is None
    assert TritonChoices().fp32_matmul("cpu") is None
    monkeypatch.setenv("FUSE_ALL_TF32X3_MATMUL", "0")
    assert TritonChoices().tf32x3_matmul is False


@pytest.mark.parametrize("case", ["dX", "dW"])
def test_a_strided_contraction_routes_and_the_op_copies_it(case):
    """The backward's products: dX = dY @ W (W's contraction dim, its rows, strided) and dW = dY.t() @ X
    (both strided). The op reads K-major copies and benchmarks them, copy included, against cuBLAS."""
    fn = (lambda dy, w: aten.mm(dy, w)) if case == "dX" else (lambda dy, x: aten.mm(aten.t(dy), x))  # noqa: E731
    gm = _trace(fn, (1024, 768), (768, 3072) if case == "dX" else (1024, 3072), device="cuda")
    product = next(n for n in gm.graph.nodes if n.target in matmul_route.PRODUCTS)
    assert refusal(product) is None
    assert route_matmuls(gm, stand_in) == 1

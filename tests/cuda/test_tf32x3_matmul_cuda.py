"""Large float32 products on tensor cores (marker `cuda`; fuse_all_codegen_triton/matmul.py,
fuse_all_ir/matmul_route.py): the op against float64 relative to cuBLAS's float32 error at BERT's sizes,
its per-signature choice (benchmarked once, remembered on disk, cuBLAS during a capture), and compiled
graphs that route their products to it: inference, a training step, reduce-overhead, the switches.

    source bench/gpu_env.sh && python -m pytest tests/cuda/test_tf32x3_matmul_cuda.py -m cuda -q
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import fuse_all
from fuse_all_optest import TOL, assert_near_float64, check, compile_fn, extern_targets

pytestmark = pytest.mark.cuda
DEVICE = "cuda"
OP_NAME = "fuse_all_triton.matmul.default"


@pytest.fixture()
def matmul():
    from fuse_all_codegen_triton import matmul
    matmul._plans.clear()
    matmul._fast.clear()
    return matmul


def near(actual, eager, reference):
    assert_near_float64(actual, eager, reference, "product", atol=0, factor=1.5)


@pytest.mark.parametrize("m, k, n", [(4096, 768, 768), (1024, 3072, 768), (1000, 777, 1030)])
@pytest.mark.parametrize("layout", ["weight_t", "plain", "a_t"])
def test_op_accuracy_at_least_cublas(matmul, m, k, n, layout):
    """Every candidate the op may choose (each tensor-core config, forced) errs no more than 1.5x cuBLAS's
    float32 SGEMM against float64."""
    a = torch.randn(m, k, device=DEVICE) if layout != "a_t" else torch.randn(k, m, device=DEVICE).t()
    b = torch.randn(n, k, device=DEVICE).t() if layout == "weight_t" else torch.randn(k, n, device=DEVICE)
    reference = a.double() @ b.double()
    eager = a @ b
    for config in range(len(matmul.CONFIGS)):
        near(matmul._launch(a, b, None, config), eager, reference)
    near(matmul.OP(a, b), eager, reference)


def test_op_batched_and_bias(matmul):
    a, b = torch.randn(48, 128, 64, device=DEVICE), torch.randn(48, 128, 64, device=DEVICE).transpose(1, 2)
    near(matmul._launch(a, b, None, 0), torch.bmm(a, b), a.double() @ b.double())
    x, w, bias = torch.randn(512, 768, device=DEVICE), torch.randn(3072, 768, device=DEVICE), torch.randn(3072, device=DEVICE)
    near(matmul._launch(x, w.t(), bias, 1), torch.addmm(bias, x, w.t()), torch.addmm(bias.double(), x.double(), w.double().t()))


@pytest.mark.parametrize("case", ["dX", "dW", "batched"])
def test_a_strided_contraction_runs_on_k_major_copies(matmul, monkeypatch, case):
    """The backward's products (dX = dY @ W: W N-major; dW = dY.t() @ X: both strided along K) and attention's
    P @ V: benchmarked with the K-major copies included, remembered on disk; every config, forced, is as
    accurate as cuBLAS and its direct launch (second call) gives the same bits."""
    if case == "dX":
        a, b = torch.randn(1024, 768, device=DEVICE), torch.randn(768, 3072, device=DEVICE)
    elif case == "dW":
        a, b = torch.randn(1024, 768, device=DEVICE).t(), torch.randn(1024, 3072, device=DEVICE)
    else:
        a, b = torch.randn(24, 128, 128, device=DEVICE), torch.randn(24, 128, 64, device=DEVICE)
    signature = matmul._signature(a, b, None)
    reference, eager = a.double() @ b.double(), a @ b
    near(matmul.OP(a, b), eager, reference)
    from fuse_all_codegen_triton import autotune
    assert autotune.load_choice(matmul._tuning_key(signature)) == {"choice": matmul._plans[signature]}
    for config in range(len(matmul.CONFIGS)):
        matmul._plans[signature] = config
        first = matmul.OP(a, b)
        near(first, eager, reference)
        general = matmul.run_kernel
        monkeypatch.setattr(matmul, "run_kernel", lambda *args, **kwargs: pytest.fail("general launch"))
        assert torch.equal(matmul.OP(a, b), first)
        monkeypatch.setattr(matmul, "run_kernel", general)


def test_choice_is_benchmarked_once_and_remembered(matmul):
    a, b = torch.randn(2048, 768, device=DEVICE), torch.randn(768, 768, device=DEVICE).t()
    matmul.OP(a, b)
    signature = matmul._signature(a, b, None)
    choice = matmul._plans[signature]
    assert choice in (matmul.CUBLAS, *range(len(matmul.CONFIGS)))
    from fuse_all_codegen_triton import autotune
    entry = autotune.load_choice(matmul._tuning_key(signature))
    assert entry == {"choice": choice}
    matmul._plans.clear()   # a new process: the disk entry answers, no benchmark
    calls = []
    original = autotune.benchmark
    autotune.benchmark = lambda *args: calls.append(1) or original(*args)
    try:
        matmul.OP(a, b)
    finally:
        autotune.benchmark = original
    assert calls == [] and matmul._plans[signature] == choice


@pytest.mark.parametrize("case", ["plain", "bias", "batched"])
def test_a_known_signature_launches_directly(matmul, monkeypatch, case):
    """From a signature's second call the op launches Triton's compiled kernel itself (`_FastLaunch`: no
    argument binding): the same kernel, so the same bits as the general launch; an unaligned operand of the
    same signature takes the general launch again."""
    if case == "batched":
        a, b, bias = torch.randn(12, 256, 64, device=DEVICE), torch.randn(12, 128, 64, device=DEVICE).transpose(1, 2), None
    else:
        a, b = torch.randn(1000, 768, device=DEVICE), torch.randn(1030, 768, device=DEVICE).t()
        bias = torch.randn(1030, device=DEVICE) if case == "bias" else None
    signature = matmul._signature(a, b, bias)
    for config in range(len(matmul.CONFIGS)):
        matmul._plans[signature] = config          # the choice, forced: each config's launch
        expected = matmul._launch(a, b, bias, config)
        first = matmul.OP(a, b, bias)
        assert (signature, config) in matmul._fast
        general = matmul.run_kernel
        monkeypatch.setattr(matmul, "run_kernel", lambda *args, **kwargs: pytest.fail("general launch"))
        second = matmul.OP(a, b, bias)
        monkeypatch.setattr(matmul, "run_kernel", general)
        assert torch.equal(first, expected) and torch.equal(second, expected)
        a_off = torch.empty(a.numel() + 1, device=DEVICE)[1:].view(a.shape).copy_(a)   # 4 bytes off
        assert matmul._signature(a_off, b, bias) == signature
        torch.testing.assert_close(matmul.OP(a_off, b, bias), expected, rtol=1e-5, atol=1e-4)


def test_an_unseen_signature_under_capture_takes_cublas(matmul):
    a, b = torch.randn(1536, 768, device=DEVICE), torch.randn(1024, 768, device=DEVICE).t()
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.stream(stream):
        # the warm-up CUDA graphs ask for: cuBLAS creates its handle at a process's first product, which a
        # capture cannot do (this test ran first in its worker once, and its failed capture broke the rest)
        torch.mm(a, b)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            out = matmul.OP(a, b)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, a @ b)
    assert matmul._signature(a, b, None) not in matmul._plans   # not remembered: the next plain call measures


def _ffn(x, w1, b1, w2, b2):
    return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)


def _ffn_inputs(rows=2048):
    return (torch.randn(rows, 768, device=DEVICE), torch.randn(3072, 768, device=DEVICE) / 28,
            torch.randn(3072, device=DEVICE), torch.randn(768, 3072, device=DEVICE) / 55, torch.randn(768, device=DEVICE))


def test_compiled_products_route_to_the_op():
    inputs = _ffn_inputs()
    actual = compile_fn(_ffn, "triton")(*inputs)
    assert extern_targets().count(OP_NAME) == 2 and "aten.mm.default" not in extern_targets()
    reference = _ffn(*[x.double() for x in inputs])
    assert_near_float64(actual, _ffn(*inputs), reference, "output", atol=TOL[actual.dtype][0])
    graph = fuse_all.compiled_graphs()[0]
    assert "import fuse_all_codegen_triton.matmul" in Path(graph.output_code).read_text()


@pytest.mark.parametrize("switch", ["env", "allow_tf32"])
def test_the_switches_keep_cublas(monkeypatch, switch):
    if switch == "env":
        monkeypatch.setenv("FUSE_ALL_TF32X3_MATMUL", "0")
    else:
        monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
    compile_fn(_ffn, "triton")(*_ffn_inputs())
    products = extern_targets({"aten.mm.default", "aten.addmm.default"})
    assert OP_NAME not in extern_targets() and len(products) == 2


def test_training_step_against_float64():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(768, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 768)).to(DEVICE)
    x = torch.randn(1024, 768, device=DEVICE)
    check(net, x, codegen="triton", grad=True, grad_vs_float64=True, atol=1e-4, rtol=1e-4)
    assert OP_NAME in extern_targets()


def test_reduce_overhead_replays_the_op():
    inputs = _ffn_inputs(1024)
    fn = torch.compile(_ffn, backend="fuse_all", mode="reduce-overhead")
    expected = _ffn(*inputs)
    for _ in range(4):
        out = fn(*inputs)
    torch.testing.assert_close(out, expected, rtol=2e-4, atol=2e-4)
    assert OP_NAME in extern_targets()

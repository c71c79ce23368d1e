"""Skinny matrix products as generated reductions on the GPU (marker `cuda`; fuse_all_ir/lowerings_matmul.py):
BERT's small-batch layers at their real sizes (12 rows of 768 / 3072), a matrix-vector head, half operands
and a small-batch training step, judged against float64 relative to eager's (cuBLAS's) own error.

    source bench/gpu_env.sh && python -m pytest tests/cuda/test_small_matmul_cuda.py -m cuda -q
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fuse_all
from fuse_all_optest import TOL, assert_near_float64, check, compile_fn, extern_targets

pytestmark = pytest.mark.cuda
DEVICE = "cuda"
PRODUCTS = {"aten.mm.default", "aten.addmm.default"}


def judged(fn, *inputs):
    fuse_all.reset()
    torch._dynamo.reset()
    actual = compile_fn(fn, "triton")(*inputs)
    reference = fn(*[x.double() for x in inputs])
    assert_near_float64(actual, fn(*inputs), reference, "output", atol=TOL[actual.dtype][0])


@pytest.mark.parametrize("k, n", [(768, 768), (3072, 768), (2048, 1000)])
@pytest.mark.parametrize("rows", [1, 12])
def test_bert_sized_layers(rows, k, n):
    x = torch.randn(rows, k, device=DEVICE)
    w, b = torch.randn(n, k, device=DEVICE) / k ** 0.5, torch.randn(n, device=DEVICE)
    judged(lambda x, w, b: F.gelu(F.linear(x, w, b)), x, w, b)
    assert extern_targets(PRODUCTS) == []
    assert len(fuse_all.compiled_graphs()[0].kernels) == 1


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_operands(dtype):
    x = torch.randn(8, 1024, device=DEVICE, dtype=dtype)
    w, b = torch.randn(512, 1024, device=DEVICE, dtype=dtype) / 32, torch.randn(512, device=DEVICE, dtype=dtype)
    judged(lambda x, w, b: F.linear(x, w, b), x, w, b)
    assert extern_targets(PRODUCTS) == []


def test_wide_products_keep_cublas():
    x, w = torch.randn(12, 768, device=DEVICE), torch.randn(3072, 768, device=DEVICE)
    judged(lambda x, w: F.linear(x, w), x, w)
    assert extern_targets(PRODUCTS) == ["aten.mm.default"]


def test_small_batch_training_step():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(256, 128), torch.nn.GELU(), torch.nn.Linear(128, 10)).to(DEVICE)
    x = torch.randn(4, 256, device=DEVICE)
    check(net, x, codegen="triton", grad=True, grad_vs_float64=True, atol=1e-4, rtol=1e-4)

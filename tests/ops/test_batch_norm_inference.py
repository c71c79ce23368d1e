"""Inference batch norm reaches the IR as one op (`_native_batch_norm_legit_no_training`, kept out of the
decomposition table) and is lowered as one pointwise map with the arithmetic of torch's decomposition, which
fuse-all used before: the same bits on the C++ path, eager's accuracy on both codegens, for NCHW and
channels-last inputs, 1-d/2-d/3-d batch norms, without weight or bias, and float16 inputs."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fuse_all
from fuse_all_optest import compile_fn
from test_welford import assert_within_eager_error

CODEGENS = ["cpp", pytest.param("triton", marks=pytest.mark.triton)]


def _statistics(channels: int, affine: bool = True) -> tuple:
    """running mean, running var, weight, bias (None without affine), away from 0 and 1."""
    torch.manual_seed(0)
    mean, var = torch.empty(channels).uniform_(-2, 2), torch.empty(channels).uniform_(0.1, 3)
    if not affine:
        return mean, var, None, None
    return mean, var, torch.empty(channels).uniform_(-2, 2), torch.empty(channels).uniform_(-1, 1)


def _normalize(t, mean, var, weight=None, bias=None):
    return torch.relu(F.batch_norm(t, mean, var, weight, bias, training=False, eps=1e-3)) * 2


CASES = {
    "2d": ((3, 6, 5, 7), True, False),
    "2d channels-last": ((3, 6, 5, 7), True, True),
    "1d": ((4, 6, 9), True, False),
    "3d without affine": ((2, 6, 3, 4, 5), False, False),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("codegen", CODEGENS)
def test_inference_batch_norm_matches_eager(case, codegen):
    shape, affine, channels_last = CASES[case]
    x = torch.randn(shape) * 3 + 0.5
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    stats = [s for s in _statistics(shape[1], affine) if s is not None]
    assert_within_eager_error(_normalize, (x, *stats), codegen)


def test_the_cpp_lowering_gives_the_bits_of_the_decomposed_graph():
    """The same values as torch's decomposition compiled by fuse-all (Dynamo traces the decomposition's own
    code into the ATen ops it is made of), in one kernel (the decomposition's copies of the statistics make
    a second)."""
    from torch._decomp.decompositions import _native_batch_norm_legit_no_training as decomposition
    mean, var, weight, bias = _statistics(16)
    x = torch.randn(4, 16, 9, 9) * 5

    def whole(t):
        return F.batch_norm(t, mean, var, weight, bias, training=False, eps=1e-5)

    def decomposed(t):
        return decomposition(t, weight, bias, mean, var, 0.1, 1e-5)[0]

    def compiled(fn):
        fuse_all.reset()
        torch._dynamo.reset()
        out = compile_fn(fn, "cpp")(x)
        (graph,) = fuse_all.compiled_graphs()
        return out, len(graph.kernels), len(graph.externs)
    lowered, kernels, externs = compiled(whole)
    reference, _, _ = compiled(decomposed)
    assert (kernels, externs) == (1, 0)
    assert torch.equal(lowered, reference)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_float16_inputs_with_float32_statistics(codegen):
    x = (torch.randn(2, 8, 6, 6) * 2).half()
    mean, var, weight, bias = _statistics(8)

    def fn(t, mean, var, weight, bias):
        return F.batch_norm(t, mean.to(t.dtype), var.to(t.dtype), weight.to(t.dtype), bias.to(t.dtype),
                            training=False) + t
    assert_within_eager_error(fn, (x, mean, var, weight, bias), codegen)

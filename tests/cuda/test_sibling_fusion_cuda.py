"""Fusion coverage compiled for the GPU (marker `cuda`): BatchNorm backward NCHW (one kernel) and
channels-last where the split reductions apply (the backward's two sums one reduction kernel, split into
partial + final kernels together); LayerNorm backward's weight and bias column sums as siblings; a
pointwise sibling stored from a split reduction's partial kernel, a softmax kept apart from a split sum (its
reason in the report). Values and gradients against
float64 relative to eager's own error. Run: python -m pytest -m cuda tests/cuda/test_sibling_fusion_cuda.py"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fuse_all
import fuse_all_optest as ot

pytestmark = pytest.mark.cuda


def _graphs():
    graphs = fuse_all.compiled_graphs()
    assert graphs and all(g.fallback_reason is None and g.language == "triton" for g in graphs)
    return graphs


def _sibling_notes(kind="backward"):
    return [g["why"] for graph in _graphs() if graph.kind == kind for g in graph.report.groups
            if "siblings" in g["why"]]


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_batchnorm_backward_sums_fused_and_split(layout):
    # 32 channels of 16 x 57 x 59: NCHW, the rows are too short to split (choose_row_splits) and the whole
    # backward is one kernel; channels-last, the column sums split (choose_column_splits) and the pointwise
    # work stays out of them (split_would_be_lost) while the two sums are split together
    bn = torch.nn.BatchNorm2d(32).cuda()
    x = ot.make((16, 32, 57, 59), layout=layout).cuda().requires_grad_()
    ot.check(bn, x, codegen="triton", grad=True, grad_vs_float64=True, atol=1e-4, rtol=1e-4)
    (backward,) = [g for g in _graphs() if g.kind == "backward"]
    reduces = [sum(type(s).__name__ == "Reduce" for s in k.statements()) for k in backward.kernels]
    if layout == "contiguous":
        assert len(backward.kernels) <= 2 and max(reduces) >= 2, [k.name for k in backward.kernels]
    else:
        partials = [k for k in backward.kernels if "_part" in k.name]
        assert any(sum(type(s).__name__ == "Reduce" for s in k.statements()) >= 2 for k in partials), \
            "the fused sums were not split together"


def test_layernorm_backward_weight_and_bias_sums():
    x = ot.make((4096, 768)).cuda().requires_grad_()
    w, b = ot.make((768,)).cuda().requires_grad_(), ot.make((768,)).cuda().requires_grad_()
    ot.check(lambda x, w, b: F.layer_norm(x, (768,), w, b).tanh(), x, w, b, codegen="triton", grad=True,
             grad_vs_float64=True, atol=1e-4, rtol=1e-4)
    assert any("per point of (768)" in n and "both read" in n for n in _sibling_notes())


def test_pointwise_sibling_joins_a_split_reduction():
    # 16 rows of 131072: the row sums split over programs (choose_row_splits); exp over the same space joins
    # them, stored from the split's partial kernel (each element in exactly one chunk)
    compiled = torch.compile(lambda x: (x.exp(), x.sum(1)), backend="fuse_all")
    x = ot.make((16, 131072)).cuda()
    e, s = compiled(x)
    torch.testing.assert_close(e, x.exp())
    ot.assert_near_float64(s, x.sum(1), x.double().sum(1), "sum", atol=1e-4)
    (graph,) = _graphs()
    assert not graph.report.siblings_kept_apart
    (partial,) = [k for k in graph.kernels if "_part" in k.name]
    assert len(graph.kernels) == 2 and any(not out.startswith(partial.name) for out in partial.outputs)


def test_softmax_stays_whole_beside_a_split_reduction():
    # a phase that only stores (softmax's normalisation) has nothing to combine: the softmax kernel is not
    # split and the row sums it does not share stay their own split kernel
    compiled = torch.compile(lambda x: (torch.softmax(x, 1), (x * 2).sum(1)), backend="fuse_all")
    x = ot.make((16, 131072)).cuda()
    p, s = compiled(x)
    torch.testing.assert_close(p, torch.softmax(x, 1))
    ot.assert_near_float64(s, (x * 2).sum(1), (x.double() * 2).sum(1), "sum", atol=1e-4)
    (graph,) = _graphs()
    reasons = [r["reason"] for r in graph.report.siblings_kept_apart]
    assert any(r.startswith("the reduction is split over the GPU") for r in reasons), reasons
    assert sorted(k.name for k in graph.kernels) == ["kernel_0", "kernel_1", "kernel_1_part0"]

"""Split reductions compiled for the GPU (marker `cuda`), at sizes where `choose_column_splits` /
`choose_row_splits` split on their own (no FUSE_ALL_COLUMN_SPLITS): few columns or few long contiguous rows,
lengths that do not divide into the chunks."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fuse_all
import fuse_all_optest as ot

pytestmark = pytest.mark.cuda


def _split_kernels() -> int:
    graphs = fuse_all.compiled_graphs()
    assert graphs and all(g.fallback_reason is None and g.language == "triton" for g in graphs)
    return sum("_part" in k.name for g in graphs for k in g.kernels)


CASES = {
    "sum_dim0": (lambda x: x.sum(0), lambda: (ot.make((3001, 2049)),), 1),
    # a variance is one split phase (Welford partials, issue 11)
    "var_mean_dim0": (lambda x: torch.var_mean(x, 0), lambda: (ot.make((20011, 96)),), 1),
    "batchnorm_channels_last_odd": (
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        lambda: (ot.make((5, 64, 37, 41)).to(memory_format=torch.channels_last), ot.make((64,)), ot.make((64,))), 1),
    "full_sum_odd": (lambda x: x.sum(), lambda: (ot.make((3_000_017,)),), 1),
    "batchnorm_nchw": (lambda x: F.batch_norm(x, None, None, training=True), lambda: (ot.make((17, 16, 61, 67)),), 1),
}


@pytest.mark.parametrize("case", list(CASES))
def test_split_on_gpu(case):
    fn, inputs, phases = CASES[case]
    ot.check(fn, *(t.to("cuda") for t in inputs()), codegen="triton", atol=1e-4, rtol=1e-4)
    assert _split_kernels() >= phases


def test_split_batchnorm_backward_on_gpu():
    bn = torch.nn.BatchNorm2d(32).cuda()
    x = ot.make((8, 32, 33, 35)).cuda().to(memory_format=torch.channels_last).requires_grad_()
    ot.check(bn, x, codegen="triton", grad=True, grad_vs_float64=True, atol=1e-4, rtol=1e-4)
    assert _split_kernels() >= 2   # the statistics (one Welford phase) and the backward's sums


def test_split_sums_against_float64_on_gpu():
    x = ot.make((262144, 64), low=0.5, high=1.5).cuda() * 3 + 100
    compiled = torch.compile(lambda t: (t.sum(0), torch.var_mean(t, 0)), backend="fuse_all")
    s, (v, m) = compiled(x)
    x64 = x.double()
    ref_v, ref_m = torch.var_mean(x64, 0)
    eager_v, eager_m = torch.var_mean(x, 0)
    for label, a, e, r in (("sum", s, x.sum(0), x64.sum(0)), ("var", v, eager_v, ref_v), ("mean", m, eager_m, ref_m)):
        ot.assert_near_float64(a, e, r, label, atol=1e-6 * r.abs().max().item())
    assert _split_kernels() >= 1   # sum and mean share one Reduce; the variance joins them (sibling fusion)


def test_split_batchnorm_nchw_backward_on_gpu():
    bn = torch.nn.BatchNorm2d(16).cuda()
    x = ot.make((17, 16, 61, 67)).cuda().requires_grad_()
    ot.check(bn, x, codegen="triton", grad=True, grad_vs_float64=True, atol=1e-4, rtol=1e-4)
    assert _split_kernels() >= 2   # the statistics (one Welford phase) and the backward's sums

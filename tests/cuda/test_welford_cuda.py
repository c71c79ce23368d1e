"""One-pass variance on the GPU (issue 11, marker `cuda`): training BatchNorm statistics of the H200 bench row
batchnorm_channels_last_64x256x64x64 read the input once (one looped Welford phase per split chunk, the
chunks' (mean, M2) combined in the final kernel), and variance on adversarial data (mean 1e4, tiny spread)
stays within eager's float32 error against float64 on the looped and split paths."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fuse_all
import fuse_all_optest as ot

pytestmark = pytest.mark.cuda


def _sources() -> dict:
    graphs = fuse_all.compiled_graphs()
    assert graphs and all(g.fallback_reason is None and g.language == "triton" for g in graphs)
    sources = {}
    for g in graphs:
        sources.update(g.kernel_sources)
    return sources


def test_batchnorm_channels_last_statistics_read_the_input_once():
    fuse_all.reset()
    torch.manual_seed(0)
    x = (torch.randn(64, 256, 64, 64, device="cuda") * 2 + 30).to(memory_format=torch.channels_last)
    w, b = torch.rand(256, device="cuda") + 0.5, torch.randn(256, device="cuda")
    fn = lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True)   # noqa: E731
    out = torch.compile(fn, backend="fuse_all")(x, w, b)
    ot.assert_near_float64(out, fn(x, w, b), fn(x.double(), w.double(), b.double()), "batch_norm",
                           atol=1e-5)
    partials = {n: s for n, s in _sources().items() if "_part" in n}
    assert len(partials) == 1, list(_sources())
    (source,) = partials.values()
    # one loop over the chunk, the element and the row's first element (its shift) loaded
    assert source.count("for roffset") == 1 and source.count("tl.load(in_ptr0") == 2, source
    assert "fa.welford_combine" in source


@pytest.mark.parametrize("shape, dim", [((8, 300_000), -1), ((300_000, 64), 0), ((4, 20_000), -1)])
@pytest.mark.parametrize("spread", [1.0, 1e-3])
def test_variance_against_float64_on_gpu(shape, dim, spread):
    fuse_all.reset()
    torch.manual_seed(0)
    x = (torch.randn(shape, device="cuda", dtype=torch.float64) * spread + 1e4).float()
    fn = lambda t: torch.var_mean(t, dim)   # noqa: E731
    (v, m), (ev, em) = torch.compile(fn, backend="fuse_all")(x), fn(x)
    rv, rm = torch.var_mean(x.double(), dim)
    ot.assert_near_float64(v, ev, rv, "var", atol=1e-6 * rv.abs().max().item())
    ot.assert_near_float64(m, em, rm, "mean", atol=1e-6 * rm.abs().max().item())

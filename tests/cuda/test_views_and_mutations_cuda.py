"""Returned views and input write-backs on a real GPU (marker `cuda`; see conftest.py for the command):
a view of an offset input returned under dynamic shapes points where eager's points (it was a copy whose
offset AOTAutograd misread), an expand of a computed value stays stride 0, and input mutations are written
back in one `_foreach_copy_`, after every kernel that reads the old value."""
from __future__ import annotations

import pytest
import torch

import fuse_all
import fuse_all_optest as ot

pytestmark = pytest.mark.cuda
DEVICE = "cuda"


def _triton_only():
    graphs = fuse_all.compiled_graphs()
    assert graphs and all(g.fallback_reason is None and g.language == "triton" for g in graphs), \
        [(g.graph_id, g.language, g.fallback_reason) for g in graphs]


@pytest.mark.parametrize("dynamic", [False, True])
def test_views_of_an_offset_input_point_where_eager_points(dynamic):
    def fn(a):
        return a.narrow(0, 1, a.shape[0] - 2), a.t()[2:], (a[0] + 1).expand(3, -1), a * 2

    compiled = ot.compile_fn(fn, "triton", dynamic=dynamic)
    base = torch.randn(500, device=DEVICE)
    for n in (5, 7, 9):
        a = base[11:11 + 6 * n].view(n, 6)
        expected, actual = fn(a), compiled(a)
        for got, want in zip(actual, expected):
            torch.testing.assert_close(got, want)
            assert got.stride() == want.stride()
            if want.untyped_storage().data_ptr() == base.untyped_storage().data_ptr():
                assert got.data_ptr() == want.data_ptr() and got.storage_offset() == want.storage_offset()
    _triton_only()


def test_input_mutations_are_written_back_after_their_readers():
    def fn(a, b, c):
        y = a * 3
        a.add_(b)
        b.mul_(2)
        c.sub_(1)
        return y

    inputs = [torch.randn(33, 7, device=DEVICE) for _ in range(3)]
    ot.check(fn, *inputs, codegen="triton")
    _triton_only()


def test_batch_norm_write_backs_take_the_multi_tensor_copy():
    """Running stats (float32) and batch counts (int64) are written back in one `_foreach_copy_` per dtype,
    which CUDA runs as multi-tensor kernels; a mixed-dtype list made one device-to-device memcpy per tensor."""
    from torch.profiler import ProfilerActivity, profile
    model = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Conv2d(8, 8, 3, padding=1),
                                                                torch.nn.BatchNorm2d(8))]).to(DEVICE).train()
    x = torch.randn(2, 8, 10, 10, device=DEVICE)
    compiled = torch.compile(model, backend="fuse_all")
    compiled(x).sum().backward()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        compiled(x)
        torch.cuda.synchronize()
    memcpys = [e.name for e in prof.events() if "Memcpy DtoD" in e.name]
    assert not memcpys, memcpys
    norms = [m for m in model if isinstance(m, torch.nn.BatchNorm2d)]
    assert [bn.num_batches_tracked.item() for bn in norms] == [2] * len(norms)   # both calls wrote back

"""Tiled kernels compiled for the GPU (marker `cuda`): the cases of tests/ops/test_tiling.py on CUDA tensors,
and sizes past configs.BIG_POINTWISE, where tiles and column reductions autotune among several configs."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fuse_all
import fuse_all_optest as ot
from test_tiling import COLUMNS, TRANSPOSED

pytestmark = pytest.mark.cuda


def _on_gpu(inputs):
    return tuple(t.to("cuda") for t in inputs)


def _plans() -> list[str]:
    graphs = fuse_all.compiled_graphs()
    assert graphs and all(g.fallback_reason is None and g.language == "triton" for g in graphs)
    return [k.tiling.kind if k.tiling is not None else "none" for g in graphs for k in g.kernels]


@pytest.mark.parametrize("case", list(TRANSPOSED))
def test_transpose_tiles(case):
    fn, inputs = TRANSPOSED[case]
    ot.check(fn, *_on_gpu(inputs()), codegen="triton")
    assert "transpose" in _plans()


@pytest.mark.parametrize("case", list(COLUMNS))
def test_column_reductions(case):
    fn, inputs = COLUMNS[case]
    ot.check(fn, *_on_gpu(inputs()), codegen="triton", atol=1e-4, rtol=1e-4)
    assert "column" in _plans()


BIG = {
    "transposed_add": (lambda x, y: x.t() + y, lambda: (ot.make((2048, 1537)), ot.make((1537, 2048)))),
    "permuted_copy": (lambda x: x.permute(0, 2, 3, 1).contiguous(), lambda: (ot.make((4, 96, 80, 81)),)),
    "sum_dim0": (lambda x: x.sum(0), lambda: (ot.make((3000, 2049)),)),
    "batchnorm_channels_last": (lambda x: F.batch_norm(x, None, None, training=True),
                                lambda: (ot.make((16, 64, 48, 48)).to(memory_format=torch.channels_last),)),
}


@pytest.mark.parametrize("case", list(BIG))
def test_big_tiled_kernels_autotune(case):
    fn, inputs = BIG[case]
    ot.check(fn, *_on_gpu(inputs()), codegen="triton", atol=1e-3, rtol=1e-3)
    assert set(_plans()) & {"transpose", "column"}

"""The tiling decision (fuse_all_ir.tiling): which kernels get a 2-D transpose tile or a column reduction,
which dims form the tile, and the tile choice."""
from __future__ import annotations

import sympy
import torch

from fuse_all_ir import format_kernel
from fuse_all_ir.tiling import choose_tile_block, plan_tiling

from ir_testing import lower


def kernels(fn, *inputs):
    return list(lower(lambda *a: (fn(*a),), *inputs).program.kernels.values())


def test_transposed_add_tiles_rows_by_columns():
    (k,) = kernels(lambda x, y: x.t() + y, torch.randn(64, 48), torch.randn(48, 64))
    assert (k.tiling.kind, k.tiling.y_dim, k.tiling.x_dim) == ("transpose", 0, 1)
    assert k.tiling.block == (32, 32)
    assert "tiling: 2-D tile y=x0 x=x1 block 32x32" in format_kernel(k)


def test_permute_tiles_the_merged_dims():
    """(N, C, H, W) -> (N, H, W, C): H and W are walked as one by every access, so the tile is
    (H*W) x C, not W x C (W alone is too short to tile)."""
    (k,) = kernels(lambda x: x.permute(0, 2, 3, 1).contiguous(), torch.randn(2, 32, 5, 6))
    assert [int(n) for n in k.outer] == [2, 30, 32]
    assert (k.tiling.kind, k.tiling.y_dim, k.tiling.x_dim) == ("transpose", 1, 2)


def test_no_tile_when_accesses_agree_or_a_dim_is_short():
    (same,) = kernels(lambda x, y: x + y, torch.randn(64, 64), torch.randn(64, 64))
    (broadcast,) = kernels(lambda x, b: x + b, torch.randn(64, 64), torch.randn(64, 1))
    (short,) = kernels(lambda x: x.permute(0, 2, 3, 1).contiguous(), torch.randn(2, 3, 20, 20))
    assert same.tiling is None and broadcast.tiling is None and short.tiling is None


def test_a_short_run_tiles_against_a_long_dim():
    """A 3 x 3 convolution weight to channels-last and back: one side walks runs of 9 elements, the other
    runs of C. One dim of at least MIN_TILED_EXTENT is enough when the other has MIN_SHORT_TILE_EXTENT."""
    (to_cl,) = kernels(lambda w: w.contiguous(memory_format=torch.channels_last), torch.randn(8, 64, 3, 3))
    (to_nchw,) = kernels(lambda w: w.contiguous(), torch.randn(8, 64, 3, 3).to(memory_format=torch.channels_last))
    assert [int(n) for n in to_cl.outer] == [8, 9, 64] and (to_cl.tiling.y_dim, to_cl.tiling.x_dim) == (1, 2)
    assert [int(n) for n in to_nchw.outer] == [8, 64, 9] and (to_nchw.tiling.y_dim, to_nchw.tiling.x_dim) == (1, 2)
    assert to_cl.tiling.block == (16, 64) and to_nchw.tiling.block == (64, 16)
    (two_by_two,) = kernels(lambda w: w.contiguous(memory_format=torch.channels_last), torch.randn(8, 64, 2, 2))
    assert two_by_two.tiling is not None      # runs of MIN_SHORT_TILE_EXTENT (4) still tile
    (three,) = kernels(lambda x: x.permute(0, 2, 3, 1).contiguous(), torch.randn(2, 3, 20, 20))
    (both_short,) = kernels(lambda x: x.t() + 1, torch.randn(12, 12))
    assert three.tiling is None and both_short.tiling is None


def test_column_and_row_reductions():
    (column,) = kernels(lambda x: x.sum(0), torch.randn(64, 32))
    (row,) = kernels(lambda x: x.sum(1), torch.randn(64, 32))
    assert column.tiling.kind == "column" and row.tiling is None
    # per-channel statistics of a channels-last tensor (what BatchNorm computes): C is the contiguous dim
    (channels,) = kernels(lambda x: x.sum((0, 2, 3)), torch.randn(4, 24, 5, 7).to(memory_format=torch.channels_last))
    assert channels.tiling.kind == "column"


def test_aliasing_strides_take_taller_tiles():
    (k,) = kernels(lambda x, y: x.t() + y, torch.randn(1024, 1024), torch.randn(1024, 1024))
    assert k.tiling.block == (64, 128)


def test_tile_choice_fits_short_and_symbolic_dims():
    assert choose_tile_block(1000, 1000) == (32, 32)
    assert choose_tile_block(20, 5000) == (32, 32)            # 20 -> 32 rows (the last block is partial)
    assert choose_tile_block(16, 5000) == (16, 64)             # a short dim gives its share to the other
    s = sympy.Symbol("s0", integer=True, positive=True)
    assert choose_tile_block(s, s, aliasing_stride=True) == (64, 128)


def test_plan_is_idempotent():
    (k,) = kernels(lambda x, y: x.t() + y, torch.randn(64, 48), torch.randn(48, 64))
    assert plan_tiling(k) == k

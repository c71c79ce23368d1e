"""`CppChoices`: the C++ target's fusion heuristics and kernel shapes (`fuse_all_ir.FusionChoices`).

Fusion: the IR's target-neutral heuristics. Kernel shapes (the renderer follows them; see render.py and
the README for the measurements behind them):

* ``pointwise``: no reduction;
* ``split``: few outer points and a long reduction (a full sum): the outer points run in order and each
  reduction phase is split over threads along ``r0``;
* ``tiled``: a reduction down a strided dim with a contiguous innermost outer dim (a column sum): tiles of
  up to ``max_tile`` columns, the simd loop across the columns;
* ``rows``: everything else: OpenMP over the outer points, a simd reduction loop per point.
"""
from __future__ import annotations

import os

import sympy

from fuse_all_ir import FusionChoices, KernelShape, Reduce, is_positional
from fuse_all_ir.symbolic import size_hint as _size_hint

MAX_TILE = 1024                # columns per tile in tiled reductions (fewer when threads need the work)
# A tiled reduction with several phases over the reduction (a norm: mean, variance, normalise) reads each
# tile once per phase: its tile is narrowed until one phase's rows fit in this many bytes (L2).
COLUMN_TILE_BYTES = 128 * 1024
MIN_PHASED_TILE = 64
SPLIT_MIN_REDUCTION = 8192     # a reduction this long is worth splitting over threads ...
DEFAULT_SIZE_HINT = 8192       # ... (symbols without a hint are assumed this large)


def split_max_outer() -> int:
    """Reductions with fewer outer points than this split the reduction itself over threads."""
    return 2 * (os.cpu_count() or 1)


def numel(sizes) -> sympy.Expr:
    return sympy.Mul(*[sympy.sympify(s) for s in sizes]) if sizes else sympy.Integer(1)


def size_hint(expr, size_hints) -> int:
    return _size_hint(expr, size_hints, DEFAULT_SIZE_HINT)


class CppChoices(FusionChoices):
    max_tile: int = MAX_TILE
    split_min_reduction: int = SPLIT_MIN_REDUCTION

    def choose_kernel_shape(self, kernel, size_hints: dict | None = None) -> KernelShape:
        """`kernel` as the renderer sees it (normalized: size-1 dims dropped, contiguous dims merged)."""
        size_hints = size_hints or {}
        if not kernel.reduction:
            return KernelShape("pointwise")
        if self.use_split(kernel, size_hints):
            return KernelShape("split", reason="few outer points, long reduction: split it over threads")
        if self.use_tiles(kernel):
            return KernelShape("tiled", {"max_tile": self.column_tile(kernel, size_hints)},
                               reason="strided reduction, contiguous outer dim: tiles of columns")
        return KernelShape("rows")

    def column_tile(self, kernel, size_hints: dict) -> int:
        """Columns per tile of a tiled reduction: `max_tile`, or with several phases over the reduction as
        many as keep one phase's rows of float32 within COLUMN_TILE_BYTES (a power of two, at least
        MIN_PHASED_TILE). LayerNorm over NCHW channels, 1 thread, kernel alone: 64 channels keep 512-1024
        columns (0.80-0.84 ms at both); 256 channels 59 ms with 1024 columns, 47 ms with 128, 45 with 64."""
        if sum(loop.over_reduction for loop in kernel.loops) < 2:
            return self.max_tile
        rows = size_hint(numel(kernel.reduction), size_hints)
        fit = max(1, COLUMN_TILE_BYTES // (4 * max(1, rows)))
        return max(MIN_PHASED_TILE, min(self.max_tile, 1 << (fit.bit_length() - 1)))

    def use_split(self, kernel, size_hints: dict) -> bool:
        outer = size_hint(numel(kernel.outer), size_hints)
        red = size_hint(numel(kernel.reduction), size_hints)
        return outer < split_max_outer() and red >= self.split_min_reduction

    def use_tiles(self, kernel) -> bool:
        """The kernel's `TilePlan` (fuse_all_ir.tiling) is a column reduction (a column sum, `grad.sum(0)`: the
        reduction walks memory with a stride, the innermost outer dim is contiguous): then the vector loop
        runs across columns, not down a column. Not for argmax/argmin (their position has no array
        accumulator here)."""
        if any(isinstance(s, Reduce) and is_positional(s.op) for s in kernel.statements()):
            return False
        return kernel.tiling is not None and kernel.tiling.kind == "column"

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

from fuse_all_ir import FusionChoices, KernelShape, Load, Reduce, Store, rvar, xvar

from .normalize import affine_stride

MAX_TILE = 1024                # columns per tile in tiled reductions (fewer when threads need the work)
SPLIT_MIN_REDUCTION = 8192     # a reduction this long is worth splitting over threads ...
DEFAULT_SIZE_HINT = 8192       # ... (symbols without a hint are assumed this large)


def split_max_outer() -> int:
    """Reductions with fewer outer points than this split the reduction itself over threads."""
    return 2 * (os.cpu_count() or 1)


def numel(sizes) -> sympy.Expr:
    return sympy.Mul(*[sympy.sympify(s) for s in sizes]) if sizes else sympy.Integer(1)


def size_hint(expr, size_hints) -> int:
    expr = sympy.sympify(expr)
    subs = {s: size_hints.get(s, DEFAULT_SIZE_HINT) for s in expr.free_symbols}
    return int(expr.subs(subs))


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
            return KernelShape("tiled", {"max_tile": self.max_tile},
                               reason="strided reduction, contiguous outer dim: tiles of columns")
        return KernelShape("rows")

    def use_split(self, kernel, size_hints: dict) -> bool:
        outer = size_hint(numel(kernel.outer), size_hints)
        red = size_hint(numel(kernel.reduction), size_hints)
        return outer < split_max_outer() and red >= self.split_min_reduction

    def use_tiles(self, kernel) -> bool:
        """Tile when the reduction walks memory with a stride but the innermost outer dim is contiguous
        (a column sum, `grad.sum(0)`): then the vector loop runs across columns, not down a column."""
        if not kernel.outer or any(isinstance(s, Reduce) and s.op in ("argmax", "argmin")
                                   for s in kernel.statements()):
            return False
        last_x, last_r = xvar(len(kernel.outer) - 1), rvar(len(kernel.reduction) - 1)
        accesses = [s for s in kernel.statements() if isinstance(s, (Load, Store))]
        x_strides = [affine_stride(s.index, last_x) for s in accesses]
        if any(st is None or st not in (0, 1) for st in x_strides) or 1 not in x_strides:
            return False
        reduction_loads = [s for loop in kernel.loops if loop.over_reduction for s in loop.body
                           if isinstance(s, Load)]
        return any(affine_stride(s.index, last_r) != 1 for s in reduction_loads)

"""Tiling: the one place that decides how a kernel's accesses are walked when they disagree on memory order.

Every codegen renders the `TilePlan` that `plan_tiling` attaches to a `Kernel` (`Kernel.tiling`); none
decides on its own. Two kinds:

* ``"transpose"`` (pointwise kernels): the stores walk outer dim `x_dim` contiguously (stride 1) while
  some loads walk another outer dim, `y_dim`, contiguously (`x.t() + y`, a permuted copy, channels-last <->
  contiguous). One flat loop reads one of them with a stride on every step. The plan makes (`y_dim`,
  `x_dim`) a 2-D tile: within a tile every operand touches a few cache lines / DRAM segments that it
  reads completely, the stores across `x_dim` and those loads across `y_dim`. The kernel is normalised
  first (`normalize.py`: size-1 dims dropped, dims every access walks as one merged), so a 4-D permute
  (N, C, H, W) -> (N, H, W, C) tiles (H*W) x C, not W x C.
* ``"column"`` (reduction kernels): the reduction walks memory with a stride while the last outer dim is
  contiguous (a sum over dim 0, BatchNorm statistics over a channels-last tensor). The contiguous outer dim
  becomes the vector / lane dim and the reduction loop runs outside it, so each step reads a contiguous
  run of columns.

Index expressions of a transpose-tiled kernel are those of the normalised kernel: the plan's dims index
`Kernel.outer`. The tile's size is a choice (`choose_tile_block`): codegens may take it or pick their own
tile (Triton autotunes among its own configs), but not the dims.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import sympy

from .normalize import affine_stride, normalize
from .program import Kernel, Load, Store
from .symbolic import rvar, xvar

DTYPE_BYTES = {"bool": 1, "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "float16": 2,
               "bfloat16": 2, "float32": 4, "float64": 8}
# A tile needs one dim at least this long. The other may be as short as MIN_SHORT_TILE_EXTENT: a 3 x 3
# convolution weight converted between NCHW and channels-last (512 x 512 x 9 <-> 512 x 9 x 512) walks a run
# of 9 on one side; the flat loop reads it 9 strided streams at once, each sector re-read from L2 nine times
# (2 TB/s on the H200), where a 16 x 64 tile reads and writes whole rows. Shorter than that (NCHW -> NHWC
# with 3 channels) the flat loop already reads the few strided streams sequentially.
MIN_TILED_EXTENT = 16
MIN_SHORT_TILE_EXTENT = 4


@dataclass(frozen=True)
class TilePlan:
    kind: str                        # "transpose" | "column"
    x_dim: int = -1                  # transpose: the outer dim the stores walk contiguously (innermost)
    y_dim: int = -1                  # transpose: the outer dim the disagreeing loads walk contiguously
    block: tuple[int, int] = (1, 1)  # transpose: (y, x) tile size, the default choice

    def describe(self) -> str:
        if self.kind == "column":
            return "column reduction (contiguous outer dim across lanes, reduction loop outside)"
        return f"2-D tile y=x{self.y_dim} x=x{self.x_dim} block {self.block[0]}x{self.block[1]}"


def choose_tile_block(y_size, x_size, aliasing_stride: bool = False) -> tuple[int, int]:
    """The tile choice: (y, x) extents of a transpose tile, powers of two, clipped to dims known to be
    shorter (a short dim gives its share to the other).

    32 x 32 (4 KB of float32 per operand) unless the disagreeing loads' stride is a multiple of 256
    elements; then 64 x 128. Measured with the C++ codegen (one thread, `x.t() + y` in cache): 1000 x 1000
    runs in 0.14 ms with 32 x 32 tiles and 0.19 ms with 64 x 128; 1024 x 1024 in 0.53 ms with 32 x 32 and
    0.20 ms with 64 x 128 -- rows 4 KB apart share L1 sets, and taller tiles amortise the misses."""
    y_cap, x_cap = (64, 128) if aliasing_stride else (32, 32)
    elements = y_cap * x_cap

    def fit(n, cap):
        n = sympy.sympify(n)
        return cap if not n.is_number else max(1, min(cap, _next_power_of_2(int(n))))
    y = fit(y_size, y_cap)
    x = fit(x_size, max(x_cap, min(256, elements // y)))
    y = fit(y_size, max(y_cap, min(256, elements // x)))
    return y, x


def _next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def contiguous_dim(index, n_outer: int) -> int | None:
    """The outer dim along which `index` moves by exactly one element, or None."""
    return _contiguous_dim(sympy.sympify(index), n_outer)


@functools.lru_cache(maxsize=1 << 14)   # every store and load of every kernel, twice or three times each
def _contiguous_dim(index, n_outer: int) -> int | None:
    all_vars = {xvar(i) for i in range(n_outer)}
    for i in range(n_outer):
        if xvar(i) in index.free_symbols and affine_stride(index, xvar(i), all_vars) == 1:
            return i
    return None


def _weights(kernel: Kernel, kind) -> dict:
    """Bytes moved per point by the accesses of `kind` (Load or Store), by the dim each walks contiguously."""
    dtypes = {s.name: s.dtype for s in kernel.statements() if hasattr(s, "name") and hasattr(s, "dtype")}
    out: dict = {}
    for s in kernel.statements():
        if isinstance(s, kind):
            dim = contiguous_dim(s.index, len(kernel.outer))
            if dim is not None:
                dtype = s.dtype if isinstance(s, Load) else dtypes.get(s.value, "float32")
                out[dim] = out.get(dim, 0) + DTYPE_BYTES.get(dtype, 4)
    return out


def _transpose_dims(kernel: Kernel, check_extent: bool = True) -> tuple[int, int] | None:
    """(y_dim, x_dim) when the stores and some loads walk different outer dims contiguously (with
    `check_extent`: one at least MIN_TILED_EXTENT long, the other at least MIN_SHORT_TILE_EXTENT)."""
    stores = _weights(kernel, Store)
    if not stores:
        return None
    x_dim = max(stores, key=stores.get)
    all_vars = {xvar(i) for i in range(len(kernel.outer))}
    disagree: dict = {}
    for s in kernel.statements():
        if not isinstance(s, Load):
            continue
        dim = contiguous_dim(s.index, len(kernel.outer))
        along_x = affine_stride(s.index, xvar(x_dim), all_vars)
        # a load that does not move along x_dim (a broadcast) is read once per row: no tile needed
        if dim is None or dim == x_dim or along_x is None or along_x == 0:
            continue
        disagree[dim] = disagree.get(dim, 0) + DTYPE_BYTES.get(s.dtype, 4)
    if not disagree:
        return None
    y_dim = max(disagree, key=disagree.get)
    if check_extent:
        sizes = [sympy.sympify(kernel.outer[dim]) for dim in (x_dim, y_dim)]
        known = sorted(int(n) for n in sizes if n.is_number)
        if known and (known[0] < MIN_SHORT_TILE_EXTENT or (len(known) == 2 and known[1] < MIN_TILED_EXTENT)):
            return None
    return y_dim, x_dim


def is_column_reduction(kernel: Kernel) -> bool:
    """The reduction phases' loads walk the innermost outer dim contiguously (stride 1) and the innermost
    reduction dim with a stride, and none that moves along x walks the reduction contiguously. Stores may walk either (a
    norm over the channels of an NCHW tensor written back channels-last still reads columns)."""
    if not kernel.reduction or not kernel.outer:
        return False
    last_x, last_r = xvar(len(kernel.outer) - 1), rvar(len(kernel.reduction) - 1)
    accesses = [s for s in kernel.statements() if isinstance(s, (Load, Store))]
    if any(affine_stride(s.index, last_x) is None for s in accesses):
        return False
    # loads that do not move along x (a LayerNorm's weight, indexed by r alone) are the same for every
    # column: read once per row of a tile, they decide nothing
    loads = [s for loop in kernel.loops if loop.over_reduction for s in loop.body
             if isinstance(s, Load) and affine_stride(s.index, last_x) != 0]
    along_r = [affine_stride(s.index, last_r) for s in loads]
    if any(st == 1 for st in along_r):
        return False
    return any(affine_stride(s.index, last_x) == 1 and st != 0 for s, st in zip(loads, along_r))


def _aliasing_stride(kernel: Kernel, y_dim: int, x_dim: int) -> bool:
    """Some load walking y contiguously steps along x by a multiple of 256 elements (or by a size that is
    not known here): its lines of one tile fall into few cache sets."""
    all_vars = {xvar(i) for i in range(len(kernel.outer))}
    for s in kernel.statements():
        if isinstance(s, Load) and contiguous_dim(s.index, len(kernel.outer)) == y_dim:
            step = affine_stride(s.index, xvar(x_dim), all_vars)
            if step is not None and step != 0 and (not step.is_Integer or int(step) % 256 == 0):
                return True
    return False


def plan_tiling(kernel: Kernel) -> Kernel:
    """`kernel` with its `TilePlan` (`Kernel.tiling`), or unchanged when it needs none. A transpose-tiled
    kernel comes back normalised (see the module docstring): its dims may be fewer than before."""
    if kernel.reduction:
        if is_column_reduction(kernel):
            return dataclasses.replace(kernel, tiling=TilePlan("column"))
        return kernel
    if len(kernel.outer) < 2 or _transpose_dims(kernel, check_extent=False) is None:
        return kernel
    normal = normalize(kernel)
    dims = _transpose_dims(normal) if len(normal.outer) >= 2 else None
    if dims is None:
        return kernel
    y_dim, x_dim = dims
    block = choose_tile_block(normal.outer[y_dim], normal.outer[x_dim], _aliasing_stride(normal, y_dim, x_dim))
    return dataclasses.replace(normal, tiling=TilePlan("transpose", x_dim, y_dim, block))

"""Tiled loops of the C++ codegen: what the kernel's `TilePlan` (fuse_all_ir.tiling) becomes.

* transpose tiles (pointwise): blocks of (y, x) points; a full block stages the operands that walk y
  contiguously in a local buffer (8x8 register transposes for 4-byte types, tiles.h) so every operand is
  then read along x.
* column reductions: `render.KernelRenderer.tiled_reduction`.
"""
from __future__ import annotations

import sympy

from fuse_all_ir.normalize import affine_stride
from fuse_all_ir.program import Load
from fuse_all_ir.symbolic import xvar

from . import rules
from .choices import numel as _numel
from .index_printer import c_name, cpp_index

FOUR_BYTE_TYPES = ("float", "int32_t", "uint32_t")


def _loop_symbol(name: str) -> sympy.Symbol:
    """A loop counter of the rendered code, in an index expression."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


class TiledLoops:
    """Mixed into `render.KernelRenderer` (its emit/open/close/statement and buffers)."""

    def tiled_pointwise(self) -> None:
        """The kernel's `TilePlan`: blocks of (y, x) points, x innermost (the stores' contiguous dim, the
        simd loop) and y next (the dim the disagreeing loads walk contiguously).

        Walking a block directly, each disagreeing load reads one element from each of BLOCK_X lines per
        row, and with a power-of-two stride those lines share one L1 set (1024x1024: 32 lines 4 KB apart,
        more than its ways): they are evicted before the next row uses them. So a full block first copies
        those operands into a local [y][x] buffer, reading them along y (whole lines, one after another),
        and the block then reads every operand contiguously along x."""
        k, plan = self.k, self.k.tiling
        (loop,) = k.loops
        y, x = plan.y_dim, plan.x_dim
        block_y, block_x = plan.block
        rest = [i for i in range(len(k.outer)) if i not in (y, x)]
        clause = self.parallel_clause(_numel(k.outer))
        if clause is not None:
            self.emit(f"#pragma omp parallel for collapse({len(rest) + 2}){clause}")
        for i in rest:
            self.open(f"for (int64_t {xvar(i)} = 0; {xvar(i)} < {cpp_index(k.outer[i])}; ++{xvar(i)})")
        size_y, size_x = cpp_index(k.outer[y]), cpp_index(k.outer[x])
        self.open(f"for (int64_t fa_y0 = 0; fa_y0 < {size_y}; fa_y0 += {block_y})", comment="tiles")
        self.open(f"for (int64_t fa_x0 = 0; fa_x0 < {size_x}; fa_x0 += {block_x})")
        self.emit(f"const int64_t fa_y1 = fa_y0 + {block_y} < ({size_y}) ? fa_y0 + {block_y} : ({size_y});")
        self.emit(f"const int64_t fa_x1 = fa_x0 + {block_x} < ({size_x}) ? fa_x0 + {block_x} : ({size_x});")
        staged = self.staged_loads(loop.body, xvar(y), xvar(x))
        if staged:
            self.open(f"if (fa_y1 - fa_y0 == {block_y} && fa_x1 - fa_x0 == {block_x})", comment="a full block")
            for n, load in enumerate(staged):
                self.emit(f"alignas(64) {rules.storage_type(self.buffers[load.buffer])} fa_tb{n}[{block_y * block_x}];")
                at = cpp_index(load.index.xreplace({xvar(y): _loop_symbol("fa_y0") + _loop_symbol("fa_j"),
                                                    xvar(x): _loop_symbol("fa_x0") + _loop_symbol("fa_i")}))
                in_registers = (rules.storage_type(self.buffers[load.buffer]) in FOUR_BYTE_TYPES
                                and block_x % 8 == 0 and block_y % 8 == 0)
                step = 8 if in_registers else 1
                self.open(f"for (int64_t fa_i = 0; fa_i < {block_x}; fa_i += {step})")
                self.open(f"for (int64_t fa_j = 0; fa_j < {block_y}; fa_j += {step})")
                if in_registers:   # 8x8 blocks transposed in vector registers (tiles.h)
                    stride = cpp_index(affine_stride(load.index, xvar(x), {xvar(y), xvar(x)}))
                    self.emit(f"fa_transpose8x8_b32(&{c_name(load.buffer)}[{at}], {stride}, "
                              f"&fa_tb{n}[fa_j * {block_x} + fa_i], {block_x});")
                else:
                    self.emit(f"fa_tb{n}[fa_j * {block_x} + fa_i] = {c_name(load.buffer)}[{at}];")
                self.close()
                self.close()
            self.staged = {load.name: f"fa_tb{n}[({xvar(y)} - fa_y0) * {block_x} + ({xvar(x)} - fa_x0)]"
                           for n, load in enumerate(staged)}
            self.block_loops(loop.body, xvar(y), xvar(x), plan.block)
            self.staged = {}
            self.close()
            self.open("else")
        self.block_loops(loop.body, xvar(y), xvar(x))
        if staged:
            self.close()
        for _ in range(len(rest) + 2):
            self.close()

    def block_loops(self, body, var_y, var_x, full: tuple[int, int] | None = None) -> None:
        """The block's points; a `full` block's loops have constant trip counts (short vector loops without
        a remainder to test for: a 32-wide row is two AVX-512 vectors)."""
        end_y, end_x = (f"fa_y0 + {full[0]}", f"fa_x0 + {full[1]}") if full else ("fa_y1", "fa_x1")
        self.open(f"for (int64_t {var_y} = fa_y0; {var_y} < {end_y}; ++{var_y})")
        self.emit("#pragma omp simd")
        self.open(f"for (int64_t {var_x} = fa_x0; {var_x} < {end_x}; ++{var_x})")
        for stmt in body:
            self.statement(stmt)
        self.close()
        self.close()

    @staticmethod
    def staged_loads(body, var_y, var_x) -> list:
        """Loads that walk y contiguously and x with a stride (unmasked: a mask is a value of the body)."""
        out = []
        for stmt in body:
            if isinstance(stmt, Load) and stmt.mask is None:
                along_x = affine_stride(stmt.index, var_x, {var_y, var_x})
                if affine_stride(stmt.index, var_y, {var_y, var_x}) == 1 and along_x not in (None, 0):
                    out.append(stmt)
        return out

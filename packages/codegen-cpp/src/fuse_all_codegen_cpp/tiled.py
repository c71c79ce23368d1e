"""Tiled loops of the C++ codegen: what the kernel's `TilePlan` (fuse_all_ir.tiling) becomes.

* transpose tiles (pointwise): blocks of (y, x) points; a full block stages the operands that walk y
  contiguously in a local buffer (8x8 register transposes for 4-byte types, tiles.h) so every operand is
  then read along x.
* column reductions: `render.KernelRenderer.tiled_reduction`. A phase that stores along the reduction
  dim (a norm over the channels of an NCHW tensor: its output walks the channels contiguously while the
  vector loop runs across the tile's columns) writes blocks of STORE_ROWS rows to a local buffer and then
  transposes them into the output (`transposed_stores`), instead of one scattered element per lane.
  Values of a phase that do not depend on the reduction (a norm's mean and 1/sqrt(var + eps) in its
  normalising phase) are computed once per column before the phase's loop (`column_invariants`).
"""
from __future__ import annotations

import sympy

from fuse_all_ir.normalize import affine_stride
from fuse_all_ir.program import Compute, Load, Store
from fuse_all_ir.symbolic import rvar, xvar

from . import rules
from .hoist import loop_invariants
from .choices import numel as _numel
from .index_printer import c_name, cpp_index

FOUR_BYTE_TYPES = ("float", "int32_t", "uint32_t")
# rows of a column tile staged before their stores are transposed out: one 8x8 register transpose high
STORE_ROWS = 8
# ops cheaper than reading a per-column array back: a phase-invariant value made only of these is recomputed
CHEAP_OPS = frozenset(("add", "sub", "mul", "neg", "abs", "maximum", "minimum", "where", "eq", "ne", "lt",
                       "le", "gt", "ge", "logical_and", "logical_or", "logical_not", "cast"))


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
        # a block shorter than 8 on a side (a run of 4 or 6: MIN_SHORT_TILE_EXTENT) has no 8x8 transposes
        copies = (self.transposing_copies(loop.body, staged, xvar(y), xvar(x))
                  if block_x % 8 == 0 and block_y % 8 == 0 else [])
        if copies:
            self.open(f"if (fa_y1 - fa_y0 == {block_y} && fa_x1 - fa_x0 == {block_x})",
                      comment="a full block: 8x8 register transposes straight into the outputs")
            self.open(f"for (int64_t fa_i = 0; fa_i < {block_x}; fa_i += 8)")
            self.open(f"for (int64_t fa_j = 0; fa_j < {block_y}; fa_j += 8)")
            at = {xvar(y): _loop_symbol("fa_y0") + _loop_symbol("fa_j"), xvar(x): _loop_symbol("fa_x0") + _loop_symbol("fa_i")}
            every = {xvar(y), xvar(x)}
            for load, store in copies:
                self.emit(f"fa_transpose8x8_b32(&{c_name(load.buffer)}[{cpp_index(load.index.xreplace(at))}], "
                          f"{cpp_index(affine_stride(load.index, xvar(x), every))}, "
                          f"&{c_name(store.buffer)}[{cpp_index(store.index.xreplace(at))}], "
                          f"{cpp_index(affine_stride(store.index, xvar(y), every))});")
            self.close()
            self.close()
            self.close()
            self.open("else")
            self.block_loops(loop.body, xvar(y), xvar(x))
            self.close()
        elif staged:
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
        if not copies:
            self.block_loops(loop.body, xvar(y), xvar(x))
        if staged and not copies:
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

    def transposing_copies(self, body, staged, var_y, var_x) -> list:
        """(load, store) pairs when the body only copies 4-byte operands that walk y contiguously to outputs
        that walk x contiguously (a permuted copy, NCHW -> NHWC): a full block then needs no staging buffer.
        Empty otherwise."""
        loads = {load.name: load for load in staged}
        pairs = []
        for stmt in body:
            if isinstance(stmt, Load) and stmt.name in loads:
                continue
            if not isinstance(stmt, Store) or stmt.value not in loads:
                return []
            load = loads[stmt.value]
            if (self.buffers[stmt.buffer] != self.buffers[load.buffer] or load.dtype != self.buffers[load.buffer]
                    or rules.storage_type(self.buffers[stmt.buffer]) not in FOUR_BYTE_TYPES
                    or affine_stride(stmt.index, var_x, {var_y, var_x}) != 1
                    or affine_stride(stmt.index, var_y, {var_y, var_x}) in (None, 0)):
                return []
            pairs.append((load, stmt))
        return pairs

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

    # -- column reductions: values the same on every step of a phase
    def column_invariants(self, loop) -> tuple[list, set[str]]:
        """(statements of a reduction phase that do not depend on the reduction indices and the values it
        reads, to run once per column before the phase; the names of those computed there that the phase's
        loop reads, which become per-column arrays). Loads and constants are kept in the loop as well (the
        compiler drops what is then unused); only computations leave it, and only when one is costly."""
        every_r = {rvar(i) for i in range(len(self.k.reduction))}
        invariant = loop_invariants(loop.body, every_r)
        computes = [s for s in invariant if isinstance(s, Compute)]
        if not any(s.op not in CHEAP_OPS for s in computes):
            return [], set()
        hoisted = {s.name for s in computes}
        read = set()
        for stmt in loop.body:
            if isinstance(stmt, Store):
                # a store of a float16 rounding reads the float it rounds (render.store_source): computed once
                # per column, that value was not an array and the loop named an undeclared variable (log_softmax
                # along an expanded float16 dim, fuzz seed 126 index 692 --half-frac 0.5)
                read |= {stmt.value, self.store_source(stmt)}
            elif not (isinstance(stmt, Compute) and stmt.name in hoisted):
                read |= set(getattr(stmt, "args", ())) | {getattr(stmt, "arg", None), getattr(stmt, "value", None),
                                                          getattr(stmt, "mask", None)}
        return invariant, hoisted & read

    # -- column reductions: stores that walk the reduction dim
    def transposed_stores(self, body) -> list:
        """Stores of a tiled reduction's phase that walk the innermost reduction dim contiguously and the
        tile's columns with a stride (`buf[r + C*x]` for LayerNorm over NCHW channels). Not for a buffer the
        kernel also reads (updated in place): a staged store lands a few rows later."""
        k = self.k
        r_last, x_last = rvar(len(k.reduction) - 1), xvar(len(k.outer) - 1)
        every = {xvar(i) for i in range(len(k.outer))} | {rvar(i) for i in range(len(k.reduction))}
        out = []
        for stmt in body:
            if isinstance(stmt, Store) and stmt.buffer not in k.inputs:
                along_x = affine_stride(stmt.index, x_last, every)
                if affine_stride(stmt.index, r_last, every) == 1 and along_x is not None and along_x != 0:
                    out.append(stmt)
        return out

    def open_store_rows(self, stores: list, size, max_tile: int) -> tuple[str, str]:
        """Blocks of STORE_ROWS steps of the innermost reduction loop, each with its staging buffers;
        returns the (first, end) bounds of the reduction loop inside a block."""
        self.open(f"for (int64_t fa_r = 0; fa_r < {cpp_index(size)}; fa_r += {STORE_ROWS})",
                  comment="rows staged, then transposed into the outputs")
        self.emit(f"const int64_t fa_re = fa_r + {STORE_ROWS} < ({cpp_index(size)}) ? fa_r + {STORE_ROWS} : ({cpp_index(size)});")
        for n, store in enumerate(stores):
            ctype = rules.storage_type(self.buffers[store.buffer])
            self.emit(f"alignas(64) {ctype} fa_st{n}[{STORE_ROWS * max_tile}];")
            self.staged_stores[id(store)] = f"fa_st{n}[({rvar(len(self.k.reduction) - 1)} - fa_r) * {max_tile} + fa_j]"
        return "fa_r", "fa_re"

    def close_store_rows(self, stores: list, max_tile: int) -> None:
        """Writes the block's staged rows: full 8x8 blocks through register transposes (4-byte types), the
        rest element by element along the output's contiguous dim."""
        k = self.k
        r_last, x_last = rvar(len(k.reduction) - 1), xvar(len(k.outer) - 1)
        every = {xvar(i) for i in range(len(k.outer))} | {rvar(i) for i in range(len(k.reduction))}
        row, col = _loop_symbol("fa_r") + _loop_symbol("fa_k"), _loop_symbol("fa_x") + _loop_symbol("fa_j")
        for n, store in enumerate(stores):
            self.staged_stores.pop(id(store))
            out = c_name(store.buffer)
            self.open()
            self.emit("int64_t fa_j = 0;")
            if rules.storage_type(self.buffers[store.buffer]) in FOUR_BYTE_TYPES and STORE_ROWS == 8:
                first = cpp_index(store.index.xreplace({r_last: _loop_symbol("fa_r"), x_last: col}))
                stride = cpp_index(affine_stride(store.index, x_last, every))
                self.open(f"if (fa_re - fa_r == {STORE_ROWS})")
                self.emit(f"for (; fa_j + 8 <= fa_w; fa_j += 8) "
                          f"fa_transpose8x8_b32(&fa_st{n}[fa_j], {max_tile}, &{out}[{first}], {stride});")
                self.close()
            self.open("for (; fa_j < fa_w; ++fa_j)")
            self.open("for (int64_t fa_k = 0; fa_k < fa_re - fa_r; ++fa_k)")
            self.emit(f"{out}[{cpp_index(store.index.xreplace({r_last: row, x_last: col}))}] = "
                      f"fa_st{n}[fa_k * {max_tile} + fa_j];")
            self.close()
            self.close()
            self.close()
        self.close()

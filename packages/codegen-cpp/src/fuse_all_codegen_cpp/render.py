"""Render IR kernels to C++: one walker over a kernel's statements, loops around it, one translation unit.

Loop structure (see README for the measurements behind the choices):

* pointwise: OpenMP over the outer dims except the innermost (``collapse``), ``omp simd`` on the innermost
  (contiguous in the common case); a 1-D kernel gets ``parallel for simd``. When window tests mask strided
  loads (a padded pool over NCHW rows), the innermost loop is written once per range of its counter and per
  value of the loop-invariant tests on which those masks are constant (`index_split.py`).
* reduction, many outer points: OpenMP over the outer dims; per outer point each phase is a (nested) loop
  over the reduction space with ``omp simd reduction(...)`` accumulators.
* reduction, few outer points (a full reduction to a scalar, a handful of rows): outer points run in
  order and each reduction phase is split over threads along ``r0``; per-thread partials are combined in
  thread order afterwards (deterministic, and argmax keeps the first occurrence).
* reduction down a strided dim (column sums): tiles of up to `max_tile` columns, array accumulators, the simd
  loop across the contiguous columns inside the reduction loop.
* tiny kernels (< PARALLEL_MIN_WORK elements) run without OpenMP: waking threads costs more than the work.
  With symbolic sizes the decision is an ``if(parallel: ...)`` clause evaluated at run time.

Kernels are first normalised (`fuse_all_ir.normalize`): size-1 dims dropped, contiguous dims merged.
"""
from __future__ import annotations

import functools
import itertools
from pathlib import Path

import sympy

from fuse_all_ir.program import Compute, Const, IndexValue, Kernel, Load, Program, Reduce, Store
from fuse_all_ir.symbolic import rvar, xvar
from fuse_all_ir.vocabulary import is_positional

from . import rules
from .choices import CppChoices
from .choices import numel as _numel, size_hint as _hint
from .hoist import loop_invariants, positive_guard, row_invariant_half_loads
from .index_printer import c_name, cpp_expr_type, cpp_index
from .index_split import invariant_tests, split_ranges, with_values
from .libm_variants import math_definitions
from fuse_all_ir.normalize import normalize
from fuse_all_ir.welford import two_pass_form, welford_groups
from .reuse import plan_reuse
from .thread_split import ThreadSplitLoops, _value, is_float_sum
from .tiled import TiledLoops
from .vector_loops import loop_vectors, vector_helpers, vector_loop
from .welford_tiles import WelfordTiles, native_welford_ok

PARALLEL_MIN_WORK = 32768      # below this many element-steps a kernel runs on the calling thread
# Float sums accumulate per block of this many elements (each vector lane SUM_BLOCK / 16 of them in a row
# with AVX-512), then the block sums pairwise. Lanes' chains of 1024 (blocks of 16384) erred 4-10x eager's
# cascade sum on long sums that cancel (849509 values in [-2, 2]: median of 12 inputs 2.5x, fuzz seed 164
# index 111); chains of 128 are at 1.3x (64: 0.9x). Each block ends in a horizontal add of the lanes, which
# no longer shows at 2048: 1 thread, 1e6-element sum 75 vs 76 us, 64 rows of 65536 352 vs 406 us, softmax
# 4096x4096 1.005x, sum over dim 0 of 4096x4096 0.98x (in-process A/B against 16384).
SUM_BLOCK = 2048
# A reduction whose innermost dim is shorter than the vector lanes runs one accumulator through the block:
# its blocks are SUM_BLOCK / 16 elements, so no chain of additions is longer than with lanes (a block of
# 16384 in 5461 rows of 3 was one chain of 16384 adds: 1600 ulps on a float64 var, 100x eager's float32
# error; fuzz seed 31 index 1787).
VECTOR_LANES = 16
INNER_RUNS = 16    # partials of the innermost dim's runs added in a row, at most (sum_block)


def _needed_by(body, names: list[str]) -> list:
    """The statements of `body` that the values `names` are computed from, themselves included, in order."""
    defs = {st.name: st for st in body if hasattr(st, "name") and not isinstance(st, Store)}
    needed, pending = set(), list(names)
    while pending:
        name = pending.pop()
        if name in needed or name not in defs:
            continue
        needed.add(name)
        pending.extend(getattr(defs[name], "args", ()))
    return [st for st in body if getattr(st, "name", None) in needed and not isinstance(st, Store)]


# ---- the kernel walker ----------------------------------------------------------------------------------

class KernelRenderer(TiledLoops, WelfordTiles, ThreadSplitLoops):
    def __init__(self, kernel: Kernel, buffer_dtypes: dict[str, str] | None = None, size_hints=None,
                 choices: CppChoices | None = None):
        kernel = normalize(kernel)
        self.size_hints = size_hints or {}
        self.shape = (choices or CppChoices()).choose_kernel_shape(kernel, self.size_hints)
        # variance: column tiles compute it in one read (welford_tiles.py); rows and thread splits by the
        # corrected two-pass (a row's second walk mostly hits the cache)
        if not (self.shape.kind == "tiled" and native_welford_ok(kernel)):
            kernel = two_pass_form(kernel)
        self.k = kernel
        self.dtypes = {st.name: st.dtype for st in kernel.statements() if not isinstance(st, Store)}
        # float16/bfloat16 roundings of a float value: a store converts (and so rounds) that value itself
        self.rounded_from = {st.name: st.args[0] for st in kernel.statements()
                             if isinstance(st, Compute) and st.op == "cast" and st.dtype in rules.ROUND
                             and rules.compute_type(self.dtypes[st.args[0]]) == "float"}
        self.buffers = kernel.buffer_dtypes(buffer_dtypes)   # buffer name -> IR dtype
        self.lines: list[str] = []
        self.depth = 0
        self.arrays: set[str] = set()               # values held per column of a tile (tiled reductions)
        self.reused: dict[str, tuple[int, str]] = {}  # value -> (scratch id, earlier value): see reuse.py
        self.staged: dict[str, str] = {}            # load -> where a tile block staged it (tiled.py)
        self.converted: dict[str, str] = {}         # load -> the float array holding it converted (rows)
        self.staged_stores: dict[int, str] = {}     # id(store) -> the staging buffer it writes (tiled.py)
        self.load_guard: str | None = None          # loads hoisted before a loop that may run 0 times

    # -- output helpers
    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def open(self, line: str = "", comment: str = "") -> None:
        self.emit((f"{line} {{" if line else "{") + (f"  // {comment}" if comment else ""))
        self.depth += 1

    def close(self) -> None:
        self.depth -= 1
        self.emit("}")

    def parallel_clause(self, work) -> str | None:
        """'' for always parallel, ' if(...)' for a run-time decision, None for never."""
        work = sympy.sympify(work)
        if work.is_Integer:
            return "" if int(work) >= PARALLEL_MIN_WORK else None
        # `parallel:` matters: a bare if() on `parallel for simd` also turns off SIMD when false (7x slower)
        return f" if(parallel: {cpp_index(work)} >= {PARALLEL_MIN_WORK})"

    # -- statements
    def statement(self, stmt) -> None:
        if isinstance(stmt, Load):
            ptr = self.staged.get(stmt.name) or f"{c_name(stmt.buffer)}[{cpp_index(stmt.index)}]"
            buf_dtype = self.buffers[stmt.buffer]
            value = self.converted.get(stmt.name) or rules.LOAD_CONVERT.get(buf_dtype, "{}").format(ptr)
            value = rules.render_cast(value, buf_dtype, stmt.dtype)
            if stmt.mask is not None:
                value = f"{self.ref(stmt.mask)} ? {value} : {rules.literal(stmt.other, stmt.dtype)}"
            if self.load_guard is not None:
                value = f"({self.load_guard}) ? ({value}) : {rules.literal(0, stmt.dtype)}"
            self.define(stmt.name, stmt.dtype, value)
        elif isinstance(stmt, Const):
            self.define(stmt.name, stmt.dtype, rules.literal(stmt.value, stmt.dtype))
        elif isinstance(stmt, IndexValue):
            value = rules.render_cast(f"({cpp_index(stmt.expr, value=True)})", cpp_expr_type(stmt.expr), stmt.dtype)
            self.define(stmt.name, stmt.dtype, value)
        elif isinstance(stmt, Compute):
            args = [self.ref(a) for a in stmt.args]
            expr = rules.render_op(stmt.op, args, [self.dtypes[a] for a in stmt.args], stmt.dtype)
            self.define(stmt.name, stmt.dtype, expr)
        elif isinstance(stmt, Store):
            buf_dtype = self.buffers[stmt.buffer]
            if self.store_source(stmt) != stmt.value:   # fa_f2h(x) == fa_f2h(fa_round_h(x)): one rounding, not two
                value = self.ref(self.store_source(stmt))
            else:
                value = rules.render_cast(self.ref(stmt.value), self.dtypes[stmt.value], buf_dtype)
            value = rules.STORE_CONVERT.get(buf_dtype, "{}").format(value)
            target = self.staged_stores.get(id(stmt)) or f"{c_name(stmt.buffer)}[{cpp_index(stmt.index)}]"
            self.emit(f"{target} = {value};")
        elif isinstance(stmt, Reduce):
            self.reduce_update(stmt)
        else:
            raise TypeError(f"unknown statement {stmt!r}")

    def store_source(self, stmt: Store) -> str:
        """The value a store reads: a float16/bfloat16 rounding's float operand where the buffer has that dtype
        (the store's conversion rounds it), else the stored value."""
        unrounded = self.rounded_from.get(stmt.value)
        if unrounded is not None and self.dtypes[stmt.value] == self.buffers[stmt.buffer]:
            return unrounded
        return stmt.value

    def define(self, name: str, dtype: str, expr: str) -> None:
        if name in self.reused:                      # computed by an earlier phase: read it back
            expr = f"fa_scratch_{self.reused[name][0]}[{cpp_index(self.reduction_position())}]"
        if name in self.arrays:
            self.emit(f"{self.ref(name)} = {expr};")
        else:
            self.emit(f"const {rules.compute_type(dtype)} {_value(name)} = {expr};")
        for scratch, earlier in set(self.reused.values()):
            if earlier == name:                      # a later phase reuses this value: keep it
                self.emit(f"fa_scratch_{scratch}[{cpp_index(self.reduction_position())}] = {_value(name)};")

    def ref(self, name: str) -> str:
        """A value in an expression: tiled reductions keep values that cross phases in per-column arrays."""
        return f"{_value(name)}[fa_j]" if name in self.arrays else _value(name)

    # -- reductions
    def reduce_update(self, stmt: Reduce) -> None:
        acc, arg = self.ref(stmt.name), self.ref(stmt.arg)
        if is_positional(stmt.op):
            pos = cpp_index(self.reduction_position())
            self.emit(f"if (fa_{stmt.op}_takes({arg}, {acc}, {acc}_val)) {{ {acc}_val = {arg}; {acc} = {pos}; }}")
            return
        value = rules.render_cast(arg, self.dtypes[stmt.arg], stmt.dtype)
        self.emit(rules.reduction_update(stmt.op, acc, value, stmt.dtype)[0])

    def reduction_position(self) -> sympy.Expr:
        pos, stride = sympy.Integer(0), sympy.Integer(1)
        for i in reversed(range(len(self.k.reduction))):
            pos += rvar(i) * stride
            stride *= sympy.sympify(self.k.reduction[i])
        return pos

    def declare_accumulators(self, reduces: list[Reduce]) -> None:
        for r in reduces:
            acc = _value(r.name)
            if is_positional(r.op):
                arg_type = rules.compute_type(self.dtypes[r.arg])
                self.emit(f"{arg_type} {acc}_val = 0; int64_t {acc} = -1;")
            else:
                self.emit(f"{rules.compute_type(r.dtype)} {acc} = {rules.reduction_init(r.op, r.dtype)};")

    def simd_pragma(self, reduces: list[Reduce]) -> str | None:
        """`omp simd` with one reduction clause per accumulator; None when a phase can't be a simd loop
        (argmax/argmin keep an index that no OpenMP reduction expresses)."""
        clauses = []
        for r in reduces:
            if is_positional(r.op):
                return None
            _, ident = rules.reduction_update(r.op, "a", "b", r.dtype)
            clauses.append(f" reduction({ident}:{_value(r.name)})")
        return "#pragma omp simd" + "".join(clauses)

    def hoist(self, body, counters: set, trip_count_guard: str | None) -> list:
        """Emits the statements of `body` that do not depend on `counters` (hoist.py) and returns the rest,
        to go inside the loop. Values another phase reads back from scratch stay where they are."""
        keep = set(self.reused) | {earlier for _, earlier in self.reused.values()}
        hoisted = loop_invariants(body, counters, keep)
        self.load_guard = trip_count_guard
        for stmt in hoisted:
            self.statement(stmt)
        self.load_guard = None
        moved = {id(st) for st in hoisted}
        return [st for st in body if id(st) not in moved]

    def reduction_loops(self, body, reduces: list[Reduce], first_range: tuple[str, str] | None = None) -> None:
        """The nested loop over the reduction space with `body` innermost; `first_range` restricts r0.
        Float sums are accumulated per block of about SUM_BLOCK elements and the block sums combined
        pairwise (`fa_cascade`): see `block_dim`. What does not depend on the reduction runs before."""
        dims = self.k.reduction
        if first_range is None:
            guard = positive_guard(_numel(dims))
        else:
            inner = positive_guard(_numel(dims[1:]))
            guard = f"({first_range[1]}) > ({first_range[0]})" + (f" && {inner}" if inner else "")
        body = self.hoist(body, {rvar(i) for i in range(len(dims))}, guard)
        sums = [r for r in reduces if is_float_sum(r)]
        elements = self.sum_block()
        block = self.block_dim(elements) if sums else None
        # a phase over one dim whose sums need no blocks: explicit vectors too (vector_loops.py)
        vectors = (loop_vectors(self, body, rvar(0), dims[0])
                   if len(dims) == 1 and first_range is None and block is None else None)
        if vectors is not None:
            self.emit("#if FA_VEC")
            vector_loop(self, body, rvar(0), 0, dims[0], vectors, None)
            self.emit("#else")
        if block is not None:
            self.open(comment=f"float sums: blocks of ~{elements} elements, block sums combined pairwise")
            for r in sums:
                self.emit(f"fa_cascade<{rules.compute_type(r.dtype)}> fa_cs_{_value(r.name)};")
        for i, n in enumerate(dims):
            lo, hi = ("0", cpp_index(n)) if (i or first_range is None) else first_range
            if i == block:
                per_block = _numel(dims[i + 1:])
                step = (str(max(1, elements // int(per_block))) if per_block.is_Integer else
                        f"(({cpp_index(per_block)}) >= {elements} ? (int64_t)1 : {elements} / ({cpp_index(per_block)}))")
                self.open(f"for (int64_t fa_b = {lo}, fa_step = {step}; fa_b < {hi}; fa_b += fa_step)")
                self.emit(f"const int64_t fa_e = ({hi}) - fa_b < fa_step ? ({hi}) : fa_b + fa_step;")
                self.declare_accumulators(sums)          # the block's own sums, shadowing the phase's
                lo, hi = "fa_b", "fa_e"
            if i == len(dims) - 1:
                pragma = self.simd_pragma(reduces)
                if pragma:
                    self.emit(pragma)
            self.open(f"for (int64_t {rvar(i)} = {lo}; {rvar(i)} < {hi}; ++{rvar(i)})")
        for stmt in body:
            self.statement(stmt)
        for i in reversed(range(len(dims))):
            self.close()
            if i == block:
                for r in sums:
                    self.emit(f"fa_cs_{_value(r.name)}.add({_value(r.name)});")
                self.close()
        if block is not None:
            for r in sums:
                self.emit(f"{_value(r.name)} = fa_cs_{_value(r.name)}.total();")
            self.close()
        if vectors is not None:
            self.emit("#endif")

    def sum_block(self) -> int:
        """Elements per block of a float sum: SUM_BLOCK when the innermost reduction dim fills the vector
        lanes (each lane adds SUM_BLOCK / VECTOR_LANES in a row), else as many as one chain may add. The
        lanes join the accumulator after each run of the innermost dim, so a short one (16-127) makes the
        accumulator a chain of one partial per run: blocks of INNER_RUNS runs (fuzz seed 164 index 2049:
        the mean of 11 x 11 runs of 16 positive values, one chain of 121 partials, erred 70x eager's)."""
        dims = self.k.reduction
        hints = {**{s: SUM_BLOCK for s in sympy.sympify(dims[-1]).free_symbols}, **self.size_hints} if dims else {}
        inner = _hint(sympy.sympify(dims[-1]), hints) if dims else 0
        if inner >= VECTOR_LANES:
            return max(SUM_BLOCK // VECTOR_LANES, min(SUM_BLOCK, int(inner) * INNER_RUNS))
        return SUM_BLOCK // VECTOR_LANES

    def block_dim(self, block: int = SUM_BLOCK) -> int | None:
        """The reduction dim cut into blocks: the innermost one whose loop nest covers `block` elements
        (its inner dims together are shorter; a block takes several of its steps). None when the whole
        reduction is shorter than a block (by the size hints; a size without a hint may be long)."""
        dims = self.k.reduction
        hints = {**{s: block for d in dims for s in sympy.sympify(d).free_symbols}, **self.size_hints}
        for i in reversed(range(len(dims))):
            if _hint(_numel(dims[i:]), hints) >= block:
                return i
        return None

    # -- kernels
    def render(self) -> str:
        k = self.k
        for origin in k.origins:
            where = f" ({origin.file}:{origin.line})" if origin.file else ""
            code = f": {origin.code}" if origin.code else ""
            # one line, and no trailing backslash: it would splice the next line of code into the comment
            self.emit(f"// {origin.aten_op}{where}{code}".replace("\n", " ").replace("\r", " ").rstrip("\\ "))
        params = []
        for name in k.inputs:
            if name in k.outputs:   # updated in place: the body uses the output pointer, which may alias
                params.append(f"const void* {c_name(name)}_in_place")
                continue
            params.append(f"const {rules.storage_type(self.buffers[name])}* __restrict__ {c_name(name)}")
        for name in k.outputs:
            restrict = "" if name in k.inputs else "__restrict__ "
            params.append(f"{rules.storage_type(self.buffers[name])}* {restrict}{c_name(name)}")
        params += [f"int64_t {c_name(s.name)}" for s in k.size_symbols]
        self.open(f'extern "C" void {c_name(k.name)}({", ".join(params)})')
        {"pointwise": self.pointwise, "split": self.split_reduction, "tiled": self.tiled_reduction,
         "rows": self.reduction}[self.shape.kind]()
        self.close()
        return "\n".join(self.lines)

    def outer_loops(self, count: int, pragma: str | None) -> None:
        for i in range(count):
            if i == 0 and pragma:
                self.emit(pragma)
            self.open(f"for (int64_t {xvar(i)} = 0; {xvar(i)} < {cpp_index(self.k.outer[i])}; ++{xvar(i)})")

    def pointwise(self) -> None:
        k = self.k
        if k.tiling is not None and k.tiling.kind == "transpose":
            return self.tiled_pointwise()
        (loop,) = k.loops
        body = loop.body
        n = len(k.outer)
        clause = self.parallel_clause(_numel(k.outer))
        vectors = loop_vectors(self, body, xvar(n - 1), k.outer[-1]) if n else None
        if n == 0:
            self.open()
        elif n == 1:
            if vectors is not None:
                self.emit("#if FA_VEC")
                vector_loop(self, body, xvar(0), 0, k.outer[0], vectors,
                            None if clause is None else f"#pragma omp parallel for{clause}")
                self.emit("#else")
            self.outer_loops(1, "#pragma omp simd" if clause is None else f"#pragma omp parallel for simd{clause}")
        else:
            collapse = f" collapse({n - 1})" if n > 2 else ""
            pragma = None if clause is None else f"#pragma omp parallel for{collapse}{clause}"
            self.outer_loops(n - 1, pragma)
            counter = xvar(n - 1)
            ranges = split_ranges(body, counter, k.outer[-1])
            invariant = {st.name for st in loop_invariants(body, {counter})}
            if ranges is not None or invariant_tests(body, counter, invariant):
                for lo, hi, range_body in ranges or [(0, k.outer[-1], body)]:
                    self.inner_simd_loop(range_body, lo, hi)
                for _ in range(n - 1):
                    self.close()
                return
            body = self.hoist(body, {xvar(n - 1)}, positive_guard(k.outer[-1]))
            if vectors is not None:
                self.emit("#if FA_VEC")
                vector_loop(self, body, xvar(n - 1), 0, k.outer[-1], vectors, None)
                self.emit("#else")
            self.emit("#pragma omp simd")
            self.open(f"for (int64_t {xvar(n - 1)} = 0; {xvar(n - 1)} < {cpp_index(k.outer[-1])}; ++{xvar(n - 1)})")
        for stmt in body:
            self.statement(stmt)
        self.close()
        if vectors is not None:
            self.emit("#endif")
        for _ in range(max(n, 1) - 1):
            self.close()

    def inner_simd_loop(self, body, lo, hi) -> None:
        """The range lo <= x < hi of a pointwise kernel's innermost loop (index_split.py) in its own scope,
        written once per combination of the loop-invariant tests its strided loads' masks depend on."""
        counter = xvar(len(self.k.outer) - 1)
        lo, hi = sympy.sympify(lo), sympy.sympify(hi)
        self.open(comment=f"{counter} in [{cpp_index(lo)}, {cpp_index(hi)})")
        if hi - lo == 1:                             # one step: no loop
            self.emit(f"const int64_t {counter} = {cpp_index(lo)};")
            for stmt in body:
                self.statement(stmt)
            self.close()
            return
        invariant = {st.name for st in loop_invariants(body, {counter})}
        tests = invariant_tests(body, counter, invariant) or []
        for stmt in _needed_by(body, tests):
            self.statement(stmt)
        for number, values in enumerate(itertools.product((True, False), repeat=len(tests))):
            condition = " && ".join(_value(t) if v else f"!{_value(t)}" for t, v in zip(tests, values))
            if tests:
                if number:
                    self.close()
                self.open(f"if ({condition})" if number == 0 else
                          "else" if number == 2 ** len(tests) - 1 else f"else if ({condition})")
            loop_body = self.hoist(with_values(body, dict(zip(tests, values))), {counter}, positive_guard(hi - lo))
            self.emit("#pragma omp simd")
            self.open(f"for (int64_t {counter} = {cpp_index(lo)}; {counter} < {cpp_index(hi)}; ++{counter})")
            for stmt in loop_body:
                self.statement(stmt)
            self.close()
        if tests:
            self.close()
        self.close()

    def reduction(self) -> None:
        k = self.k
        n = len(k.outer)
        clause = self.parallel_clause(_numel(k.outer) * _numel(k.reduction))
        collapse = f" collapse({n})" if n > 1 else ""
        for number, ((buf, index), loads) in enumerate(row_invariant_half_loads(k, self.buffers).items()):
            size = cpp_index(k.reduction[0])
            self.emit(f"float fa_rows_{number}[{size}];  // the same {c_name(buf)} elements in every row: "
                      "converted once")
            self.emit("#pragma omp simd")
            self.emit(f"for (int64_t {rvar(0)} = 0; {rvar(0)} < {size}; ++{rvar(0)}) fa_rows_{number}[{rvar(0)}] = "
                      f"{rules.LOAD_CONVERT['float16'].format(f'{c_name(buf)}[{cpp_index(index)}]')};")
            self.converted.update({load.name: f"fa_rows_{number}[{rvar(0)}]" for load in loads})
        self.outer_loops(n, None if clause is None else f"#pragma omp parallel for{collapse}{clause}")
        if n == 0:
            self.open()
        self.reused = plan_reuse(k)
        for scratch, earlier in sorted(set(self.reused.values())):
            self.emit(f"{rules.compute_type(self.dtypes[earlier])} fa_scratch_{scratch}[{_numel(k.reduction)}];"
                      "  // reused by a later phase")
        for loop in k.loops:
            reduces = [s for s in loop.body if isinstance(s, Reduce)]
            if not loop.over_reduction:
                for stmt in loop.body:
                    self.statement(stmt)
                continue
            self.declare_accumulators(reduces)
            self.reduction_loops(loop.body, reduces)
        for _ in range(max(n, 1)):
            self.close()

    def tiled_reduction(self) -> None:
        """Outer points in tiles of columns; accumulators are arrays, the simd loop runs over the tile's
        columns inside the reduction loops. Wide tiles read rows sequentially (4096x1024 column sum: 2.9 ms
        with 32-column tiles, 0.45 ms with whole rows), but every thread needs a tile: see fa_tile_width."""
        k = self.k
        n = len(k.outer)
        max_tile = self.shape.get("max_tile")
        clause = self.parallel_clause(_numel(k.outer) * _numel(k.reduction))
        pragma = None if clause is None else f"#pragma omp parallel for{f' collapse({n})' if n > 1 else ''}{clause}"
        width = cpp_index(k.outer[-1])
        rows = cpp_index(_numel(k.outer[:-1]))
        self.emit(f"const int64_t fa_tw = fa_tile_width({width}, {rows}, {max_tile});")
        self.outer_loops(n - 1, pragma)
        if n == 1 and pragma:
            self.emit(pragma)
        self.open(f"for (int64_t fa_x = 0; fa_x < {width}; fa_x += fa_tw)")
        self.emit(f"const int64_t fa_w = ({width}) - fa_x < fa_tw ? ({width}) - fa_x : fa_tw;")
        for loop in k.loops:          # values that outlive their phase live in per-column arrays
            for stmt in loop.body:
                if not loop.over_reduction and isinstance(stmt, Const):
                    self.statement(stmt)            # the same for every column: a scalar
                elif isinstance(stmt, Reduce) or (not loop.over_reduction and not isinstance(stmt, Store)):
                    self.arrays.add(stmt.name)
                    self.emit(f"{rules.compute_type(stmt.dtype)} {_value(stmt.name)}[{max_tile}];")
        invariants = {}               # phase -> what it computes once per column (tiled.py)
        for phase, loop in enumerate(k.loops):
            if loop.over_reduction:
                invariants[phase], per_column = self.column_invariants(loop)
                for name in sorted(per_column):
                    self.arrays.add(name)
                    self.emit(f"{rules.compute_type(self.dtypes[name])} {_value(name)}[{max_tile}];")

        def column_loop(body):
            self.emit("#pragma omp simd")
            self.open("for (int64_t fa_j = 0; fa_j < fa_w; ++fa_j)")
            self.emit(f"const int64_t {xvar(n - 1)} = fa_x + fa_j;")
            for stmt in body:
                self.statement(stmt)
            self.close()

        for phase, loop in enumerate(k.loops):
            if not loop.over_reduction:
                column_loop([st for st in loop.body if not isinstance(st, Const)])   # consts: emitted above
                continue
            if welford_groups(loop.body):
                self.welford_tile_phase(loop, max_tile)
                continue
            hoisted = {id(st) for st in invariants[phase] if isinstance(st, Compute)}
            if hoisted:
                column_loop(invariants[phase])
            reduces = [s for s in loop.body if isinstance(s, Reduce)]
            # float sums down long columns: a tree of fan-out 64 per column (see fa_tile_flush)
            sums = [r for r in reduces if is_float_sum(r)] if self.block_dim(64) is not None else []
            if sums:
                self.open(comment="column sums: levels of 64 rows")
                self.emit("int64_t fa_rows = 0;")
                for r in sums:
                    self.emit(f"{rules.compute_type(r.dtype)} fa_lv_{_value(r.name)}[FA_TILE_LEVELS - 1][{max_tile}];")
            if reduces:
                self.open("for (int64_t fa_j = 0; fa_j < fa_w; ++fa_j)")
                for r in reduces:
                    self.emit(f"{self.ref(r.name)} = {rules.reduction_init(r.op, r.dtype)};")
                    if r in sums:
                        self.emit(f"for (int64_t fa_k = 0; fa_k < FA_TILE_LEVELS - 1; ++fa_k) "
                                  f"fa_lv_{_value(r.name)}[fa_k][fa_j] = 0;")
                self.close()
            stores = self.transposed_stores(loop.body)
            for i, size in enumerate(k.reduction):
                first, end = "0", cpp_index(size)
                if stores and i == len(k.reduction) - 1:
                    first, end = self.open_store_rows(stores, size, max_tile)
                self.open(f"for (int64_t {rvar(i)} = {first}; {rvar(i)} < {end}; ++{rvar(i)})")
            column_loop([st for st in loop.body if id(st) not in hoisted])
            if sums:
                self.open(f"if ((++fa_rows & ((1 << FA_TILE_LEVEL_BITS) - 1)) == 0)")
                for r in sums:
                    self.emit(f"fa_tile_flush({_value(r.name)}, fa_lv_{_value(r.name)}[0], {max_tile}, fa_w, fa_rows);")
                self.close()
            for i in reversed(range(len(k.reduction))):
                self.close()
                if stores and i == len(k.reduction) - 1:
                    self.close_store_rows(stores, max_tile)
            if sums:
                for r in sums:
                    self.emit(f"fa_tile_total({_value(r.name)}, fa_lv_{_value(r.name)}[0], {max_tile}, fa_w);")
                self.close()
        self.arrays.clear()
        for _ in range(n):
            self.close()


# ---- public entry points ---------------------------------------------------------------------------------

@functools.lru_cache(None)
def _prelude_template() -> str:
    return (Path(__file__).with_name("prelude.h")).read_text()


def prelude() -> str:
    decls = rules.math_declarations(rules.libmvec_functions())
    return _prelude_template().replace("// @MATH_DECLARATIONS@", decls)


@functools.lru_cache(None)
def tile_helpers() -> str:
    """tiles.h: what transpose-tiled kernels call (`fa_transpose8x8_b32`)."""
    return (Path(__file__).with_name("tiles.h")).read_text()


def helper_sources(kernels: list[str]) -> list[str]:
    return ([tile_helpers()] if any("fa_transpose8x8_b32(" in k for k in kernels) else []) + \
        ([vector_helpers()] if any("#if FA_VEC" in k for k in kernels) else [])


def render_kernel(kernel: Kernel, buffer_dtypes: dict[str, str] | None = None, size_hints=None,
                  choices: CppChoices | None = None) -> str:
    """One kernel as an `extern "C"` C++ function (needs the prelude of `render_translation_unit`);
    `choices` picks its shape (`CppChoices.choose_kernel_shape`)."""
    if any((isinstance(st, Load) and st.offset is not None) or (isinstance(st, Store) and st.accumulate)
           for st in kernel.statements()):
        # CppChoices keeps gathers in ATen (their index errors are eager's IndexError); a Program from
        # other choices would need bounds checks and hoisting rules this renderer does not have
        raise NotImplementedError(f"{kernel.name}: the C++ codegen renders no gathers or scatter-adds")
    return KernelRenderer(kernel, buffer_dtypes, size_hints, choices).render()


def translation_unit(graph_id: str, code: str) -> str:
    """`code` (kernels and their helpers) as a whole C++ source: the prelude, then the code, then the libm
    entry points the code calls (libm_variants.py)."""
    parts = [f"// fuse-all: graph {graph_id}", prelude(), code, math_definitions(code)]
    return "\n\n".join(parts).rstrip("\n") + "\n"


def render_translation_unit(program: Program, choices: CppChoices | None = None) -> str:
    """All kernels of `program` in one C++ source: compiled by one compiler call."""
    dtypes = program.buffer_dtypes()
    kernels = [render_kernel(kernel, dtypes, program.size_hints, choices) for kernel in program.kernels.values()]
    return translation_unit(program.graph_id, "\n\n".join([*helper_sources(kernels), *kernels]))

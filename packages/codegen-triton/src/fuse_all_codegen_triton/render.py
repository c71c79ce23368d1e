"""The renderer: ONE walker over a `Kernel`'s statements that writes a `@triton.jit` function.

Layouts (see `fuse_all_ir.program` for the semantics being implemented):
* pointwise: one flat ``xindex`` block of XBLOCK points over the outer space; x0.. derived by div/mod.
* tiled (the kernel's `TilePlan` is a transpose tile): a [YBLOCK, XBLOCK] block of the plan's two dims,
  ``yindex`` down axis 0 (the dim the disagreeing loads walk contiguously) and ``xindex`` along axis 1
  (the stores' contiguous dim), so both sides read and write whole segments; every other outer dim is
  one scalar per program (``zindex``). One program per tile, x tiles fastest.
* reduction: a [XBLOCK, RBLOCK] tile, rows = outer points, columns = reduction points.
  - persistent (RBLOCK >= rnumel, concrete rnumel): every phase is straight-line code on the whole row,
    so a value loaded or computed in one phase is reused by later ones (CSE across phases: softmax loads
    its input once).
  - looped: every reduction phase is a ``for roffset in range(0, rnumel, RBLOCK)`` loop with
    [XBLOCK, RBLOCK] accumulators, reduced across lanes after the loop.
Every value's *families* ({"x"}, {"r"}, both or none) give its shape; loads and stores mask with exactly
the masks of their families (a weight indexed by r alone is read with rmask only), and broadcast the
pointer when the mask or value has more families than the index.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import NamedTuple

import sympy

from fuse_all_ir import contiguous_strides
from fuse_all_ir.host import py_index
from fuse_all_ir.normalize import normalize
from fuse_all_ir.program import Compute, Const, IndexValue, Kernel, Load, Reduce, Store
from fuse_all_ir.symbolic import linear_index, size_hint, xvar
from fuse_all_ir.vocabulary import compute_dtype, is_float, is_positional, is_welford
from fuse_all_ir.welford import two_pass_form

from . import configs as cfgs
from . import reductions as red
from .choices import TritonChoices
from ._triton_compat import pointer_type
from .indexing import (DEFAULT_SIZE_HINT, choose_index_dtype, derive_index_vars, families, symbol_names,
                       triton_expr_type, triton_index)
from .rules import literal, render_cast, render_compute, tl_type

INDENT = "    "


@dataclass
class RenderOptions:
    choices: TritonChoices = field(default_factory=TritonChoices)   # kernel shapes (persistent / looped)
    max_autotune: bool = False          # a wider space of candidate configs


@dataclass
class RenderedKernel:
    name: str
    source: str                     # the @triton.jit function
    source_int64: str | None        # its int64-indexing twin (symbolic sizes that may pass 2**31)
    spec: dict                      # what `TritonKernel` needs at run time (a Python literal)


class _Value(NamedTuple):
    code: str
    dtype: str                      # IR dtype
    fam: frozenset


def _tile_dims(kernel: Kernel) -> tuple[int, int] | None:
    plan = kernel.tiling
    return (plan.y_dim, plan.x_dim) if plan is not None and plan.kind == "transpose" else None


def _grid(kernel: Kernel, mode: str, xnumel) -> str:
    """The grid template (see configs.grid_source)."""
    if mode != "tiled":
        return cfgs.default_grid(py_index(xnumel))
    y, x = _tile_dims(kernel)
    rest = sympy.Mul(*[n for i, n in enumerate(kernel.outer) if i not in (y, x)])
    return (f"({py_index(rest)}) * ((({py_index(kernel.outer[y])}) + {{YBLOCK}} - 1) // {{YBLOCK}})"
            f" * ((({py_index(kernel.outer[x])}) + {{XBLOCK}} - 1) // {{XBLOCK}})")


def render_kernel(kernel: Kernel, buffer_dtypes: dict | None = None, hints: dict | None = None,
                  options: RenderOptions | None = None) -> RenderedKernel:
    options = options or RenderOptions()
    hints = hints or {}
    if kernel.tiling is None:
        # dims every access walks as one become one: a contiguous (32, 28, 28, 512) kernel indexes by
        # `xindex` and `xindex % 512` instead of three divisions per element (tiled kernels are normalised
        # by their plan, column reductions keep the dims their plan was made for)
        kernel = normalize(kernel)
    dtypes = kernel.buffer_dtypes(buffer_dtypes)
    index_dtype, guard = choose_index_dtype(kernel, hints)
    shape = options.choices.choose_kernel_shape(kernel, hints)
    mode = shape.kind
    if mode == "persistent":   # the row is in registers: the variance's two passes read it once
        kernel = two_pass_form(kernel)
    source = _Writer(kernel, dtypes, index_dtype, mode).render(kernel.name)
    source_int64 = None
    if guard is not None:   # sizes are symbolic: keep an int64 twin for sizes past 2**31
        source_int64 = _Writer(kernel, dtypes, "int64", mode).render(kernel.name + "_i64")
    xnumel, rnumel = sympy.Mul(*kernel.outer), sympy.Mul(*kernel.reduction)
    spec = {
        "name": kernel.name,
        "kind": mode,
        "pointers": [pointer_type(dtypes[b]) for b in (*kernel.inputs, *kernel.outputs)],
        "sizes": [str(s) for s in kernel.size_symbols],
        "size_type": "i32" if index_dtype == "int32" else "i64",
        "xnumel": py_index(xnumel),
        "grid": _grid(kernel, mode, xnumel),
        "rnumel": py_index(rnumel) if kernel.reduction else None,
        "int32_guard": guard,
        "configs": _configs(kernel, shape, xnumel, rnumel, hints, options),
        "n_inputs": len(kernel.inputs),
        "fp_fusion": not rounds_to_half(kernel),
        # outputs whose old contents the kernel reads (in place): benchmarking must not run on them
        "mutated": [i for i, b in enumerate(kernel.outputs) if b in kernel.inputs or b in _loaded(kernel)],
        "source_hash": hashlib.sha256((source + (source_int64 or "")).encode()).hexdigest()[:32],
        "size_hints": {str(s): int(hints[s]) for s in kernel.size_symbols if s in hints},
    }
    return RenderedKernel(kernel.name, source, source_int64, spec)


def rounds_to_half(kernel: Kernel) -> bool:
    """Whether the kernel rounds a value to float16/bfloat16 (a cast; `fuse_all_ir.rounding` adds one after
    every half op). Such a kernel compiles without FMA contraction: LLVM narrows `extf(truncf(x * y)) + z`
    to half arithmetic and would then fuse the multiply and the add into one `fma.rn.f16x2`, dropping the
    product's rounding that eager's separate kernels do (Inductor: `enable_fp_fusion` off when it emulates
    precision casts)."""
    return any(isinstance(st, Compute) and st.op == "cast" and st.dtype in ("float16", "bfloat16")
               for st in kernel.statements())


def _loaded(kernel: Kernel) -> set:
    return {st.buffer for st in kernel.statements() if isinstance(st, Load)}




def _size_hint(expr, hints) -> int:
    return size_hint(expr, hints, DEFAULT_SIZE_HINT)


def _is_column(kernel: Kernel) -> bool:
    """The kernel's plan: a column reduction (contiguous along the last outer dim, strided along r)."""
    return kernel.tiling is not None and kernel.tiling.kind == "column"


def _configs(kernel, shape, xnumel, rnumel, hints, options: RenderOptions) -> list:
    mode = shape.kind
    x = max(1, _size_hint(xnumel, hints))
    if mode == "pointwise":
        return cfgs.pointwise_configs(x, options.max_autotune, dynamic=not sympy.sympify(xnumel).is_number)
    if mode == "tiled":
        y_dim, x_dim = _tile_dims(kernel)
        return cfgs.tiled_configs(max(1, _size_hint(kernel.outer[y_dim], hints)),
                                  max(1, _size_hint(kernel.outer[x_dim], hints)), options.max_autotune)
    r = max(1, _size_hint(rnumel, hints))
    inner = not _is_column(kernel)
    if mode == "persistent":
        return cfgs.persistent_configs(x, r, inner, options.max_autotune)
    if not inner:
        return cfgs.column_configs(x, r, options.max_autotune, shape.get("rblock"))
    return cfgs.looped_configs(x, r, inner, options.max_autotune, shape.get("rblock"))


class _Writer:
    """Writes one kernel function. Values are SSA temporaries ``tmpN``; identical expressions are reused
    (CSE) within a scope: the whole kernel when persistent, one loop body when looped."""

    def __init__(self, kernel: Kernel, dtypes: dict, index_dtype: str, mode: str):
        self.k, self.dtypes, self.idx64, self.mode = kernel, dtypes, index_dtype == "int64", mode
        self.two_d = mode in ("persistent", "looped")
        self.tile = _tile_dims(kernel) if mode == "tiled" else None
        # tiled: the plan's dims are the block's two axes; every other outer dim is a scalar per program
        self.tile_family = {} if self.tile is None else {f"x{self.tile[0]}": "y", f"x{self.tile[1]}": "x"}
        self.lines: list[str] = []
        self.depth = 1
        self.values: dict[str, _Value] = {}
        self.scopes: list[dict] = [{}]
        self.load_keys: dict[str, list] = {}
        self.n_tmp = 0
        self.n_acc = 0
        # looped: the buffers each reduction phase's later phases load again (kept in L2 for them)
        self.phase = -1
        # the row-major flat index over the outer dims, which `flat_index` prints as xindex (one outer dim:
        # x0 is xindex already; a tile has its own two axes)
        outer_vars = [xvar(i) for i in range(len(kernel.outer))]
        self.flat_outer = (linear_index(0, outer_vars, contiguous_strides(kernel.outer))
                           if self.tile is None and len(kernel.outer) >= 2 else None)
        self.loaded_later = [set().union(*[{st.buffer for st in later.body if isinstance(st, Load)}
                                           for later in kernel.loops[i + 1:]])
                             for i in range(len(kernel.loops))]

    # ---- output helpers ----
    def emit(self, line: str) -> None:
        self.lines.append(INDENT * self.depth + line)

    def new_name(self, prefix="tmp") -> str:
        if prefix == "tmp":
            self.n_tmp += 1
            return f"tmp{self.n_tmp - 1}"
        self.n_acc += 1
        return f"{prefix}{self.n_acc - 1}"

    def assign(self, expr: str, buffer: str | None = None) -> str:
        for scope in reversed(self.scopes):
            if expr in scope:
                return scope[expr]
        name = self.new_name()
        self.emit(f"{name} = {expr}")
        self.scopes[-1][expr] = name
        if buffer is not None:
            self.load_keys.setdefault(buffer, []).append((self.scopes[-1], expr))
        return name

    def families(self, expr) -> frozenset:
        if self.tile is None:
            return families(expr)
        names = symbol_names(expr)
        return frozenset(f for name, f in self.tile_family.items() if name in names)

    def shape(self, fam: frozenset) -> str:
        if self.tile is not None:
            return f"[{'YBLOCK' if 'y' in fam else 1}, {'XBLOCK' if 'x' in fam else 1}]"
        if not self.two_d:
            return "[XBLOCK]" if fam else "[1]"
        return f"[{'XBLOCK' if 'x' in fam else 1}, {'RBLOCK' if 'r' in fam else 1}]"

    def mask(self, fam: frozenset, extra: str | None = None) -> str | None:
        parts = [m for f, m in (("y", "ymask"), ("x", "xmask"), ("r", "rmask")) if f in fam]
        if extra is not None:
            parts.append(extra)
        return " & ".join(parts) or None

    def pointer(self, base: str, index, fam: frozenset, masked: bool = False, offset: "_Value | None" = None) -> str:
        code = self.flat_index(index) or triton_index(index)
        own = self.families(index)
        if offset is not None:   # a gather: the computed element offset (int64) joins the address
            code, own = f"{code} + {offset.code}", own | offset.fam
        # the mask/value has more families than the index, or a block mask (even of shape [1, 1]) meets a
        # fixed address: broadcast the pointer, tl.load refuses a block mask on a scalar pointer
        if own != fam or (masked and not own):
            code = f"{code} + tl.zeros({self.shape(fam)}, tl.int32)"
        return f"{base} + ({code})"

    def flat_index(self, index) -> str | None:
        """`xindex` (+ an offset free of x) for an index that walks the outer space row-major, as a
        contiguous operand of a pointwise kernel does: `512*x0 + x1` with x0 = xindex // 512 and
        x1 = xindex % 512 is xindex, which Triton need not recompute and reads as contiguous; else None."""
        if self.flat_outer is None:
            return None
        rest = sympy.expand(sympy.sympify(index) - self.flat_outer)
        if "x" in self.families(rest):
            return None
        return "xindex" if rest == 0 else f"xindex + ({triton_index(rest)})"

    # ---- the walk ----
    def render(self, fn_name: str) -> str:
        k = self.k
        params = [f"in_ptr{i}" for i in range(len(k.inputs))] + [f"out_ptr{i}" for i in range(len(k.outputs))]
        params += [str(s) for s in k.size_symbols] + ["XBLOCK: tl.constexpr"]
        if self.tile is not None:
            params.append("YBLOCK: tl.constexpr")
        if self.two_d:
            params.append("RBLOCK: tl.constexpr")
        head = [f"def {fn_name}({', '.join(params)}):"]
        self.header()
        if self.mode == "looped":
            for self.phase, loop in enumerate(k.loops):
                self.looped_phase(loop.body) if loop.over_reduction else self.statements(loop.body)
        else:
            if self.mode == "persistent":
                self.r_prologue(frozenset(self.used_vars("r", k.statements())))
            for loop in k.loops:
                self.statements(loop.body)
        return "\n".join(["@triton.jit", *head, *self.comment(), *self.lines])

    def comment(self) -> list[str]:
        k = self.k
        what = {"pointwise": "pointwise", "tiled": "tiled pointwise", "persistent": "persistent reduction",
                "looped": "looped reduction"}[self.mode]
        lines = [f"{INDENT}# {what} over {tuple(k.outer)}"
                 + (f" x {tuple(k.reduction)}" if k.reduction else "")
                 + (f", tile y=x{self.tile[0]} x=x{self.tile[1]}" if self.tile else "")
                 + (", column reduction" if _is_column(k) else "")
                 + f", {'int64' if self.idx64 else 'int32'} indexing"]
        args = [f"in_ptr{i}={b}" for i, b in enumerate(k.inputs)] + [f"out_ptr{i}={b}" for i, b in enumerate(k.outputs)]
        if args:
            lines.append(f"{INDENT}# " + ", ".join(args))
        seen = []
        for o in k.origins:
            where = f" ({o.file.rsplit('/', 1)[-1]}:{o.line})" if o.file and o.line else ""
            text = f"{o.aten_op}{where}" + (f": {o.code}" if o.code else "")
            if text not in seen:
                seen.append(text)
        lines += [f"{INDENT}# from {t}" for t in seen[:8]]
        return lines

    def used_vars(self, family: str, stmts) -> set:
        used = set()
        for st in stmts:
            expr = getattr(st, "index", None) if not isinstance(st, IndexValue) else st.expr
            if expr is not None:
                used |= {name for name in symbol_names(expr) if name.startswith(family)}
        return used

    def header(self) -> None:
        k = self.k
        if self.tile is not None:
            return self.tiled_header()
        self.emit(f"xnumel = {triton_index(sympy.Mul(*k.outer))}")
        if self.two_d:
            self.emit(f"rnumel = {triton_index(sympy.Mul(*k.reduction))}")
        pid = "tl.program_id(0).to(tl.int64)" if self.idx64 else "tl.program_id(0)"
        self.emit(f"xoffset = {pid} * XBLOCK")
        self.emit(f"xindex = xoffset + tl.arange(0, XBLOCK){'[:, None]' if self.two_d else ''}")
        self.emit("xmask = xindex < xnumel")
        if self.two_d:
            self.emit(f"rbase = tl.arange(0, RBLOCK)[None, :]{'.to(tl.int64)' if self.idx64 else ''}")
        for name, expr in derive_index_vars("x", k.outer, self.used_vars("x", k.statements())):
            self.emit(f"{name} = {expr}")

    def tiled_header(self) -> None:
        k, (y, x) = self.k, self.tile
        pid = "tl.program_id(0).to(tl.int64)" if self.idx64 else "tl.program_id(0)"
        self.emit(f"ynumel = {triton_index(k.outer[y])}")
        self.emit(f"xnumel = {triton_index(k.outer[x])}")
        self.emit(f"pid = {pid}")
        self.emit("xtiles = (xnumel + XBLOCK - 1) // XBLOCK")
        self.emit("ytiles = (ynumel + YBLOCK - 1) // YBLOCK")
        self.emit("xindex = (pid % xtiles) * XBLOCK + tl.arange(0, XBLOCK)[None, :]")
        self.emit("yindex = ((pid // xtiles) % ytiles) * YBLOCK + tl.arange(0, YBLOCK)[:, None]")
        self.emit("xmask = xindex < xnumel")
        self.emit("ymask = yindex < ynumel")
        used = self.used_vars("x", k.statements())
        if f"x{x}" in used:
            self.emit(f"x{x} = xindex")
        if f"x{y}" in used:
            self.emit(f"x{y} = yindex")
        rest = [i for i in range(len(k.outer)) if i not in (y, x)]
        if not any(f"x{i}" in used for i in rest):
            return
        self.emit("zindex = pid // (xtiles * ytiles)")
        derived = dict(derive_index_vars("z", [k.outer[i] for i in rest], {f"z{j}" for j in range(len(rest))}))
        for j, i in enumerate(rest):
            if f"x{i}" in used:
                self.emit(f"x{i} = {derived[f'z{j}']}")

    def r_prologue(self, used: set, offset: str | None = None) -> None:
        self.emit(f"rindex = {offset} + rbase" if offset else "rindex = rbase")
        self.emit("rmask = rindex < rnumel")
        for name, expr in derive_index_vars("r", self.k.reduction, used):
            self.emit(f"{name} = {expr}")

    def statements(self, body) -> None:
        for st in body:
            if isinstance(st, Reduce):
                self.reduce_persistent(st)
            else:
                self.statement(st)

    def statement(self, st) -> None:
        if isinstance(st, Load):
            self.load(st)
        elif isinstance(st, Store):
            self.store(st)
        elif isinstance(st, Const):
            code = f"tl.full({self.shape(frozenset())}, {literal(st.value, st.dtype)}, {tl_type(st.dtype)})"
            self.values[st.name] = _Value(self.assign(code), st.dtype, frozenset())
        elif isinstance(st, IndexValue):
            self.index_value(st)
        elif isinstance(st, Compute):
            args = [self.values[a] for a in st.args]
            code = render_compute(st.op, [(a.code, a.dtype) for a in args], st.dtype)
            fam = frozenset().union(*[a.fam for a in args])
            self.values[st.name] = _Value(self.assign(code), st.dtype, fam)
        else:
            raise TypeError(f"unexpected statement {st!r}")

    def load(self, st: Load) -> None:
        if st.buffer in self.k.inputs:
            base = f"in_ptr{self.k.inputs.index(st.buffer)}"
        else:
            base = f"out_ptr{self.k.outputs.index(st.buffer)}"
        own = self.values[st.mask] if st.mask is not None else None
        offset = self.values[st.offset] if st.offset is not None else None
        fam = self.families(st.index) | (own.fam if own else frozenset()) | (offset.fam if offset else frozenset())
        # a reduction kernel's load of one fixed element is a [1, 1] block, not a scalar: Triton's CPU
        # interpreter computes comparisons of scalars as float32 data, which `acc | value` then rejects
        # (fuzz seed 132 #1068); compiled code is the same either way
        fixed = self.two_d and not fam
        args = [self.pointer(base, st.index, fam, masked=own is not None or fixed, offset=offset)]
        mask = self.mask(fam, own.code if own else None)
        if mask:
            args.append(mask)
        if own is not None:
            args.append(f"other={literal(st.other, st.dtype)}")
        if self.mode == "looped" and self.depth > 1 and "r" in fam:
            # a reduction loop streams its input once: evict-first keeps L2 for what is read again (a later
            # phase's re-read of the same buffer: evict-last). Split BatchNorm statistics over NCHW on the
            # H200: 43.6 -> 31.8 us (bench/gpu_split_welford_probe.py); Inductor does the same
            later = st.buffer in self.loaded_later[self.phase]
            args.append(f"eviction_policy='{'evict_last' if later else 'evict_first'}'")
        code = f"tl.load({', '.join(args)})"
        storage = self.dtypes.get(st.buffer, st.dtype)
        if compute_dtype(storage) != storage:   # float16/bfloat16: compute in float32
            code += ".to(tl.float32)"
        if storage != st.dtype:
            code = render_cast(code, storage, st.dtype)
        self.values[st.name] = _Value(self.assign(code, buffer=st.buffer), st.dtype, fam)

    def store(self, st: Store) -> None:
        value = self.values[st.value]
        offset = self.values[st.offset] if st.offset is not None else None
        own = self.values[st.mask] if st.mask is not None else None
        # a store of a constant to a fixed address (0-d output) still runs per lane, masked to lane 0
        fam = (self.families(st.index) | value.fam | (offset.fam if offset else frozenset())
               | (own.fam if own else frozenset())) or frozenset({"x"})
        base = f"out_ptr{self.k.outputs.index(st.buffer)}"
        args = [self.pointer(base, st.index, fam, offset=offset), value.code]
        mask = self.mask(fam, own.code if own else None)
        if mask:
            args.append(f"mask={mask}" if st.accumulate else mask)
        if st.accumulate:   # a scatter-add: other points may add into the same element
            self.emit(f"tl.atomic_add({', '.join(args)}, sem='relaxed')")
        else:
            self.emit(f"tl.store({', '.join(args)})")
        for scope, key in self.load_keys.pop(st.buffer, []):   # later loads must see the new values
            scope.pop(key, None)

    def index_value(self, st: IndexValue) -> None:
        fam = self.families(st.expr)
        kind = triton_expr_type(st.expr)
        src = kind if kind != "int64" else ("int64" if self.idx64 else "int32")
        if not fam and st.expr.is_number:
            value = int(st.expr) if kind == "int64" else float(st.expr) if kind == "float64" else bool(st.expr)
            code = f"tl.full({self.shape(fam)}, {value!r}, {tl_type(st.dtype)})"
        elif not fam:   # a size argument (symbolic size): a scalar, broadcast like a constant
            scalar = render_cast(f"({triton_index(st.expr, value=True)})", src, st.dtype)
            code = f"tl.full({self.shape(fam)}, 0, {tl_type(st.dtype)}) + {scalar}"
        else:
            code = render_cast(triton_index(st.expr, value=True), src, st.dtype)
        self.values[st.name] = _Value(self.assign(code), st.dtype, fam)

    # ---- reductions ----
    def reduced_input(self, st: Reduce):
        """(op, accumulator dtype, value code) for a Reduce's argument converted for accumulation."""
        arg = self.values[st.arg]
        op = red.normalize_op(st.op, arg.dtype, st.dtype)
        acc_dtype = red.accumulator_dtype(op, arg.dtype, st.dtype)
        code = arg.code
        if op in ("any", "all") and arg.dtype != "bool":
            code = self.assign(f"{arg.code} != 0")
        elif acc_dtype != compute_dtype(arg.dtype):
            code = self.assign(render_cast(arg.code, arg.dtype, acc_dtype))
        return op, acc_dtype, code

    def reduce_persistent(self, st: Reduce) -> None:
        op, acc_dtype, code = self.reduced_input(st)
        masked = self.assign(f"tl.where(rmask, {code}, {red.neutral(op, acc_dtype)})")
        index = None
        if is_positional(op):
            index = self.assign(f"tl.broadcast_to(rindex, {masked}.shape)")
        result = self.assign(red.final(op, acc_dtype, masked, index))
        self.values[st.name] = _Value(result, st.dtype, frozenset("x"))

    def looped_phase(self, body) -> None:
        """One reduction phase as a loop. The loop body is written first (into a side buffer) because the
        accumulators' dtypes are known only once their inputs have been rendered."""
        outer_lines, self.lines = self.lines, []
        self.depth += 1
        self.scopes.append({})
        self.r_prologue(self.used_vars("r", body), offset="roffset")
        inits, finals = [], []
        welford_accs: dict[tuple, str] = {}   # (arg, mask) -> the group's accumulator prefix
        for st in body:
            if not isinstance(st, Reduce):
                self.statement(st)
                continue
            if is_welford(st.op):
                self.welford_update(st, welford_accs, inits, finals)
                continue
            op, acc_dtype, code = self.reduced_input(st)
            shape = "[XBLOCK, RBLOCK]"
            acc = self.new_name("_acc")
            tl_acc = tl_type(acc_dtype)
            inits.append(f"{acc} = tl.full({shape}, {red.neutral(op, acc_dtype)}, {tl_acc})")
            if is_positional(op):
                idx = acc + "_index"
                big = 2**62 if self.idx64 else 2**31 - 1
                inits.append(f"{idx} = tl.full({shape}, {big}, {'tl.int64' if self.idx64 else 'tl.int32'})")
                new_v, new_i = self.new_name(), self.new_name()
                self.emit(f"{new_v}, {new_i} = fa.{op}_combine({acc}, {idx}, {code}, rindex)")
                self.emit(f"{acc} = tl.where(rmask, {new_v}, {acc})")
                self.emit(f"{idx} = tl.where(rmask, {new_i}, {idx})")
                finals.append((st, red.final(op, acc_dtype, acc, idx)))
            elif op == "sum" and is_float(acc_dtype):
                # each lane adds rnumel / RBLOCK values in a row (5e4 at 1e8 elements): compensated
                # (Kahan) so the lane's error does not grow with that count; see reductions.kahan_step
                inits.append(f"{acc}_c = tl.full({shape}, 0, {tl_acc})")
                for line in red.kahan_step(acc, f"{acc}_c", code, "rmask", self.new_name):
                    self.emit(line)
                finals.append((st, red.final(op, acc_dtype, f"({acc} - {acc}_c)")))
            else:
                self.emit(f"{acc} = tl.where(rmask, {red.combine(op, acc_dtype, acc, code)}, {acc})")
                finals.append((st, red.final(op, acc_dtype, acc)))
        loop_lines, self.lines = self.lines, outer_lines
        self.scopes.pop()
        self.depth -= 1
        for line in inits:
            self.emit(line)
        self.emit("for roffset in range(0, rnumel, RBLOCK):")
        self.lines += loop_lines
        for st, code in finals:
            if st is None:                       # a Welford group: both statistics from one combine
                acc, reduces = code
                mean, m2 = self.new_name(), self.new_name()
                self.emit(f"{mean}, {m2} = fa.welford_combine({acc}_mean, {acc}_m2, {acc}_w, 1)")
                for r in reduces:
                    stat = mean if r.op == "welford_mean" else m2
                    self.values[r.name] = _Value(self.assign(f"{stat}[:, None]"), r.dtype, frozenset("x"))
                continue
            self.values[st.name] = _Value(self.assign(code), st.dtype, frozenset("x"))

    def welford_update(self, st: Reduce, accs: dict, inits: list, finals: list) -> None:
        """One step of the lane's Welford accumulator (mean, M2, count) of `st`'s group; the group's first
        Reduce creates it, the others share it. Lanes are combined after the loop by Chan's formula
        (helpers.welford_combine)."""
        key = (st.arg, st.mask)
        if key in accs:
            finals[accs[key]][1][1].append(st)
            return
        _, acc_dtype, x = self.reduced_input(st)
        acc = self.new_name("_acc")
        shape, tl_acc = "[XBLOCK, RBLOCK]", tl_type(acc_dtype)
        inits += [f"{acc}_mean = tl.full({shape}, 0, {tl_acc})", f"{acc}_m2 = tl.full({shape}, 0, {tl_acc})",
                  f"{acc}_w = tl.full({shape}, 0, {tl_acc})"]
        mask = "rmask" if st.mask is None else f"(rmask & {self.values[st.mask].code})"
        weight, delta, mean = self.new_name(), self.new_name(), self.new_name()
        # masked lanes divide by a zero count: the where below drops that value
        self.emit(f"{weight} = {acc}_w + 1")
        self.emit(f"{delta} = {x} - {acc}_mean")
        if st.mask is None:
            # rmask (rindex < rnumel) lets a lane in at every iteration up to its last, so every lane it lets
            # in now has count roffset // RBLOCK + 1: one reciprocal per iteration instead of an IEEE
            # division per element (a ~20-instruction sequence that held channels-last BatchNorm statistics
            # to ~1.9 TB/s on the H200, against ~4 TB/s for the plain sums of its backward)
            inverse = self.new_name()
            self.emit(f"{inverse} = tl.full([1, 1], 1.0, {tl_acc}) / (roffset // RBLOCK + 1)")
            self.emit(f"{mean} = {acc}_mean + {delta} * {inverse}")
        else:
            self.emit(f"{mean} = {acc}_mean + {delta} / {weight}")
        self.emit(f"{acc}_m2 = tl.where({mask}, {acc}_m2 + {delta} * ({x} - {mean}), {acc}_m2)")
        self.emit(f"{acc}_mean = tl.where({mask}, {mean}, {acc}_mean)")
        self.emit(f"{acc}_w = tl.where({mask}, {weight}, {acc}_w)")
        accs[key] = len(finals)
        finals.append((None, (acc, [st])))

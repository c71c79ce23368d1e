"""Split reductions over programs: a GPU rewrite of the `Program`, for codegens that launch a grid.

A column reduction (`TilePlan` "column": BatchNorm statistics over a channels-last tensor, `x.sum(0)`)
gives each program a block of columns and walks every row. With few columns (256 channels) that is a few
programs for the whole GPU, each streaming 262144 rows alone. A reduction along the contiguous dim with
few long rows (a full sum; BatchNorm statistics of an NCHW tensor: 64 channels of 401408 elements) is as
bad: one program per row. The split cuts the reduction space into `S` chunks:

* a *partial* kernel per reduction phase, outer space (S, *outer): chunk ``s`` reduces its part and
  stores one partial per Reduce into a scratch buffer ``[S, outer]``;
* a *final* kernel per reduction phase, reduction space (S,): combines the partials (sum of sums, max of
  maxes, ...). The last one is the original kernel with every reduction phase replaced by its combined
  results, so it writes what the original wrote.

A variance (welford_mean / welford_m2, issue 11) is one phase: each chunk stores its (mean, M2) of the
row-shifted values and the final kernel combines them by Chan's formula (`_welford_combine`), so the
input is read once. A reduction phase that uses earlier Reduce results reads them from the earlier final
kernel's result buffer: the arithmetic is the
original's, in the original order, only the summation is regrouped (partials of contiguous chunks of the
flattened reduction space, as Inductor's split reductions do). 2 kernels per reduction phase instead of 1.
A reduction phase that also stores per-element values (a pointwise producer fused into the reduction: a bias
gradient's sum over the dropout backward it also writes for a matmul) stores them from its partial kernel,
where every element is visited by exactly one chunk. Not split: phases that only store per-element values
(a softmax's last phase: nothing to combine), argmax/argmin.

`choose_column_splits` / `choose_row_splits` are the decision (to move into the FusionChoices hook);
`FUSE_ALL_COLUMN_SPLITS=<n>` forces `n` chunks on every eligible kernel (tests run small shapes through the
split this way).
"""
from __future__ import annotations

import dataclasses
import math
import os

import sympy

from .indexing import recombine
from .normalize import normalize
from .program import (Alloc, Compute, Const, Free, IndexValue, Kernel, KernelCall, Load, Loop, Program, Reduce,
                      Store, TensorSpec)
from .symbolic import FloorDiv, ModularIndexing, rvar, xvar
from .validate import validate_program, validation_requested
from .vocabulary import is_welford
from .welford import welford_groups

# ~4 programs per SM of an H100/H200 (132 SMs): below this many column blocks the rows are split
GPU_TARGET_PROGRAMS = 4 * 132
COLUMN_TILE = 64            # columns one program reads side by side (Triton's column XBLOCK)
# Column partials aim at twice the target: small programs (a 64 x 8 tile per step, as Inductor's outer
# reductions), 1056 on 132 SMs as Inductor's split factor targets. At 4 per SM with chunks of >= 256 rows,
# train_resnet50's BatchNorm statistics (512 channels x 25088 rows: 64 chunks of 392) ran at 2.4 TB/s where
# Inductor's 196 chunks of 128 rows reach 3.1 TB/s (H200, profile_kernels --regions)
COLUMN_TARGET_FACTOR = 2
MIN_ROWS_PER_SPLIT = 128    # a chunk this long keeps the partials' traffic under ~1/128 of the input's
# a program walking fewer elements alone than this finishes in a few microseconds: the extra launches of a
# split (a partial and a final kernel per phase) would cost more than the idle SMs
MIN_SPLIT_WORK = 1 << 16
MIN_ELEMENTS_PER_ROW_SPLIT = 8192   # a chunk of a contiguous row: a few RBLOCK=2048 steps
MAX_SPLITS = 1024           # the final combine stays one persistent [XBLOCK, S] tile (8 x 1024 floats)
# a full sum (one row) split 128 ways left one 256-thread program per SM, ~8 KB of loads in flight each:
# 1.9 TB/s on the H200 where Inductor's 512 chunks reach 4.4 TB/s; few rows take up to this many chunks
MAX_ROW_SPLITS = 1024
# argmax/argmin would need index partials; welford_mean/welford_m2 store (mean, M2) per chunk and the
# final kernel combines them by Chan's formula (`_welford_combine`)
SPLITTABLE_OPS = ("sum", "prod", "max", "min", "any", "all", "welford_mean", "welford_m2")
FORCE_ENV = "FUSE_ALL_COLUMN_SPLITS"


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def choose_column_splits(columns: int, rows: int, target_programs: int = GPU_TARGET_PROGRAMS) -> int:
    """How many row chunks a column reduction of `columns` x `rows` (size hints) gets; 1 = no split.

    Enough chunks that column blocks x chunks reach COLUMN_TARGET_FACTOR x `target_programs`, a power of
    two, at most MAX_SPLITS, with chunks of at least MIN_ROWS_PER_SPLIT rows. BatchNorm over 64x256x64x64
    channels-last: 4 column blocks -> 256 chunks of 1024 rows; train_resnet50's 512 x 25088: 128 chunks of
    196 rows; x.sum(0) of 8192^2: 128 blocks -> 8 chunks."""
    blocks = -(-max(1, columns) // COLUMN_TILE)
    if blocks >= target_programs or rows * min(columns, COLUMN_TILE) < MIN_SPLIT_WORK:
        return 1
    # the power of two at or below: rounding 264 chunks up to 512 cut 256 channels' rows into 196-row chunks,
    # 2048 programs whose fixed cost (the Welford combine, the stores) outweighed their 196 rows (79.5 us
    # against 60.3 as 128 chunks of 784 rows, train_resnet50 on the H200)
    wanted = _pow2_floor(-(-COLUMN_TARGET_FACTOR * target_programs // blocks))
    splits = min(wanted, MAX_SPLITS, _pow2_floor(rows // MIN_ROWS_PER_SPLIT))
    return splits if splits >= 2 else 1


def choose_row_splits(rows: int, length: int, target_programs: int = GPU_TARGET_PROGRAMS) -> int:
    """The same for a reduction along the contiguous dim (a full sum, BatchNorm statistics of an NCHW
    tensor: 64 channels of 401408 elements): a long row is one program, so fewer rows than
    `target_programs` split each into chunks of at least MIN_ELEMENTS_PER_ROW_SPLIT elements."""
    rows = max(1, rows)
    if rows >= target_programs or length < MIN_SPLIT_WORK:
        return 1
    wanted = 1 << (-(-target_programs // rows) - 1).bit_length()
    splits = min(wanted, MAX_ROW_SPLITS, _pow2_floor(length // MIN_ELEMENTS_PER_ROW_SPLIT))
    return splits if splits >= 2 else 1


def _hint(expr, hints: dict) -> int:
    expr = sympy.sympify(expr)
    if expr.is_number:
        return int(expr)
    return int(expr.subs({s: hints.get(s, 1024) for s in expr.free_symbols}))


def _reduction_phases(kernel: Kernel) -> list[int]:
    return [i for i, loop in enumerate(kernel.loops) if loop.over_reduction]


def splittable(kernel: Kernel) -> str | None:
    """None when `kernel` can be split, else why not."""
    if not kernel.reduction:
        return "not a reduction"
    if any(isinstance(s, Store) and s.accumulate for s in kernel.statements()):
        return "it scatter-adds"
    if {s.buffer for s in kernel.statements() if isinstance(s, Load)} & set(kernel.outputs):
        # the partial kernels skip the stores: a load of what the kernel wrote would read old values
        return "reads a buffer it writes"
    for i in _reduction_phases(kernel):
        body = kernel.loops[i].body
        reduced = {s.name for s in body if isinstance(s, Reduce)}
        if not reduced and any(isinstance(s, Store) for s in body):
            # nothing to combine: the phase is a pass over every element (a softmax's last phase)
            return "a reduction phase only stores per-element values"
        for s in body:
            if isinstance(s, Reduce) and s.op not in SPLITTABLE_OPS:
                return f"{s.op} has no partial form here"
            used = set(getattr(s, "args", ())) | {getattr(s, "arg", None), getattr(s, "mask", None)}
            if isinstance(s, Store):   # a stored value is a use too (partial kernels store per chunk)
                used |= {s.value, s.offset}
            if used & reduced:
                return "a Reduce result is used inside its own phase"
    return None


def _neutral(op: str, dtype: str):
    if op == "sum":
        return 0
    if op == "prod":
        return 1
    if op in ("any", "all"):
        return op == "all"
    if dtype.startswith("float") or dtype == "bfloat16":
        return float("-inf") if op == "max" else float("inf")
    import torch   # integer bounds of the dtype
    info = torch.iinfo(getattr(torch, dtype)) if dtype != "bool" else None
    if info is None:
        return op == "min"
    return info.min if op == "max" else info.max


class _Names:
    def __init__(self, kernel: Kernel):
        self.taken = {getattr(s, "name", None) for s in kernel.statements()}
        self.n = 0

    def __call__(self) -> str:
        while f"cs{self.n}" in self.taken:
            self.n += 1
        self.n += 1
        return f"cs{self.n - 1}"


def _flat(sizes, vars_) -> sympy.Expr:
    expr, stride = sympy.Integer(0), sympy.Integer(1)
    for size, var in reversed(list(zip(sizes, vars_))):
        expr += var * stride
        stride *= sympy.sympify(size)
    return expr


def _row_subs(reduction, flat) -> dict:
    """r_i of the original reduction space from its flat position `flat` (row-major)."""
    subs, stride = {}, sympy.Integer(1)
    for i in reversed(range(len(reduction))):
        size = sympy.sympify(reduction[i])
        subs[rvar(i)] = FloorDiv(flat, stride) if i == 0 else ModularIndexing(flat, stride, size)
        stride *= size
    return subs


def _reindex(stmt, subs: dict, recombined: bool = False):
    """`stmt` with its index variables replaced; `recombined`: with (quotient, remainder) pairs merged back
    (a chunk of NHWC rows read as `100352*(r0 // 49) + 2048*(r0 % 49)` is `2048*r0`: no division per
    element)."""
    def moved(expr):
        expr = sympy.sympify(expr).xreplace(subs)
        return recombine(expr) if recombined else expr
    if isinstance(stmt, (Load, Store)):
        return dataclasses.replace(stmt, index=moved(stmt.index))
    if isinstance(stmt, IndexValue):
        return dataclasses.replace(stmt, expr=moved(stmt.expr))
    return stmt


def _io(kernel: Kernel, loops, extra_inputs=()) -> tuple[tuple, tuple]:
    loaded = [s.buffer for loop in loops for s in loop.body if isinstance(s, Load)]
    stored = [s.buffer for loop in loops for s in loop.body if isinstance(s, Store)]
    order = list(kernel.inputs) + list(extra_inputs)
    inputs = tuple(dict.fromkeys(b for b in order + loaded if b in loaded))
    return inputs, tuple(dict.fromkeys(stored))


def split_kernel(kernel: Kernel, splits: int, device: str):
    """(kernels in launch order, scratch buffers {name: TensorSpec}) for `kernel` cut into `splits` chunks."""
    k = normalize(kernel)
    names = _Names(k)
    columns = sympy.Mul(*k.outer)
    rows = sympy.Mul(*k.reduction)
    chunk = FloorDiv(rows + splits - 1, splits)
    exact = rows.is_number and int(rows) % splits == 0
    x_flat = _flat(k.outer, [xvar(i) for i in range(len(k.outer))])
    shift_x = {xvar(i): xvar(i + 1) for i in range(len(k.outer))}
    dtype_of = {s.name: s.dtype for s in k.statements() if hasattr(s, "dtype") and hasattr(s, "name")}
    phases = _reduction_phases(k)
    partials: dict[int, list[tuple[Reduce, str]]] = {}   # phase -> (Reduce, its scratch buffer)
    results: dict[str, str] = {}                           # Reduce name -> its combined-result buffer
    scratch: dict[str, TensorSpec] = {}
    kernels = []

    def spec(dtype, size):
        return TensorSpec(dtype, (size,), (sympy.Integer(1),), device=device)

    def earlier(upto: int, subs: dict, keep_stores: bool) -> list[Loop]:
        """The loops before `upto`: reduction phases become loads of their combined results."""
        loops = []
        for i, loop in enumerate(k.loops[:upto]):
            if loop.over_reduction:
                body = [Load(r.name, results[r.name], x_flat.xreplace(subs), r.dtype) for r, _ in partials[i]]
            else:
                body = [_reindex(s, subs) for s in loop.body if keep_stores or not isinstance(s, Store)]
            if body:
                loops.append(Loop(False, body))
        return loops

    for j, phase in enumerate(phases):
        last = j == len(phases) - 1
        # partial kernel: outer (S, *columns), chunk s of the rows
        flat_row = xvar(0) * chunk + rvar(0)
        subs = {**shift_x, **_row_subs(k.reduction, flat_row)}
        body, valid = [], None
        if not exact:
            valid = names()
            body.append(IndexValue(valid, sympy.StrictLessThan(flat_row, rows), "bool"))
        reduces = []

        def within_rows(mask):
            """`mask` and the chunk's row-validity (the tail chunk's points past the rows do nothing)."""
            if mask is None:
                return valid
            both = names()
            body.append(Compute(both, "logical_and", (mask, valid), "bool"))
            return both

        for s in k.loops[phase].body:
            s = _reindex(s, subs, recombined=True)
            masked = isinstance(s, (Load, Store)) or (isinstance(s, Reduce) and is_welford(s.op))
            if masked and valid is not None:
                s = dataclasses.replace(s, mask=within_rows(s.mask))
            elif isinstance(s, Reduce) and valid is not None:   # not Welford: masked above
                dtype = dtype_of[s.arg]
                neutral, kept = names(), names()
                body += [Const(neutral, _neutral(s.op, dtype), dtype),
                         Compute(kept, "where", (valid, s.arg, neutral), dtype)]
                s = dataclasses.replace(s, arg=kept)
            if isinstance(s, Reduce):
                buffer = f"{kernel.name}_part{j}_{len(reduces)}"
                scratch[buffer] = spec(s.dtype, splits * columns)
                reduces.append((s, buffer))
            body.append(s)
        # the combine needs both statistics of every Welford group: add the one the phase lacks
        for (arg, mask), group in welford_groups(body).items():
            for stat in ("welford_mean", "welford_m2"):
                if stat not in group:
                    r = next(iter(group.values()))
                    extra = Reduce(names(), stat, r.arg, r.dtype, r.mask)
                    body.append(extra)
                    buffer = f"{kernel.name}_part{j}_{len(reduces)}"
                    scratch[buffer] = spec(r.dtype, splits * columns)
                    reduces.append((extra, buffer))
        partials[phase] = reduces
        stores = [Store(buf, xvar(0) * columns + x_flat.xreplace(shift_x), r.name) for r, buf in reduces]
        loops = [*earlier(phase, shift_x, keep_stores=False), Loop(True, body), Loop(False, stores)]
        inputs, outputs = _io(k, loops)
        kernels.append(_finish(dataclasses.replace(
            k, name=f"{kernel.name}_part{j}", outer=(sympy.Integer(splits), *k.outer), reduction=(chunk,),
            loops=loops, inputs=inputs, outputs=outputs, tiling=None)))

        # final kernel: reduction over the S partials of each column
        combine = []
        for r, buf in reduces:
            if is_welford(r.op):
                continue
            loaded = names()
            combine += [Load(loaded, buf, rvar(0) * columns + x_flat, r.dtype),
                        Reduce(r.name, r.op, loaded, r.dtype)]
        chunk_count = sympy.Max(0, sympy.Min(chunk, rows - rvar(0) * chunk)) if not exact else chunk
        combine_loops = _welford_combine(combine, reduces, rvar(0) * columns + x_flat, chunk_count, names)
        if last:
            loops = [*earlier(phase, {}, keep_stores=True), *combine_loops,
                     *[Loop(False, list(loop.body)) for loop in k.loops[phase + 1:]]]
            name = kernel.name
        else:
            stores = []
            for r, _ in reduces:
                results[r.name] = f"{kernel.name}_red{j}_{len(stores)}"
                scratch[results[r.name]] = spec(r.dtype, columns)
                stores.append(Store(results[r.name], x_flat, r.name))
            # the non-reduction loops before this phase may define values the stores do not need; only
            # the combine and the result stores are kept
            loops = [*combine_loops, Loop(False, stores)]
            name = f"{kernel.name}_final{j}"
        inputs, outputs = _io(k, loops)
        kernels.append(_finish(dataclasses.replace(
            k, name=name, reduction=(sympy.Integer(splits),), loops=loops, inputs=inputs, outputs=outputs,
            tiling=None)))
    return kernels, scratch


def _welford_combine(combine: list, reduces: list, index, chunk_count, names) -> list[Loop]:
    """The final kernel's reduction phases: `combine` (the other partials) and, per Welford group, Chan's
    combine of the chunks' (mean_s, M2_s) with n_s = `chunk_count` points each (an index expression of
    the chunk r0: the tail chunk is shorter, chunks past the rows are empty and count nowhere):
    around m0 = sum n_s mean_s / n, with d_s = mean_s - m0 and S = sum n_s d_s,
    mean = m0 + S / n and M2 = sum M2_s + |sum n_s d_s^2 - S^2 / n| (the S terms remove m0's rounding).
    The chunks are few (at most MAX_SPLITS): a second phase over them costs no memory traffic."""
    groups = welford_groups([r for r, _ in reduces])
    if not groups:
        return [Loop(True, combine)]
    buffer_of = {r.name: buf for r, buf in reduces}
    first, means, second, finals = list(combine), [], [], []
    for group in groups.values():
        mean_r, m2_r = group["welford_mean"], group["welford_m2"]
        dtype = mean_r.dtype
        n_int, n_s, zero, has, raw_mean, mean_s = (names() for _ in range(6))
        weighted, n_total, m_total, m0 = names(), names(), names(), names()
        first += [IndexValue(n_int, chunk_count, "int64"), Compute(n_s, "cast", (n_int,), dtype),
                  Const(zero, 0.0, dtype), Compute(has, "gt", (n_s, zero), "bool"),
                  Load(raw_mean, buffer_of[mean_r.name], index, dtype),
                  Compute(mean_s, "where", (has, raw_mean, zero), dtype),   # an empty chunk's mean is NaN
                  Compute(weighted, "mul", (n_s, mean_s), dtype),
                  Reduce(n_total, "sum", n_s, dtype), Reduce(m_total, "sum", weighted, dtype)]
        means.append(Compute(m0, "truediv", (m_total, n_total), dtype))
        n_int2, n_s2, zero2, has2, raw_mean2, raw_m2, m2_s, d_raw, d, nd, ndd = (names() for _ in range(11))
        s_sum, q_sum, m2_sum = names(), names(), names()
        second += [IndexValue(n_int2, chunk_count, "int64"), Compute(n_s2, "cast", (n_int2,), dtype),
                   Const(zero2, 0.0, dtype), Compute(has2, "gt", (n_s2, zero2), "bool"),
                   Load(raw_mean2, buffer_of[mean_r.name], index, dtype),
                   Load(raw_m2, buffer_of[m2_r.name], index, dtype),
                   Compute(m2_s, "where", (has2, raw_m2, zero2), dtype),
                   Compute(d_raw, "sub", (raw_mean2, m0), dtype),
                   Compute(d, "where", (has2, d_raw, zero2), dtype),
                   Compute(nd, "mul", (n_s2, d), dtype), Compute(ndd, "mul", (nd, d), dtype),
                   Reduce(s_sum, "sum", nd, dtype), Reduce(q_sum, "sum", ndd, dtype),
                   Reduce(m2_sum, "sum", m2_s, dtype)]
        shift, product, diff, spread = names(), names(), names(), names()
        finals += [Compute(shift, "truediv", (s_sum, n_total), dtype),
                   Compute(mean_r.name, "add", (m0, shift), dtype),
                   Compute(product, "mul", (s_sum, shift), dtype), Compute(diff, "sub", (q_sum, product), dtype),
                   Compute(spread, "abs", (diff,), dtype), Compute(m2_r.name, "add", (m2_sum, spread), dtype)]
    return [Loop(True, first), Loop(False, means), Loop(True, second), Loop(False, finals)]


def _finish(kernel: Kernel) -> Kernel:
    from .tiling import plan_tiling   # the partial and final kernels are column reductions again
    return plan_tiling(kernel)


def split_reductions(program: Program, target_programs: int = GPU_TARGET_PROGRAMS) -> Program:
    """`program` with its reductions that leave the GPU mostly idle split (see the module docstring):
    column reductions with few column blocks, contiguous ones with few long rows; unchanged when none
    qualifies. For codegens that launch a grid of programs (Triton)."""
    forced = os.environ.get(FORCE_ENV, "").strip()
    plans = {}
    for name, kernel in program.kernels.items():
        if splittable(kernel) is not None:
            continue
        columns = _hint(sympy.Mul(*kernel.outer), program.size_hints)
        rows = _hint(sympy.Mul(*kernel.reduction), program.size_hints)
        if forced:
            # a forced split of a short reduction into chunks of one row would leave a "reduction" of
            # length 1, which codegens render as pointwise (the choices never cut below MIN_ROWS_PER_SPLIT)
            splits = int(forced) if -(-rows // int(forced)) >= 2 else 1
        elif kernel.tiling is not None and kernel.tiling.kind == "column":
            splits = choose_column_splits(columns, rows, target_programs)
        else:
            splits = choose_row_splits(columns, rows, target_programs)
        if splits >= 2:
            plans[name] = splits
    if not plans:
        return program
    kernels, buffers, steps = {}, dict(program.buffers), []
    for name, kernel in program.kernels.items():
        if name not in plans:
            kernels[name] = kernel
            continue
        parts, scratch = split_kernel(kernel, plans[name], program.device)
        taken = set(program.buffers) | {i.name for i in program.inputs} | set(program.constants)
        if taken & set(scratch) or set(program.kernels) & ({p.name for p in parts} - {name}):
            kernels[name] = kernel   # a name clash (not expected: scratch names derive from kernel names)
            del plans[name]
            continue
        kernels.update({p.name: p for p in parts})
        buffers.update(scratch)
        plans[name] = (parts, scratch)
    for step in program.steps:
        if isinstance(step, KernelCall) and step.kernel in plans:
            parts, scratch = plans[step.kernel]
            steps += [Alloc(b) for b in scratch]
            steps += [KernelCall(p.name) for p in parts]
            steps += [Free(b) for b in scratch]
        else:
            steps.append(step)
    report = program.report
    if report is not None and hasattr(report, "groups"):
        def noted(group):
            if group.get("kernel") not in plans:
                return group
            parts, scratch = plans[group["kernel"]]
            chunks = int(parts[0].outer[0])
            return dict(group, why=f"{group['why']}; reduction split over {chunks} chunks into "
                                   f"{', '.join(p.name for p in parts)}")
        report = dataclasses.replace(report, groups=[noted(g) for g in report.groups])
    split = dataclasses.replace(program, kernels=kernels, buffers=buffers, steps=steps, report=report)
    if validation_requested():
        validate_program(split)
    return split

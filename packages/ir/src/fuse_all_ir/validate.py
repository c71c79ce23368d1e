"""Check a `Program` against the contract in `program.py` before a codegen sees it.

`validate_program(program)` raises `InvalidProgram` naming the kernel, statement and rule broken:

* SSA: every value is defined once, before it is used.
* Phase visibility: a value of an ``over_reduction`` phase is used only in that phase, except a `Reduce`
  result, which later phases read; a `Reduce` sits only in a reduction phase.
* Buffers: a kernel loads only its `inputs` (or its own `outputs`) and stores only its `outputs`; every
  buffer a step reads is a graph input, a constant, or written by an earlier step and not yet freed.
* Dtypes (from the tables of `vocabulary.py`): ops are in the vocabulary with their arity and on a dtype
  class the IR emits them on (the classes codegens have rules for); comparisons and logical ops yield
  bool; ops whose result has their arguments' dtype (add, neg, ...) get arguments of that dtype; `where`
  takes a bool condition; masks are bool; argmax/argmin give int64, any/all take and give bool.
* Memory reuse: a donor is live, not a graph input or output, of the same dtype over as many elements,
  and dead afterwards; an in-place reuse also has exactly the layout, a donor no ATen call may alias, and
  a next kernel that reads the donor's values only through its output, at the element it writes and
  before writing it (`in_place.refusal`), as its `Kernel.in_place` says.
* Index expressions: integer-valued, over ``x0..`` of the outer space, ``r0..`` of the reduction space
  (reduction phases only) and the kernel's size symbols.

The backend runs it in debug mode and when ``FUSE_ALL_VALIDATE=1`` (the test suite sets it), through
`fuse_all_ir.lower(..., validate=...)`.
"""
from __future__ import annotations

import os

import sympy

from . import vocabulary
from .program import (
    Alloc, Compute, Const, ExternCall, Free, IndexValue, Kernel, KernelCall, Load, Program, Reduce,
    Store,
)
from . import in_place, memory
from .symbolic import rvar, xvar
from .vocabulary import DTYPES, OP_INFO, REDUCTION_INFO, OpResult, dtype_class, operand_dtype

# ops yielding bool from arguments of one dtype (comparisons, logical ops, predicates)
COMPARISON_OPS = vocabulary.ops_with_result(OpResult.BOOL)
# ops whose result has the dtype of all their arguments (the lowering inserts the casts)
SAME_DTYPE_OPS = vocabulary.ops_with_result(OpResult.SAME)


class InvalidProgram(ValueError):
    """A `Program` breaks the codegen contract of `program.py` (a bug in lowering, fusion or scheduling)."""


def validation_requested() -> bool:
    return os.environ.get("FUSE_ALL_VALIDATE", "").strip().lower() in ("1", "true", "yes", "on")


def validate_program(program: Program) -> None:
    for kernel in program.kernels.values():
        validate_kernel(kernel, program)
    _check_steps(program)


def validate_kernel(kernel: Kernel, program: Program | None = None) -> None:
    def fail(message: str):
        raise InvalidProgram(f"{program.graph_id + ': ' if program else ''}kernel {kernel.name}: {message}")

    outer_vars = {xvar(i) for i in range(len(kernel.outer))}
    reduction_vars = {rvar(i) for i in range(len(kernel.reduction))}
    size_symbols = set(kernel.size_symbols)
    for extent in (*kernel.outer, *kernel.reduction):
        unknown = sympy.sympify(extent).free_symbols - size_symbols
        if unknown:
            fail(f"extent {extent} uses {sorted(map(str, unknown))}, not among its size symbols")
    if kernel.reduction and not any(loop.over_reduction for loop in kernel.loops):
        fail("a reduction space but no over_reduction phase")

    dtype_of: dict[str, str] = {}      # every value defined so far
    visible: set[str] = set()          # the values later phases may read
    buffer_dtype = {}
    if program is not None:
        buffer_dtype = {**{i.name: i.spec.dtype for i in program.inputs if i.spec is not None},
                        **{n: s.dtype for n, s in program.buffers.items()}}

    def check_index(expr, where: str, over_reduction: bool):
        expr = sympy.sympify(expr)
        allowed = outer_vars | size_symbols | (reduction_vars if over_reduction else set())
        unknown = expr.free_symbols - allowed
        if unknown:
            fail(f"{where}: index {expr} uses {sorted(map(str, unknown))}"
                 + ("" if over_reduction else " (outside a reduction phase only x variables and sizes)"))
        if expr.is_integer is not True:   # x0 / 2 is not provably an integer
            fail(f"{where}: index {expr} is not integer-valued")

    for position, loop in enumerate(kernel.loops):
        phase_values: set[str] = set()

        def use(name: str, where: str) -> str:
            if name not in phase_values and name not in visible:
                if name in dtype_of:
                    fail(f"{where} reads {name!r}, defined in an earlier reduction phase (only Reduce results "
                         "are visible after their phase)")
                fail(f"{where} reads {name!r} before it is defined")
            return dtype_of[name]

        for stmt in loop.body:
            where = f"phase {position} {type(stmt).__name__} {getattr(stmt, 'name', '')}".rstrip()
            if isinstance(stmt, Store):
                if stmt.buffer not in kernel.outputs:
                    fail(f"{where} stores to {stmt.buffer!r}, not one of its outputs {kernel.outputs}")
                check_index(stmt.index, where, loop.over_reduction)
                if stmt.offset is not None and use(stmt.offset, where) != "int64":
                    fail(f"{where}: offset {stmt.offset!r} is not int64")
                if stmt.mask is not None and use(stmt.mask, where) != "bool":
                    fail(f"{where}: mask {stmt.mask!r} is not bool")
                if stmt.accumulate and any(isinstance(s, Load) and s.buffer == stmt.buffer for s in kernel.statements()):
                    fail(f"{where}: reads {stmt.buffer!r}, which it scatter-adds into")
                value_dtype = use(stmt.value, where)
                if stmt.buffer in buffer_dtype and value_dtype != buffer_dtype[stmt.buffer]:
                    fail(f"{where} stores a {value_dtype} value into {buffer_dtype[stmt.buffer]} buffer "
                         f"{stmt.buffer!r}")
                continue
            if stmt.name in dtype_of:
                fail(f"{where}: {stmt.name!r} is defined twice (statements are SSA)")
            if stmt.dtype not in DTYPES:
                fail(f"{where}: unknown dtype {stmt.dtype!r}")
            if isinstance(stmt, Load):
                if stmt.buffer not in kernel.inputs and stmt.buffer not in kernel.outputs:
                    fail(f"{where} loads {stmt.buffer!r}, not one of its inputs {kernel.inputs}")
                if stmt.buffer in buffer_dtype and stmt.dtype != buffer_dtype[stmt.buffer]:
                    fail(f"{where} loads {buffer_dtype[stmt.buffer]} buffer {stmt.buffer!r} as {stmt.dtype}")
                check_index(stmt.index, where, loop.over_reduction)
                if stmt.mask is not None and use(stmt.mask, where) != "bool":
                    fail(f"{where}: mask {stmt.mask!r} is not bool")
                if stmt.offset is not None and use(stmt.offset, where) != "int64":
                    fail(f"{where}: offset {stmt.offset!r} is not int64")
            elif isinstance(stmt, IndexValue):
                check_index_value(stmt, where, loop.over_reduction, outer_vars, reduction_vars, size_symbols, fail)
            elif isinstance(stmt, Compute):
                _check_compute(stmt, [use(a, where) for a in stmt.args], where, fail)
            elif isinstance(stmt, Reduce):
                if not loop.over_reduction:
                    fail(f"{where}: a Reduce outside a reduction phase")
                if stmt.op not in REDUCTION_INFO:
                    fail(f"{where}: unknown reduction {stmt.op!r}")
                arg_dtype = use(stmt.arg, where)
                info = REDUCTION_INFO[stmt.op]
                expected = info.result
                if expected and stmt.dtype != expected:
                    fail(f"{where}: {stmt.op} gives {expected}, not {stmt.dtype}")
                if dtype_class(arg_dtype) not in info.takes:
                    fail(f"{where}: {stmt.op} takes {' or '.join(sorted(info.takes))} values, not {arg_dtype}")
                if expected is None and arg_dtype != stmt.dtype:
                    fail(f"{where}: {stmt.op} of a {arg_dtype} value declared {stmt.dtype}")
                if stmt.mask is not None:
                    if not info.welford:
                        fail(f"{where}: only welford reductions take a mask, not {stmt.op}")
                    if use(stmt.mask, where) != "bool":
                        fail(f"{where}: mask {stmt.mask!r} is not bool")
            elif not isinstance(stmt, Const):
                fail(f"{where}: unknown statement {stmt!r}")
            dtype_of[stmt.name] = stmt.dtype
            phase_values.add(stmt.name)
            if isinstance(stmt, Reduce) or not loop.over_reduction:
                visible.add(stmt.name)


def check_index_value(stmt, where, over_reduction, outer_vars, reduction_vars, size_symbols, fail) -> None:
    allowed = outer_vars | size_symbols | (reduction_vars if over_reduction else set())
    unknown = sympy.sympify(stmt.expr).free_symbols - allowed
    if unknown:
        fail(f"{where}: expression {stmt.expr} uses {sorted(map(str, unknown))}")


def _check_compute(stmt: Compute, arg_dtypes: list[str], where: str, fail) -> None:
    if stmt.op not in OP_INFO:
        fail(f"{where}: unknown op {stmt.op!r}")
    info = OP_INFO[stmt.op]
    if len(stmt.args) != info.arity:
        fail(f"{where}: {stmt.op} takes {info.arity} argument(s), got {len(stmt.args)}")
    operand_class = dtype_class(operand_dtype(stmt.op, arg_dtypes))
    if operand_class not in info.operands:
        fail(f"{where}: {stmt.op} on {operand_class} values, which the IR never emits "
             f"({info.not_emitted[operand_class]}): codegens have no rule for it")
    if stmt.op in COMPARISON_OPS and stmt.dtype != "bool":
        fail(f"{where}: {stmt.op} yields bool, not {stmt.dtype}")
    if stmt.op in SAME_DTYPE_OPS and any(d != stmt.dtype for d in arg_dtypes):
        fail(f"{where}: {stmt.op} of {', '.join(arg_dtypes)} declared {stmt.dtype} (the lowering casts first)")
    if info.arity == 2 and info.result is OpResult.BOOL and arg_dtypes[0] != arg_dtypes[1]:
        fail(f"{where}: {stmt.op} compares {arg_dtypes[0]} with {arg_dtypes[1]}")
    if info.result is OpResult.RANDOM and (stmt.dtype != "float32" or arg_dtypes[0] != arg_dtypes[1]):
        fail(f"{where}: {stmt.op} of {', '.join(arg_dtypes)} declared {stmt.dtype} (float32 from one integer dtype)")
    if stmt.op == "where":
        if arg_dtypes[0] != "bool":
            fail(f"{where}: where's condition is {arg_dtypes[0]}, not bool")
        if arg_dtypes[1] != stmt.dtype or arg_dtypes[2] != stmt.dtype:
            fail(f"{where}: where of {arg_dtypes[1]} and {arg_dtypes[2]} declared {stmt.dtype}")


def _check_steps(program: Program) -> None:
    def fail(message: str):
        raise InvalidProgram(f"{program.graph_id}: {message}")

    defined = {i.name for i in program.inputs} | set(program.constants)
    allocated: set[str] = set()
    specs = memory.buffer_specs(program)
    outputs = {ref.name for ref in memory.buffer_refs(program.outputs)}

    def read(name: str, where: str):
        if name not in defined:
            fail(f"{where} reads {name!r}, which no earlier step wrote (or it was freed)")

    unshareable = memory.unshareable(program) if any(getattr(s, "in_place", False) for s in program.steps) else set()
    in_place_from: dict[str, str] = {}     # buffer -> the donor it took in place, until its kernel ran
    for position, step in enumerate(program.steps):
        where = f"step {position} ({type(step).__name__})"
        if isinstance(step, Alloc):
            if step.buffer not in program.buffers:
                fail(f"{where} allocates {step.buffer!r}, which has no layout in Program.buffers")
            if step.reuse is not None:
                _check_reuse(program, step, where, fail, read, specs, outputs)
                if step.in_place:
                    _check_in_place(program, position, where, fail, specs, unshareable)
                    in_place_from[step.buffer] = step.reuse
                defined.discard(step.reuse)
                allocated.discard(step.reuse)
            elif step.in_place:
                fail(f"{where} is in place but names no donor")
            allocated.add(step.buffer)
        elif isinstance(step, KernelCall):
            kernel = program.kernels.get(step.kernel)
            if kernel is None:
                fail(f"{where} calls unknown kernel {step.kernel!r}")
            for output, source in kernel.in_place:
                if in_place_from.pop(output, None) != source:
                    fail(f"{where} {kernel.name} reads {source!r}'s values through {output!r}, which did not "
                         f"take {source!r}'s memory in place just before it")
            for name in kernel.inputs:
                read(name, f"{where} {kernel.name}")
            for name in kernel.outputs:
                if name not in allocated and name not in defined:
                    fail(f"{where} {kernel.name} writes {name!r}, which was never allocated")
            defined.update(kernel.outputs)
        elif isinstance(step, ExternCall):
            for ref in memory.buffer_refs((step.args, step.kwargs)):
                read(ref.name, f"{where} {step.target}")
            defined.update(o for o in step.outputs if o is not None)
        elif isinstance(step, Free):
            read(step.buffer, where)
            defined.discard(step.buffer)
            allocated.discard(step.buffer)
        else:
            fail(f"{where}: unknown step {step!r}")
    for ref in memory.buffer_refs(program.outputs):
        read(ref.name, "the program's outputs")


def _check_reuse(program: Program, step: Alloc, where: str, fail, read, specs, outputs) -> None:
    """A reused buffer is live, not an input or output, and has a known layout of the same dtype over as
    many elements; afterwards it counts as freed, so a later read of it fails as any read of a freed one."""
    donor = step.reuse
    read(donor, f"{where} reusing")
    if donor in outputs or donor in {i.name for i in program.inputs}:
        fail(f"{where} reuses {donor!r}, a graph input or output")
    mine, theirs = program.buffers[step.buffer], specs.get(donor)
    if theirs is None or theirs.dtype != mine.dtype:
        fail(f"{where} reuses {donor!r}, whose layout is unknown or of another dtype")
    if sympy.expand(memory.storage_elements(theirs) - memory.storage_elements(mine)) != 0:
        fail(f"{where}: {step.buffer!r} does not span as many elements as {donor!r}, whose memory it reuses")


def _check_in_place(program: Program, position: int, where: str, fail, specs, unshareable) -> None:
    """An in-place reuse (memory.py, in_place.py): the donor may give its memory away and has exactly the
    receiver's layout; the next kernel writes the receiver, reads the donor's values only through it, at
    the element it writes and before writing it, and nothing reads the donor afterwards (the Alloc ended
    its life, so `read` rejects any later use)."""
    step = program.steps[position]
    donor, buffer = step.reuse, step.buffer
    if donor in unshareable or donor in program.constants:
        fail(f"{where} reuses {donor!r} in place, but an ATen call may alias it (or it is a constant)")
    theirs = specs[donor]
    if theirs.device != program.device or not memory.same_layout(theirs, program.buffers[buffer]):
        fail(f"{where} reuses {donor!r} in place without having exactly its layout and device")
    call = memory.kernel_after_allocs(program.steps, position + 1)
    kernel = program.kernels.get(program.steps[call].kernel) if call is not None else None
    if kernel is None or buffer not in kernel.outputs or (buffer, donor) not in kernel.in_place:
        fail(f"{where} reuses {donor!r} in place, but the next kernel does not read it through {buffer!r}")
    if donor in kernel.inputs or any(isinstance(st, Load) and st.buffer == donor for st in kernel.statements()):
        fail(f"{where}: {kernel.name} still reads {donor!r} directly after {buffer!r} took its memory in place")
    reason = in_place.refusal(kernel, buffer, program.size_hints)
    if reason is not None:
        fail(f"{where}: {kernel.name} cannot write {buffer!r} in place of {donor!r}: {reason}")

"""The scheduled program: the contract between `fuse_all_ir` and the codegens.

A `Program` is what one captured graph becomes after lowering, fusion and scheduling: graph inputs, buffers
with layouts, and an ordered list of steps (allocate, run a fused kernel, call ATen, free). Codegens render
each `Kernel` into their language; the host program (see `host.py`) renders the steps into Python.

Kernel semantics, which every codegen implements exactly:

* A kernel iterates an *outer* space `outer` (index variables ``x0..x{n-1}``, row-major, all points
  independent: parallel) and, for reduction kernels, a *reduction* space `reduction` (``r0..r{m-1}``).
* Its body is a list of `Loop` phases run in order for every outer point. A phase with
  ``over_reduction=True`` runs over the whole reduction space; one with ``over_reduction=False`` runs once
  per outer point and may only use ``x`` variables. Pointwise kernels have ``reduction == ()`` and one
  phase with ``over_reduction=False``.
* Statements are SSA: each value has a unique ``name``. A value defined in a reduction phase is visible
  only inside that phase, except the result of a `Reduce`, which is one scalar per outer point and is
  visible in every later phase. Values of an ``over_reduction=False`` phase are visible in later phases.
* Index expressions are sympy expressions over the ``x``/``r`` variables, the kernel's size symbols, and
  the integer functions `FloorDiv` / `ModularIndexing` from `fuse_all_ir.symbolic`. They are element
  offsets from the tensor's data pointer (`tensor.data_ptr()`, which already includes its storage offset).
  Index variables and size symbols are int64 in every target. A `Load` may add a computed int64 value
  (`offset`) to its index: a gather, whose address no analysis of `index` alone describes.
* Dtypes, ops and reductions are the names of `vocabulary.py` (`DType`, `Op`, `ReductionOp`: str enums, so
  plain strings are accepted too); its tables say which dtype classes each op is emitted on.
* `tiling` (a `fuse_all_ir.tiling.TilePlan`, or None) says how to walk the space, never what is computed:
  a 2-D tile of two outer dims when loads and stores disagree on the contiguous dim, or a column
  reduction. Codegens render it; the semantics above hold whatever the walk.
* Arguments of `Compute` already have the dtype the op needs (the lowering inserts casts); ``cast``
  converts its one argument to the statement's dtype. Comparisons and logical ops yield ``bool``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

import sympy

from . import vocabulary
from .vocabulary import DType, KernelKind, Op, ReductionOp

# The vocabulary (element types, the ops of `Compute`, the reductions) and the one table of their properties
# live in `vocabulary.py`; these tuples are its names, kept for the public API.
# Op semantics follow torch's elementwise ops of the same name; maximum/minimum propagate NaN; truediv is on
# floating values only; floordiv and remainder follow Python (floor) semantics on integers and floats; fmod
# follows C; sign returns -1/0/1 in the argument's dtype.
DTYPES = vocabulary.DTYPES
FLOAT_DTYPES = vocabulary.FLOAT_DTYPES
UNARY_OPS = vocabulary.ops_with_arity(1)
BINARY_OPS = vocabulary.ops_with_arity(2)
TERNARY_OPS = vocabulary.ops_with_arity(3)
OP_ARITY = {o: info.arity for o, info in vocabulary.OP_INFO.items()}

# Reductions. max/min propagate NaN; argmax/argmin give the int64 position in the flattened (row-major)
# reduction space of the first extreme value (NaN counts as the extreme, like torch); any/all take bool.
# welford_mean/welford_m2 are the mean and the sum of squared deviations from it (M2 = n * biased var) of
# their argument (NaN mean over no element); reduces of both on one argument share one accumulator.
REDUCTION_OPS = tuple(vocabulary.ReductionOp)


@dataclass(frozen=True)
class Origin:
    """Where a piece of a kernel came from: the ATen op and the user's source line."""
    aten_op: str
    file: str | None = None
    line: int | None = None
    code: str | None = None  # the user's source line, stripped
    fx_node: str | None = None


# ---- kernel statements -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Load:
    name: str
    buffer: str
    index: sympy.Expr
    dtype: DType
    mask: str | None = None          # a bool value; where False nothing is read and the value is `other`
    other: Union[int, float, bool] = 0
    # an int64 value added to `index` (an indirect read: embedding rows, advanced indexing); where the
    # lowering cannot prove it in bounds it masks the load itself. Targets whose choices keep gathers in
    # ATen (`FusionChoices.gather_in_kernel`) never see one.
    offset: str | None = None


@dataclass(frozen=True)
class Const:
    name: str
    value: Union[int, float, bool]   # may be inf / -inf / nan
    dtype: DType


@dataclass(frozen=True)
class IndexValue:
    """The value of a symbolic expression: index arithmetic (arange, iota, masks of pads) or a symbolic
    scalar (a size, `1 / n`). `dtype` is the expression's own type: int64 for integer expressions, float64
    for float ones (IntTrueDiv, ToFloat, ...: computed in double, as Python does), bool for conditions."""
    name: str
    expr: sympy.Expr
    dtype: DType


@dataclass(frozen=True)
class Compute:
    name: str
    op: Op
    args: tuple[str, ...]
    dtype: DType


@dataclass(frozen=True)
class Reduce:
    name: str
    op: ReductionOp
    arg: str
    dtype: DType
    # welford_mean/welford_m2 only: a bool value; points where it is False are not counted (the tail chunk
    # of a split reduction). Other reductions mask with a `where` to their identity instead.
    mask: str | None = None


@dataclass(frozen=True)
class Store:
    buffer: str
    index: sympy.Expr
    value: str
    # a scatter-add (embedding's gradient): `buffer[index + offset] += value` atomically where `mask` holds;
    # the buffer's Alloc zero-fills it, and no statement of the kernel reads it
    offset: str | None = None
    mask: str | None = None
    accumulate: bool = False


Stmt = Union[Load, Const, IndexValue, Compute, Reduce, Store]


@dataclass
class Loop:
    over_reduction: bool
    body: list[Stmt]


@dataclass
class Kernel:
    name: str
    outer: tuple[sympy.Expr, ...]
    reduction: tuple[sympy.Expr, ...]
    loops: list[Loop]
    inputs: tuple[str, ...]              # buffers read, in argument order
    outputs: tuple[str, ...]             # buffers written, in argument order (after inputs)
    size_symbols: tuple[sympy.Symbol, ...]  # int64 arguments after the buffers, in this order
    origins: tuple[Origin, ...] = ()
    fused_nodes: tuple[str, ...] = ()    # names of the IR nodes fused into it (for the report)
    tiling: Any = None                   # tiling.TilePlan: how codegens walk accesses that disagree on order
    # (output, input) pairs: the output took the input's memory and values (in_place.py); the body reads
    # the input through the output, before overwriting each element, and the input is no argument
    in_place: tuple[tuple[str, str], ...] = ()

    @property
    def kind(self) -> KernelKind:
        return KernelKind.REDUCTION if self.reduction else KernelKind.POINTWISE

    def statements(self):
        for loop in self.loops:
            yield from loop.body

    def buffer_dtypes(self, known: dict | None = None) -> dict[str, DType]:
        """The storage dtype of each buffer argument: `known` (the program's layouts, `Program.buffer_dtypes`)
        where it says, else the dtype its loads read, else that of the values stored into it, else float32
        (an argument the body never touches)."""
        values = {st.name: st.dtype for st in self.statements() if not isinstance(st, Store)}
        inferred: dict[str, DType] = {}
        for st in self.statements():
            if isinstance(st, Load):
                inferred.setdefault(st.buffer, st.dtype)
        for st in self.statements():
            if isinstance(st, Store):
                inferred.setdefault(st.buffer, values.get(st.value, DType.FLOAT32))
        known = known or {}
        return {b: known.get(b) or inferred.get(b, DType.FLOAT32) for b in (*self.inputs, *self.outputs)}


# ---- the program ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TensorSpec:
    dtype: DType   # or the name of a dtype outside the vocabulary, for tensors only ATen touches
    size: tuple[sympy.Expr, ...]
    stride: tuple[sympy.Expr, ...]
    offset: sympy.Expr = sympy.Integer(0)
    device: str = "cpu"


@dataclass(frozen=True)
class GraphInput:
    name: str
    kind: str                            # "tensor" | "symint" | "other"
    spec: TensorSpec | None = None       # for tensors
    symbol: sympy.Expr | None = None     # for symints: the expression the value equals


@dataclass(frozen=True)
class BufferRef:
    """A tensor argument of an extern call, or a graph output: a buffer or input, possibly viewed."""
    name: str
    view: TensorSpec | None = None       # when set, as_strided(name, view.size, view.stride, view.offset)
    # a graph output only: the ATen view ops that make it from input `name`, ((op name, args, kwargs), ...)
    # ("getitem", (i,), {}) for a multi-output view); see lowering_outputs.input_view_replay
    replay: tuple | None = None


@dataclass(frozen=True)
class Alloc:
    """Allocate `buffer` (Program.buffers gives its layout). With `reuse`, take over the memory of that
    buffer instead: it is dead from here on (no Free step follows for it) and spans as many elements of
    the same dtype (see memory.py). With `in_place` too, the next step is the kernel that reads the
    donor's values through `buffer` (`Kernel.in_place`) and overwrites them; the layouts are the same."""
    buffer: str
    reuse: str | None = None
    in_place: bool = False
    zero: bool = False                   # filled with zeros (a scatter-add's destination)


@dataclass(frozen=True)
class Free:
    buffer: str


@dataclass(frozen=True)
class KernelCall:
    kernel: str


@dataclass(frozen=True)
class ExternCall:
    """Call an ATen op. `args`/`kwargs` hold Python values where tensors are `BufferRef`s and sizes sympy
    expressions (lists/tuples nest). `outputs` names the result tensors (None for results nobody uses) in
    the order of the op's flattened result; `out_specs` gives the layout each must have afterwards."""
    target: str                          # e.g. "aten.convolution.default"
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    outputs: tuple[str | None, ...]
    out_specs: tuple[TensorSpec | None, ...]
    origins: tuple[Origin, ...] = ()
    reason: str = ""                     # why this op runs in ATen ("matmul: extern by design", ...)
    single_result: bool = True           # the op returns one tensor (not a tuple/list)


Step = Union[Alloc, Free, KernelCall, ExternCall]


@dataclass
class Program:
    graph_id: str
    device: str                          # "cpu", "cuda:0", ...
    inputs: list[GraphInput]
    buffers: dict[str, TensorSpec]       # every intermediate buffer, allocated by Alloc, written by steps
    kernels: dict[str, Kernel]
    steps: list[Step]
    outputs: list[Any]                   # BufferRef | sympy.Expr (symint output) | None | python constant
    size_symbols: dict[sympy.Symbol, str] = field(default_factory=dict)  # symbol -> host expr computing it
    size_hints: dict[sympy.Symbol, int] = field(default_factory=dict)    # example value of each symbol
    report: Any = None                   # report.FusionReport
    constants: dict = field(default_factory=dict)  # name -> small tensor (read like an input), embedded in code
    # inputs that are parameters of a CPU inference graph: their convolutions' channels-last weight copies
    # are kept across calls while unchanged (weight_layouts.py); set by the backend before rendering
    weight_cache_inputs: frozenset = frozenset()

    def buffer_dtypes(self) -> dict[str, DType]:
        """The dtype of every graph input tensor and intermediate buffer, by name."""
        dtypes = {i.name: i.spec.dtype for i in self.inputs if i.kind == "tensor" and i.spec is not None}
        dtypes.update({name: spec.dtype for name, spec in self.buffers.items()})
        return dtypes

"""The lowered graph, before fusion.

Lowering turns each ATen op into a `Value`: a lazy tensor whose elements are an expression (`E`) of its
logical index. Pointwise ops and views compose expressions, so a chain of them is one expression (this is
where pointwise chains start to fuse). A `Value` becomes a buffer (`Node`) when it must exist in memory: a
reduction, a graph output, an input of an ATen call, or a value read by several consumers. Nodes are what
the fusion pass groups into kernels.
"""
from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Callable, Optional

import sympy

from .program import Origin, TensorSpec
from .vocabulary import DType, ExprKind, NodeKind, Op
from .vocabulary import op as _op_name


# The ATen op (with its user source line) being lowered; values built meanwhile carry it.
CURRENT_ORIGIN: contextvars.ContextVar = contextvars.ContextVar("fuse_all_origin", default=None)


@dataclass(frozen=True, eq=False)
class E:
    """One expression node. kind: load | const | index | op. (A reduction's result is read back as a `load`
    of its node's buffer; kernelgen turns a load of a buffer fused into the same kernel into the value.)"""
    kind: ExprKind
    dtype: DType
    op: Op | str = ""                  # the op for kind == "op"
    # sub-expressions for ops; for loads (mask,) when masked, (mask or None, offset) when the position is
    # `index` plus a computed int64 element offset (a gather: embedding, advanced indexing); see load_parts
    args: tuple = ()
    buffer: str = ""                   # for loads
    index: Optional[sympy.Expr] = None  # for loads and index values
    value: object = None               # constant value; `other` of masked loads
    origin: Optional[Origin] = None
    logical: Optional[tuple] = None    # for loads of a whole buffer: the buffer's logical index

    def with_origin(self, origin) -> "E":
        """This expression stamped with `origin` (`dataclasses.replace`, without its generic field walk:
        lowering stamps every expression it builds)."""
        return E(self.kind, self.dtype, self.op, self.args, self.buffer, self.index, self.value, origin,
                 self.logical)

    def key(self):
        return (self.kind, self.dtype, self.op, tuple(id(a) for a in self.args), self.buffer, self.index,
                repr(self.value))


def const(value, dtype: str, origin=None) -> E:
    return E(ExprKind.CONST, dtype, value=value, origin=origin)


def op(name: str, args, dtype: str, origin=None) -> E:
    return E(ExprKind.OP, dtype, op=_op_name(name), args=tuple(args), origin=origin)


def load(buffer: str, index, dtype: str, mask: E | None = None, other=0, logical=None, offset: E | None = None) -> E:
    """A read of `buffer` at element `index` (+ the int64 value `offset`, when given: an indirect read, whose
    position depends on loaded data; it never records a logical index, so it is never inlined)."""
    if offset is not None:
        args, logical = (mask, offset), None
    else:
        args = (mask,) if mask is not None else ()
    return E(ExprKind.LOAD, dtype, buffer=buffer, index=sympy.sympify(index), args=args,
             value=other, logical=tuple(logical) if logical is not None else None)


def load_parts(e: E) -> tuple[E | None, E | None]:
    """(mask, offset) of a load expression; either may be None."""
    mask = e.args[0] if e.args else None
    offset = e.args[1] if len(e.args) > 1 else None
    return mask, offset


def mask_loads(e: E, mask: E) -> E:
    """`e` with every memory load it makes guarded by `mask` (and by the load's own mask): the value where
    `mask` holds, no memory read where it does not (padding, concatenation, an inlined masked read)."""
    memo: dict = {}

    def walk(x: E) -> E:
        if id(x) in memo:
            return memo[id(x)]
        if x.kind == "load":
            existing, offset = load_parts(x)
            combined = mask if existing is None else op("logical_and", (existing, mask), "bool")
            out = load(x.buffer, x.index, x.dtype, mask=combined, other=x.value, logical=x.logical,
                       offset=walk(offset) if offset is not None else None)
        elif x.kind == "op":
            out = E("op", x.dtype, op=x.op, args=tuple(walk(a) for a in x.args), origin=x.origin)
        else:
            out = x
        memo[id(x)] = out
        return out
    return walk(e)


def index_value(expr, dtype: str | None = None) -> E:
    """The value of a symbolic expression (index arithmetic, a size, a SymInt/SymFloat scalar). Its dtype is
    the expression's own type (int64, float64 or bool: `1 / n` is a float); callers `cast` it."""
    expr = sympy.sympify(expr)
    if dtype is None:
        from .sympy_functions import kind_of
        dtype = {"int": "int64", "float": "float64", "bool": "bool"}[kind_of(expr)]
    return E(ExprKind.INDEX, dtype, index=expr)


Index = list  # a list of sympy expressions, one per dimension


@dataclass
class View:
    """A strided view of a buffer, when a Value is exactly that (lets ATen calls take it without a copy)."""
    buffer: str
    size: tuple
    stride: tuple
    offset: sympy.Expr


@dataclass
class Value:
    size: tuple                        # sympy expressions
    dtype: str
    loader: Callable[[Index], E]
    view: Optional[View] = None        # set when the value is a strided view of a buffer
    origin: Optional[Origin] = None

    @property
    def ndim(self) -> int:
        return len(self.size)


def expr_stats(value: Value) -> tuple[int, set]:
    """(expression nodes, buffers loaded) of a value's expression at a symbolic index: a rough op count that
    keeps inlining from growing without bound, and what recomputing the value would read."""
    try:
        expr = value.loader([sympy.Symbol(f"_i{d}", integer=True, nonnegative=True) for d in range(value.ndim)])
    except Exception:  # noqa: BLE001 - a loader that can't be probed is treated as large
        return 1 << 30, set()
    seen, stack, buffers = set(), [expr], set()
    while stack:
        e = stack.pop()
        if id(e) in seen or not isinstance(e, E):
            continue
        seen.add(id(e))
        if e.kind == "load":
            buffers.add(e.buffer)
        stack.extend(a for a in e.args if a is not None)
    return len(seen), buffers


@dataclass
class Scatter:
    """A node whose values are added into another layout's buffer at computed positions (a scatter-add):
    the node iterates its `spec` (the source's space), and its buffer, zero-filled, has the layout `target`.
    `position(index)` gives (static element index, int64 offset E, bool mask E) for a point of the space."""
    target: TensorSpec
    position: Callable


@dataclass
class Node:
    """A buffer of the lowered graph.

    kind: "input" (graph input), "pointwise", "reduction", "extern" (result of an ATen call).
    Pointwise nodes compute `body(index)` for every index of `spec.size`; reduction nodes reduce
    `body(outer_index, reduction_index)` over `reduction_size` with `reduction_op` for every outer index of
    `spec.size`. `iter_order` lists the dimensions from outermost to innermost loop (storage order).
    """
    name: str
    kind: NodeKind
    spec: TensorSpec
    body: Optional[Callable] = None
    reduction_size: tuple = ()
    reduction_op: str = ""
    iter_order: tuple = ()
    origins: tuple = ()
    extern: Optional[object] = None    # ExternCall for extern nodes (shared by all outputs of one call)
    reads: set = field(default_factory=set)   # names of buffers this node's expression loads
    # nodes whose kernel this one joins when legal although it reads none of them: the statistics of one
    # variance (welford_m2 beside welford_mean of the same values share one accumulator and one read)
    fuse_with: tuple = ()
    scatter: Optional[Scatter] = None   # a scatter-add node (its buffer's layout is scatter.target)

    @property
    def layout(self) -> TensorSpec:
        """The layout of this node's buffer in memory."""
        return self.scatter.target if self.scatter is not None else self.spec

    @property
    def is_compute(self) -> bool:
        return self.kind in ("pointwise", "reduction")

    def expression(self, *indices) -> E:
        """`body(*indices)`, memoised per index: fusion's legality probes build a growing kernel again for
        every candidate, each time asking its members for the same expressions (a body is a pure function
        of the index once lowering is done; `E`s are immutable)."""
        key = tuple(tuple(index) for index in indices)
        memo = self.__dict__.setdefault("_expressions", {})
        found = memo.get(key)
        if found is None:
            found = memo[key] = self.body(*indices)
        return found


@dataclass
class LoweredGraph:
    graph_id: str
    device: str
    inputs: list                       # GraphInput
    nodes: dict                        # name -> Node, in topological order
    externs: list                      # ExternCall in order (each is a scheduling step)
    outputs: list                      # BufferRef | sympy | None | constant
    size_symbols: dict                 # symbol -> host expression
    size_hints: dict
    fallbacks: list = field(default_factory=list)   # (aten op, reason) for ops run in ATen
    inlined: list = field(default_factory=list)     # (aten op, origin) folded into consumers' expressions
    constants: dict = field(default_factory=dict)   # name -> small CPU tensor embedded in the host program

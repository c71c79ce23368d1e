"""Gathers: embedding, advanced indexing (`index.Tensor`) and index_select as loads at computed positions.

Each result element reads one element of the source at a position that depends on loaded data: an
indirect load (`nodes.load(..., offset=...)`, `program.Load.offset`) whose int64 offset is the index
values times the source's strides. So BERT's three embedding lookups fuse with their sum and LayerNorm,
and an attention mask built by indexing fuses with its neighbours, where an ATen call (and its launch)
each stood before. The source must be in memory (an input, or a buffer the lowering realizes); the indices
are any values, fused into the same kernel.

Only where the target's choices say so (`FusionChoices.gather_in_kernel`: Triton). Out-of-range indices:
eager raises (CPU: IndexError; CUDA: a device-side assert that ends the process's CUDA context). The kernel
cannot raise, so a position outside the source reads nothing and gives 0 (the load is masked): never a read
of another tensor's memory. The C++ target keeps these ops in ATen, where eager's IndexError still reaches
the user.
"""
from __future__ import annotations

import sympy
import torch

from .lowering import Unsupported, buffer_value, contiguous_strides, lowers, sym
from .lowerings_pointwise import broadcast_sizes, cast
from .nodes import E, Node, Scatter, Value, View, const, index_value, load, op
from .program import TensorSpec
from .symbolic import linear_index
from .vocabulary import NodeKind

aten = torch.ops.aten

GATHER_OPS = (aten.embedding.default, aten.index.Tensor, aten.index_select.default,
              aten.embedding_dense_backward.default)
_INDEX_DTYPES = ("int64", "int32")


def _require_gathers(g) -> None:
    if not g.gather_in_kernel:
        raise Unsupported("the target keeps gathers in ATen (choices.gather_in_kernel)")


def _in_memory(g, x: Value) -> View:
    """The strided view of memory `x` is, realizing it first when it is an expression."""
    if x.view is None:
        g.realize(x)
    return x.view


def _position(index: E, extent, wrap: bool) -> tuple[E, E]:
    """(position as int64, whether it lies inside [0, extent)) of one index value; `wrap`: negative
    indices count from the end (advanced indexing), else they are out of range (embedding)."""
    pos = cast(index, "int64")
    n = index_value(sympy.sympify(extent))
    if wrap:
        negative = op("lt", (pos, const(0, "int64")), "bool")
        pos = op("where", (negative, op("add", (pos, n), "int64"), pos), "int64")
    inside = op("logical_and", (op("ge", (pos, const(0, "int64")), "bool"), op("lt", (pos, n), "bool")), "bool")
    return pos, inside


def _element_offset(pos: E, stride) -> E:
    """`pos` (int64) times `stride` elements."""
    stride = sympy.sympify(stride)
    return pos if stride == 1 else op("mul", (pos, index_value(stride)), "int64")


def _gather(source: View, dtype: str, static: sympy.Expr, positions: list[tuple[E, E, sympy.Expr]]) -> E:
    """A load of `source` at `static` + the sum of position * stride, masked to positions in range."""
    offset, valid = None, None
    for pos, inside, stride in positions:
        term = _element_offset(pos, stride)
        offset = term if offset is None else op("add", (offset, term), "int64")
        valid = inside if valid is None else op("logical_and", (valid, inside), "bool")
    return load(source.buffer, static, dtype, mask=valid, other=0, offset=offset)


def _index_dtype_ok(t: Value) -> None:
    if t.dtype not in _INDEX_DTYPES:
        raise Unsupported(f"indices of dtype {t.dtype} (a boolean mask has a data-dependent size)")


@lowers(aten.embedding)
def embedding(g, weight: Value, indices: Value, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    _require_gathers(g)
    if not isinstance(weight, Value) or not isinstance(indices, Value) or weight.ndim != 2:
        raise Unsupported("embedding of a 2-D weight by an index tensor only")
    return _advanced_index(g, weight, [indices, None], wrap=False)   # weight[indices], negatives out of range


@lowers(aten.index_select)
def index_select(g, x: Value, dim: int, index: Value):
    _require_gathers(g)
    if not isinstance(index, Value) or index.ndim > 1:
        raise Unsupported("index_select by a 0-d or 1-d index tensor only")
    if x.ndim == 0:
        raise Unsupported("index_select of a 0-d tensor")
    dim = dim % x.ndim
    entries = [None] * x.ndim
    entries[dim] = index if index.ndim == 1 else _as_1d(index)
    return _advanced_index(g, x, entries, wrap=False)


def _as_1d(t: Value) -> Value:
    return Value((sympy.Integer(1),), t.dtype, lambda idx: t.loader([]))


@lowers(aten.index.Tensor)
def index_tensor(g, x: Value, indices):
    _require_gathers(g)
    entries = list(indices) + [None] * (x.ndim - len(indices))
    if len(entries) > x.ndim or not any(isinstance(e, Value) for e in entries):
        raise Unsupported("more indices than dims, or none")
    return _advanced_index(g, x, entries, wrap=True)


def _advanced_index(g, x: Value, entries: list, wrap: bool) -> Value:
    """x[entries] with torch's advanced-indexing rules: the index tensors broadcast together; their result
    dims stand where the indexed dims were when those are adjacent, else first."""
    tensors = [(d, t) for d, t in enumerate(entries) if t is not None]
    for _, t in tensors:
        if not isinstance(t, Value):
            raise Unsupported(f"an index of type {type(t).__name__}")
        _index_dtype_ok(t)
    source = _in_memory(g, x)
    bshape = broadcast_sizes(*[t.size for _, t in tensors])
    dims = [d for d, _ in tensors]
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    rest = [d for d in range(x.ndim) if d not in dims]
    before = [d for d in rest if d < dims[0]] if adjacent else []
    after = [d for d in rest if d not in before]
    size = tuple(x.size[d] for d in before) + bshape + tuple(x.size[d] for d in after)

    def loader(idx):
        idx = list(idx)
        head, bidx, tail = idx[:len(before)], idx[len(before):len(before) + len(bshape)], idx[len(before) + len(bshape):]
        static = linear_index(source.offset, head + tail, [source.stride[d] for d in before + after])
        positions = []
        for d, t in tensors:
            lead = len(bshape) - t.ndim
            t_idx = [sympy.Integer(0) if sympy.sympify(n) == 1 else bidx[lead + j] for j, n in enumerate(t.size)]
            pos, inside = _position(t.loader(t_idx), x.size[d], wrap)
            positions.append((pos, inside, source.stride[d]))
        return _gather(source, x.dtype, static, positions)
    return Value(size, x.dtype, loader)


@lowers(aten.embedding_dense_backward)
def embedding_dense_backward(g, grad: Value, indices: Value, num_weights, padding_idx, scale_grad_by_freq):
    """The weight's gradient as a scatter-add: every token's gradient row is added atomically into the row of
    its index in a zero-filled (num_weights, D) buffer (`nodes.Scatter`), in the kernel that computes the
    gradient (Inductor does the same; ATen sorts the indices first, in several kernels). Float32 only: eager
    accumulates float16/bfloat16 rows in float32, which atomic adds into the narrow buffer would not. The
    sum's order differs from ATen's, so the result is not bitwise reproducible: with deterministic algorithms
    requested the op stays in ATen."""
    _require_gathers(g)
    if scale_grad_by_freq:
        raise Unsupported("scale_grad_by_freq: per-index counts first")
    if torch.are_deterministic_algorithms_enabled():
        raise Unsupported("deterministic algorithms requested: atomic adds sum in any order")
    if grad.dtype != "float32" or grad.ndim < 1:
        raise Unsupported(f"a {grad.dtype} gradient (atomic adds in float32 only)")
    _index_dtype_ok(indices)
    width = grad.size[-1]
    rows = sym(num_weights)
    target = TensorSpec("float32", (rows, width), contiguous_strides((rows, width)), sympy.Integer(0), g.device)
    space = tuple(grad.size)

    def position(idx):
        pos, inside = _position(indices.loader(list(idx[:-1])), rows, wrap=False)
        if padding_idx is not None and padding_idx >= 0:   # the padding row gets no gradient
            inside = op("logical_and", (inside, op("ne", (pos, const(int(padding_idx), "int64")), "bool")), "bool")
        return idx[-1], _element_offset(pos, width), inside

    def body(idx):
        # masked-off points store nothing; the mask in the value also makes the indices a read of this node
        return op("where", (position(idx)[2], grad.loader(list(idx)), const(0.0, "float32")), "float32")
    name = g.new_name()
    spec = TensorSpec("float32", space, contiguous_strides(space), sympy.Integer(0), g.device)
    g.nodes[name] = Node(name, NodeKind.POINTWISE, spec, body=body, iter_order=tuple(range(len(space))),
                         origins=g._origins(), scatter=Scatter(target, position))
    return buffer_value(name, target)

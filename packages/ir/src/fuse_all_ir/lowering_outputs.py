"""Graph outputs that traced as views: of a computed value with a broadcast (stride-0) dim, or of an input
the view lowerings could not express as a view.

`v.expand(...)[:, ::2]`, `v.unsqueeze(1).expand(...).mT.select(2, -1)`: the view lowerings keep a `View` only
over a buffer, so a view chain over a computed value `v` is an expression, and returning it meant writing
every broadcast element out: a copy with other strides than the traced graph's in *every* dim (the stride-0
dim's extent multiplies the outer strides), n times the memory of `v`, and a tensor that in-place writes
accept where eager's raises (fuzz seed 51 index 921 and 3222, seed 45 index 1144, seed 46 index 174).
Here `v` becomes a buffer laid out as traced and the chain is lowered again on it, which gives the view
with the traced strides, as eager returns it.

An output that is a view of an input whose elements overlap in memory (an expanded, stride-0 input) is
returned as the traced view ops applied to the input (`input_view_replay`): AOTAutograd rebuilds an output
that aliases an input by replaying the returned tensor's view, and as_strided's gradient sums what the
overlapping elements receive, where `a0.narrow(3, 1, n)`'s gradient gives each element its own (fuzz
seed 130 index 2547, seed 127 index 337; Inductor returns as_strided too and gets the same wrong gradient).
"""
from __future__ import annotations

import operator

import torch
import torch.fx

from .nodes import Value
from .program import BufferRef, TensorSpec
from .symbolic import size_hint
from .vocabulary import NodeKind


def _is_view_op(target) -> bool:
    return isinstance(target, torch._ops.OpOverload) and bool(getattr(target, "is_view", False))


def returned_and_broadcast(node: torch.fx.Node, hints: dict) -> bool:
    """Whether the graph returns `node` (or a view of it) and a consumer reads it broadcast over more
    elements: then the value is written to memory whatever happens, and recomputing it in that consumer
    repeats its ops per element. BatchNorm's per-channel rsqrt in training is both (the saved `invstd` is a
    squeeze of it): recomputed in the normalisation it put a division and an rsqrt on every pixel
    (train_resnet50's BatchNorm-apply kernels, 45 us against Inductor's 41 on the H200)."""
    if not _returned_through_views(node):
        return False
    own = _hinted_numel(node, hints)
    return any(_hinted_numel(user, hints) > own for user in node.users)


def _returned_through_views(node: torch.fx.Node) -> bool:
    return any(user.op == "output" or (user.op == "call_function" and _is_view_op(user.target)
                                       and _returned_through_views(user)) for user in node.users)


def _hinted_numel(node: torch.fx.Node, hints: dict) -> int:
    """The traced value's element count at the example sizes (0 for a non-tensor): a cost estimate, so no
    guard on a symbolic size."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return 0
    numel = val.numel()
    return size_hint(numel.node.expr, hints, 1024) if isinstance(numel, torch.SymInt) else int(numel)


def _view_chain(node: torch.fx.Node) -> tuple[torch.fx.Node, list[torch.fx.Node]]:
    """(base, the view nodes from the base to `node`): `getitem` of a multi-output view (split, unbind)
    counts as part of the view it takes from."""
    chain = []
    while node.op == "call_function" and node.args and isinstance(node.args[0], torch.fx.Node):
        source = node.args[0]
        if _is_view_op(node.target) or (node.target is operator.getitem and _is_view_op(source.target)):
            chain.append(node)
            node = source
        else:
            break
    return node, chain[::-1]


def input_view_replay(g, node: torch.fx.Node) -> BufferRef | None:
    """The output `node`, a chain of view ops on a graph input whose elements overlap in memory, as that
    chain replayed on the input (None: not such an output, or an argument the host cannot spell)."""
    base, chain = _view_chain(node)
    value = g.env.get(base.name)
    if (not chain or base.op != "placeholder" or not isinstance(value, Value) or value.view is None
            or g.nodes[value.view.buffer].kind != NodeKind.INPUT or not _overlaps(base.meta.get("val"))):
        return None
    steps = []
    try:
        for step in chain:
            if step.target is operator.getitem:
                steps.append(("getitem", (step.args[1],), {}))
                continue
            args = torch.fx.node.map_arg(step.args[1:], _host_value)
            kwargs = torch.fx.node.map_arg(dict(step.kwargs), _host_value)
            steps.append((str(step.target), tuple(args), dict(kwargs)))
    except _NotHostValue:
        return None
    return BufferRef(value.view.buffer, replay=tuple(steps))


class _NotHostValue(Exception):
    pass


def _host_value(node: torch.fx.Node):
    """A view op's non-tensor argument computed in the graph (a SymInt) as a sympy expression."""
    from .lowering import sym   # lowering imports this module
    val = node.meta.get("val")
    if isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
        return sym(val)
    raise _NotHostValue(node.name)


def _overlaps(val) -> bool:
    """Whether a traced tensor has a broadcast dim (stride 0, size other than 1): its elements overlap.
    Read from the sizes' and strides' expressions: `int()` of a SymInt would specialize it (a guard that
    turns the graph's dynamic size into a constant while the graph still uses its symbol, fuzz seed 131
    index 686)."""
    if not isinstance(val, torch.Tensor):
        return False
    from .lowering import sym   # lowering imports this module
    return any(sym(stride) == 0 and sym(size) != 1 for size, stride in zip(val.shape, val.stride()))


def view_of_realized_source(g, node: torch.fx.Node, stride) -> BufferRef | None:
    """The output `node` as a view of a buffer holding its base value, when that gives the traced strides."""
    if stride is None or 0 not in stride:
        return None
    lowered = g.env.get(node.name)
    if isinstance(lowered, Value) and lowered.view is not None and _same_strides(lowered.view, stride):
        return g.as_ref(lowered)   # a view of a buffer already, apart from strides of size-1 dims
    base, chain = _view_chain(node)
    source = g.env.get(base.name)
    if not chain or not isinstance(source, Value) or not (source.view is None or _realized_here(g, source)):
        return None
    from .lowering import LOWERINGS, Unsupported, _meta_stride   # lowering imports this module
    g.realize(source, _meta_stride(base))
    value = source
    try:
        for step in chain:
            if step.target is operator.getitem:
                value = value[step.args[1]]
                continue
            args = torch.fx.node.map_arg(step.args[1:], lambda n: g.env[n.name])
            kwargs = torch.fx.node.map_arg(step.kwargs, lambda n: g.env[n.name])
            # as `step` itself, not as the graph's last op: alias kept a view only when it saw itself (else a
            # copy, seed 108 index 129), a slice took its length from that op's traced shape (out of bounds)
            with g.lowering_node(step):
                value = LOWERINGS[step.target](g, value, *args, **kwargs)
    except (KeyError, Unsupported, NotImplementedError):
        return None
    if not isinstance(value, Value) or value.view is None or not _same_strides(value.view, stride):
        return None
    return g.as_ref(value)


def _realized_here(g, source) -> bool:
    """`source` is a whole buffer this graph computes: realized by an earlier output's view chain
    (`v.squeeze(), v` with `v` a broadcast view: the second output found its base realized by the first's,
    took that for a view of something else and came back a copy, fuzz seed 122 index 664)."""
    whole = g.whole_buffer(source)
    return whole is not None and g.nodes[whole].kind != NodeKind.INPUT


def _same_strides(view, stride) -> bool:
    """Equal strides in the dims of size > 1 (a keepdim reduction's size-1 dim may have another stride
    than the meta function gave it: `amax(1, keepdim=True).unsqueeze(2).expand(...)`, seed 88 index 2153)."""
    return len(view.stride) == len(stride) and all(
        n == 1 or got == want for n, got, want in zip(view.size, view.stride, stride))


def input_view_from_meta(g, node: torch.fx.Node) -> BufferRef | None:
    """An output that traced as a view of a graph input (AOTAutograd regenerates it from the returned
    tensor's size, strides and storage offset on the input's storage, so a copy would be read as a view
    with the copy's strides: silent wrong values, or an as_strided out of the input's bounds). When the
    view lowerings could not express it (a reshape of stride-0 dims under dynamic shapes, also somewhere
    up the chain of views: `a0.view(-1).reshape(2, -1)` of an expanded input, fuzz seed 101 index 630), the
    view is taken from the traced metadata, relative to the nearest source in the chain that is lowered
    as a view of an input."""
    from .lowering import sym   # lowering imports this module
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    base, chain = _view_chain(node)
    source_node = next((n for n in reversed([base] + chain[:-1]) if _is_input_view(g, n)), None)
    if not chain or source_node is None:
        return None
    source, source_val = g.env[source_node.name], source_node.meta.get("val")
    # the traced source must itself be the input's storage: a lowering may give a fresh tensor as a view
    # of an input (a sum over a size-1 dim is its operand), laid out as the input, not as traced
    # (a gradient read a (1, 2, 64) tangent of strides (128, 1, 2) as contiguous: fuzz seed 88 index 1462)
    traced_input = g.traced_inputs.get(source.view.buffer)
    try:
        same_storage = (val.untyped_storage()._cdata == source_val.untyped_storage()._cdata
                        == traced_input.untyped_storage()._cdata)
    except Exception:  # noqa: BLE001 - no storage to compare: not provably a view
        return None
    if not same_storage:
        return None
    offset = source.view.offset + sym(val.storage_offset()) - sym(source_val.storage_offset())
    spec = TensorSpec(source.dtype, tuple(sym(n) for n in val.shape), tuple(sym(n) for n in val.stride()),
                      offset, g.device)
    return BufferRef(source.view.buffer, spec)


def _is_input_view(g, node: torch.fx.Node) -> bool:
    value = g.env.get(node.name)
    return (isinstance(value, Value) and value.view is not None and isinstance(node.meta.get("val"), torch.Tensor)
            and g.nodes[value.view.buffer].kind == "input")

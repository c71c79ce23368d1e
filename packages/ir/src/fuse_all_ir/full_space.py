"""Pointwise work over a reduction's full space walked in another order of dims.

BatchNorm reduces an (N, C, H, W) tensor to C x (N, H, W): its statistics kernel loops over x0 = c and
r = (n, h, w), while the pointwise nodes around it (the normalisation after the statistics, the ReLU
backward's `where` before the backward sums) loop over (N, C, H, W) in storage order. The same points in
another order: such a node joins the reduction's kernel when each of its dims is known to be one loop
variable of the kernel (`Group.full_vars`), read off the accesses that link them:

* a pointwise node reading a value the group computes once per outer point (`mean[c]`, `rstd[c]`): the
  dim indexing it is that outer variable; the node's other dims take the reduction variables in order;
* a reduction reading a pointwise node of the group (`sum(where(...)[n, c, h, w])`): each dim of the read
  is one of the reduction's variables.

Any order so derived runs every point once (a bijection of equal sizes), and the kernel builder still
checks that a reduction result is read at the row being computed, so an order read off wrongly can only
make the fusion illegal, never wrong.
"""
from __future__ import annotations

import sympy

from .kernelgen import Group, _assign, _same, iteration_ranges
from .nodes import E, Node
from .symbolic import rvar, xvar


def permuted_join(group: Group, node: Node) -> Group | None:
    """`group` with `node` in it, over one full space walked in another order, or None."""
    if node.kind == "reduction":
        return _reduction_joins_pointwise(group, node)
    if group.reduction and group.full_vars is None and not any(
            m.kind != "reduction" and group.space_of(m) == "red" for m in group.members):
        return _pointwise_joins_reduction(group, node)
    return None


def _loads(root: E, buffers: set) -> list[E]:
    out, seen, stack = [], set(), [root]
    while stack:
        e = stack.pop()
        if not isinstance(e, E) or id(e) in seen:
            continue
        seen.add(id(e))
        if e.kind == "load" and e.buffer in buffers and e.logical is not None:
            out.append(e)
        stack.extend(a for a in e.args if a is not None)
    return out


def _loop_dims(node: Node) -> list[int]:
    return [d for d in node.iter_order if node.spec.size[d] != 1]


def _is_permutation(sizes: tuple, full: tuple) -> bool:
    return len(sizes) == len(full) and sorted(map(str, sizes)) == sorted(map(str, full))


def _pointwise_joins_reduction(group: Group, node: Node) -> Group | None:
    outer, _ = iteration_ranges(node)
    full = group.outer + group.reduction
    if not _is_permutation(outer, full):
        return None
    probe = [sympy.Symbol(f"_p{i}", integer=True, nonnegative=True) for i in range(len(node.spec.size))]
    # members computed once per outer point: reductions (their dims in order) and pointwise nodes over the
    # outer space (in storage order), as node_index gives them the x variables
    per_row = {m.name: m for m in group.members if m.kind == "reduction" or group.space_of(m) == "scalar"}
    dim_var: dict[int, sympy.Symbol] = {}
    for load in _loads(node.body(probe), set(per_row)):
        member = per_row[load.buffer]
        order = range(len(member.spec.size)) if member.kind == "reduction" else member.iter_order
        looping = [d for d in order if member.spec.size[d] != 1]
        for k, d in enumerate(looping):
            position = probe.index(load.logical[d]) if load.logical[d] in probe else None
            if position is None or dim_var.get(position, xvar(k)) != xvar(k):
                return None
            dim_var[position] = xvar(k)
    if sorted(map(str, dim_var.values())) != sorted(str(xvar(k)) for k in range(len(group.outer))):
        return None
    free = iter(rvar(k) for k in range(len(group.reduction)))
    full_vars = tuple(dim_var[d] if d in dim_var else next(free, None) for d in _loop_dims(node))
    return _checked(group, node, full_vars, outer, group.outer, group.reduction)


def _reduction_joins_pointwise(group: Group, node: Node) -> Group | None:
    if group.reduction or any(m.kind == "reduction" for m in group.members):
        return None
    outer, red = iteration_ranges(node)
    if not _is_permutation(group.outer, outer + red):
        return None
    members = {m.name: m for m in group.members}
    body = node.body(_assign(node.spec.size, (xvar(k) for k in range(len(outer)))),
                     _assign(node.reduction_size, (rvar(k) for k in range(len(red)))))
    full_vars = None
    for load in _loads(body, set(members)):
        member = members[load.buffer]
        these = tuple(load.logical[d] for d in _loop_dims(member))
        if full_vars is not None and these != full_vars:
            return None
        full_vars = these
    if full_vars is None:
        return None
    return _checked(group, node, full_vars, group.outer, outer, red)


def _checked(group, node, full_vars, walked_sizes, outer, red) -> Group | None:
    """The merged group when `full_vars` names every loop variable once with the walked sizes."""
    variables = [xvar(k) for k in range(len(outer))] + [rvar(k) for k in range(len(red))]
    if None in full_vars or len(full_vars) != len(variables) or set(full_vars) != set(variables):
        return None
    ranges = dict(zip(variables, tuple(outer) + tuple(red)))
    if not _same(tuple(ranges[v] for v in full_vars), tuple(walked_sizes)):
        return None
    return Group(tuple(outer), tuple(red), group.members + [node], list(group.sibling_notes), full_vars)

"""Fusion legality, in one place: may `node` join the kernel of `group` without changing what the program
computes? Three checks, in order, each with the reason the fusion report shows when it fails:

1. iteration spaces: the node runs over the group's space (equal, or the group's outer x reduction
   space, or a pointwise group that becomes the outer space of the node's reduction) (`Group.space_of`),
   also when the pointwise side walks that space in another order of dims (`full_space.permuted_join`);
2. no cycle: no dependency of the node outside the group itself depends on the group (else neither
   kernel could run first);
3. the kernel builds: `KernelBuilder` can wire every value (a reduction result read at another row, or a
   strided view of an in-kernel value, raise `IllegalFusion` with the reason).

Sibling (horizontal) fusion merges two kernels that share no data dependence, typically because they read
the same buffers (BatchNorm backward's sum(grad) and sum(grad * (x - mean))): `check_sibling_fusion`,
with the same three checks -- one iteration space (equal pointwise spaces, equal outer and reduction
ranges, or a pointwise kernel over a reduction kernel's full or outer space), no dependence path between
the two kernels through any other kernel or ATen call (`depends_on`: the merged kernel could not run
before or after that other step), and the merged kernel builds.

Whether a legal fusion *pays* is for `choices.FusionChoices` (and a target's subclass) to say.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .full_space import permuted_join
from .kernelgen import Group, IllegalFusion, KernelBuilder, _same, iteration_ranges
from .nodes import Node
from .program import Kernel


@dataclass
class Verdict:
    reason: str | None          # None: legal
    merged: Group | None = None     # the group with the node in it (when legal)
    kernel: Kernel | None = None    # the kernel they make together (when legal)

    @property
    def legal(self) -> bool:
        return self.reason is None


def check_fusion(group: Group, node: Node, nodes: dict, unit_of: Callable[[str], object]) -> Verdict:
    """Whether `node` may join `group`. `nodes`: every node by name; `unit_of(name)`: the `Group` a compute
    node already belongs to, else the name itself (inputs, ATen calls, nodes not placed yet)."""
    space = group.space_of(node)
    if space is None:
        merged = permuted_join(group, node)
        if merged is None:
            outer, red = iteration_ranges(node)
            return Verdict(f"different iteration spaces: {format_space(outer, red)} vs "
                           f"{format_space(group.outer, group.reduction)}")
    elif space == "regroup":
        outer, red = iteration_ranges(node)
        merged = Group(outer, red, group.members + [node], list(group.sibling_notes))
    else:
        merged = Group(group.outer, group.reduction, group.members + [node], list(group.sibling_notes),
                       group.full_vars)
    if creates_cycle(group, node, nodes, unit_of):
        return Verdict("fusing would create a cycle through another kernel or ATen call")
    try:
        kernel = KernelBuilder(merged, nodes, merged.names, "probe").build(tile=False)
    except IllegalFusion as exc:
        return Verdict(str(exc))
    return Verdict(None, merged, kernel)


def _reads_first(members: list) -> list:
    """`members` (in graph position order) reordered so each comes after the members it reads, position
    breaking ties: a node's position need not follow its reads (fuzz seed 99 index 794: buf5 reads buf8),
    and a group from vertical fusion keeps dependency order, which a sort by position alone undid."""
    names = {m.name for m in members}
    ordered, placed, pending = [], set(), list(members)
    while pending:
        ready = next(i for i, m in enumerate(pending) if all(r in placed or r not in names for r in m.reads))
        member = pending.pop(ready)
        ordered.append(member)
        placed.add(member.name)
    return ordered


def merge_siblings(first: Group, second: Group, position: Callable[[str], int]) -> Group | None:
    """The group running both sibling groups' members in one kernel, or None when no one iteration space
    holds them. Members stay in graph (topological) order."""
    base, other = (second, first) if second.reduction and not first.reduction else (first, second)
    if other.reduction:     # both reduce: the same outer points and the same reduction range
        if not (_same(base.outer, other.outer) and _same(base.reduction, other.reduction)):
            return None
    elif not base.reduction:
        if not _same(base.outer, other.outer):
            return None
    elif any(base.space_of(m) not in ("red", "scalar") for m in other.members):
        return None     # a pointwise kernel joins a reduction over its full space or its outer points
    if base.full_vars is not None and other.full_vars is not None and base.full_vars != other.full_vars:
        return None     # both reductions walk their pointwise members in different orders
    members = _reads_first(sorted(base.members + other.members, key=lambda m: position(m.name)))
    merged = Group(base.outer, base.reduction, members, base.sibling_notes + other.sibling_notes,
                   base.full_vars if base.full_vars is not None else other.full_vars)
    if any(m.kind != "reduction" and merged.space_of(m) is None for m in members):
        return None     # pointwise members walking the full space in two orders
    return merged


def check_sibling_fusion(first: Group, second: Group, nodes: dict, stored: set,
                         position: Callable[[str], int], depends_on: Callable[[Group, Group], bool]) -> Verdict:
    """Whether the kernels of `first` and `second` may become one. `stored`: the node names that must reach
    memory (read outside their kernel, or graph outputs); `depends_on(a, b)`: whether `a` reads, through
    any chain of kernels and ATen calls, something `b` computes."""
    merged = merge_siblings(first, second, position)
    if merged is None:
        return Verdict(f"different iteration spaces: {format_space(first.outer, first.reduction)} vs "
                       f"{format_space(second.outer, second.reduction)}")
    if depends_on(first, second) or depends_on(second, first):
        return Verdict("one kernel depends on the other through another kernel or ATen call")
    try:
        kernel = KernelBuilder(merged, nodes, stored & merged.names, "probe").build(tile=False)
    except IllegalFusion as exc:
        return Verdict(str(exc))
    return Verdict(None, merged, kernel)


def creates_cycle(group: Group, node: Node, nodes: dict, unit_of: Callable[[str], object]) -> bool:
    """True when one of `node`'s dependencies outside `group` itself depends on `group`."""
    target = id(group)
    seen = set()
    stack = [unit_of(r) for r in node.reads if r not in group.names]
    while stack:
        unit = stack.pop()
        key = id(unit) if isinstance(unit, Group) else unit
        if key in seen:
            continue
        seen.add(key)
        if key == target:
            return True
        members = unit.members if isinstance(unit, Group) else [nodes[unit]]
        for m in members:
            for r in m.reads:
                dep = unit_of(r)
                if dep is not unit:
                    stack.append(dep)
    return False


def format_space(outer, red) -> str:
    text = "(" + ", ".join(str(s) for s in outer) + ")"
    return text + (" x reduce (" + ", ".join(str(s) for s in red) + ")" if red else "")

"""Fusion legality, in one place: may `node` join the kernel of `group` without changing what the program
computes? Three checks, in order, each with the reason the fusion report shows when it fails:

1. iteration spaces: the node runs over the group's space (equal, or the group's outer x reduction
   space, or a pointwise group that becomes the outer space of the node's reduction) (`Group.space_of`);
2. no cycle: no dependency of the node outside the group itself depends on the group (else neither
   kernel could run first);
3. the kernel builds: `KernelBuilder` can wire every value (a reduction result read at another row, or a
   strided view of an in-kernel value, raise `IllegalFusion` with the reason).

Whether a legal fusion *pays* is for `choices.FusionChoices` (and a target's subclass) to say.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .kernelgen import Group, IllegalFusion, KernelBuilder, iteration_ranges
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
        outer, red = iteration_ranges(node)
        return Verdict(f"different iteration spaces: {format_space(outer, red)} vs "
                       f"{format_space(group.outer, group.reduction)}")
    if space == "regroup":
        outer, red = iteration_ranges(node)
        merged = Group(outer, red, group.members + [node])
    else:
        merged = Group(group.outer, group.reduction, group.members + [node])
    if creates_cycle(group, node, nodes, unit_of):
        return Verdict("fusing would create a cycle through another kernel or ATen call")
    try:
        kernel = KernelBuilder(merged, nodes, merged.names, "probe").build(tile=False)
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

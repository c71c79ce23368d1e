"""Order the kernels and ATen calls, decide which buffers live in memory, and emit the `Program`."""
from __future__ import annotations

import heapq

from .choices import FusionChoices
from .fusion import FusionPass
from .kernelgen import Group, KernelBuilder
from .nodes import LoweredGraph
from .program import Alloc, BufferRef, ExternCall, Free, KernelCall, Program


def schedule(lowered: LoweredGraph, choices: FusionChoices | None = None) -> Program:
    """`choices`: the fusion heuristics (a target's `FusionChoices` subclass; None: the target-neutral ones)."""
    fusion = FusionPass(lowered, choices)
    groups = fusion.run()
    nodes = lowered.nodes
    index_of = {n.name: i for i, n in enumerate(fusion.order)}

    # a unit is a fusion group or one ATen call (several output nodes can share one call)
    units: list = list(groups)
    names_of: list = [[m.name for m in g.members] for g in groups]
    call_unit: dict = {}
    for node in fusion.order:
        if node.kind == "extern":
            if id(node.extern) not in call_unit:
                call_unit[id(node.extern)] = len(units)
                units.append(node.extern)
                names_of.append([])
            names_of[call_unit[id(node.extern)]].append(node.name)

    owner = {name: u for u, names in enumerate(names_of) for name in names}
    reads_of = [set().union(*(nodes[n].reads for n in names)) for names in names_of]
    deps = [{owner[r] for r in reads_of[u] if r in owner and owner[r] != u} for u in range(len(units))]
    _after_readers_of_mutated_inputs(units, reads_of, deps)
    first_index = [min(index_of[n] for n in names) for names in names_of]
    order = _topological(units, deps, first_index.__getitem__)

    outputs = {o.name for o in lowered.outputs if isinstance(o, BufferRef)}
    stored = set(outputs)
    for u in range(len(units)):
        for r in reads_of[u]:
            if owner.get(r, u) != u:
                stored.add(r)

    kernels, steps, buffers = {}, [], {}
    last_use = {}
    for position, u in enumerate(order):
        for r in reads_of[u]:
            last_use[r] = position
    report = fusion.report
    report.inlined = len(lowered.inlined)
    for position, u in enumerate(order):
        unit = units[u]
        if isinstance(unit, Group):
            name = f"kernel_{len(kernels)}"
            kernel = KernelBuilder(unit, nodes, stored, name).build()
            if not kernel.outputs:
                continue
            kernels[name] = kernel
            for b in kernel.outputs:
                buffers[b] = nodes[b].layout
                steps.append(Alloc(b, zero=nodes[b].scatter is not None))
            steps.append(KernelCall(name))
            report.groups.append({"kernel": name, "nodes": list(kernel.fused_nodes), "why": _why(unit),
                                  "aten_ops": list(dict.fromkeys(o.aten_op for o in kernel.origins)),
                                  "origins": list(kernel.origins)})
        else:
            steps.append(unit)
            report.externs.append({"target": unit.target, "reason": unit.reason, "origins": list(unit.origins)})
        for r in sorted(reads_of[u]):
            if last_use.get(r) == position and r not in outputs and nodes[r].kind != "input" and r in stored:
                steps.append(Free(r))

    return Program(graph_id=lowered.graph_id, device=lowered.device, inputs=lowered.inputs, buffers=buffers,
                   kernels=kernels, steps=steps, outputs=lowered.outputs, size_symbols=lowered.size_symbols,
                   size_hints=lowered.size_hints, report=report, constants=lowered.constants)


def _after_readers_of_mutated_inputs(units, reads_of, deps) -> None:
    """An ATen call that writes a graph input (AOTAutograd's `copy_(input, new)` epilogue) runs after every
    step that reads the input's old value: nothing else orders them (a kernel computing `a * 3` before
    `a.add_(b)` ran after the copy and read the new `a`)."""
    for u, unit in enumerate(units):
        written = _written_inputs(unit)
        if written:
            deps[u] |= {v for v in range(len(units)) if v != u and reads_of[v] & written and u not in deps[v]}


def _written_inputs(unit) -> set:
    if isinstance(unit, Group):
        return set()
    if unit.target == "aten.copy_.default":
        destinations = unit.args[:1]
    elif unit.target == "aten._foreach_copy_.default":
        destinations = unit.args[0]
    else:
        return set()
    return {d.name for d in destinations if isinstance(d, BufferRef)}


def _topological(units, deps, priority) -> list:
    users = [[] for _ in units]
    pending = [len(d) for d in deps]
    for u, ds in enumerate(deps):
        for d in ds:
            users[d].append(u)
    ready = [(priority(u), u) for u in range(len(units)) if pending[u] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, u = heapq.heappop(ready)
        order.append(u)
        for v in users[u]:
            pending[v] -= 1
            if pending[v] == 0:
                heapq.heappush(ready, (priority(v), v))
    if len(order) != len(units):
        raise RuntimeError("fusion produced a cyclic schedule")
    return order


def _why(group: Group) -> str:
    return "; ".join([_why_space(group), *group.sibling_notes])


def _why_space(group: Group) -> str:
    kinds = {m.kind for m in group.members}
    space = "(" + ", ".join(str(s) for s in group.outer) + ")"
    if "reduction" in kinds:
        n = sum(1 for m in group.members if m.kind == "reduction")
        return (f"{n} reduction(s) over (" + ", ".join(str(s) for s in group.reduction) + f") per point of {space}"
                + (" with fused pointwise prologue/epilogue" if len(group.members) > n else ""))
    if len(group.members) == 1:
        return f"pointwise over {space}"
    return f"{len(group.members)} pointwise nodes over one iteration space {space}"

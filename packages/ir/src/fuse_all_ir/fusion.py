"""The fusion pass: group the lowered graph's compute nodes into kernels.

Each node, in topological order, tries to join the group of one of its producers. Legality is
`legality.check_fusion` (iteration spaces, cycles, the kernel builds); heuristics are the
`choices.FusionChoices` object the pass is given (which producer group to try first, size limits, the
target's veto). Then kernels with no dependence between them that read the same buffers (or are both
small) over one space merge as siblings (`siblings.py`). Every producer/consumer pair left in different
kernels gets a reason in the report.
"""
from __future__ import annotations

import sympy

from .choices import FusionChoices
from .kernelgen import Group, iteration_ranges
from .legality import check_fusion
from .nodes import E, LoweredGraph, Node
from .program import BufferRef
from .report import FusionReport
from .siblings import SiblingFusion


def expression_reads(node: Node) -> set:
    """Buffers a compute node's expression loads."""
    probe = [sympy.Symbol(f"_p{i}", integer=True, nonnegative=True) for i in range(len(node.spec.size))]
    if node.kind == "reduction":
        red = [sympy.Symbol(f"_q{i}", integer=True, nonnegative=True) for i in range(len(node.reduction_size))]
        root = node.body(probe, red)
    else:
        root = node.body(probe)
    reads, seen, stack = set(), set(), [root]
    while stack:
        e = stack.pop()
        if not isinstance(e, E) or id(e) in seen:
            continue
        seen.add(id(e))
        if e.kind == "load":
            reads.add(e.buffer)
        stack.extend(a for a in e.args if a is not None)
    return reads


def live_nodes(lowered: LoweredGraph) -> list:
    """Nodes reachable from the outputs and ATen calls, in topological order (dead code dropped)."""
    # only buffers: a size (sympy Symbol) returned for the backward also has a `.name`
    roots = [o.name for o in lowered.outputs if isinstance(o, BufferRef)]
    roots += [n.name for n in lowered.nodes.values() if n.kind == "extern"]
    live, stack = set(), list(roots)
    while stack:
        name = stack.pop()
        if name in live:
            continue
        live.add(name)
        stack.extend(lowered.nodes[name].reads)
    return [n for n in lowered.nodes.values() if n.name in live]


class FusionPass:
    def __init__(self, lowered: LoweredGraph, choices: FusionChoices | None = None):
        self.lowered = lowered
        self.choices = choices if choices is not None else FusionChoices()
        self.nodes = lowered.nodes
        for node in self.nodes.values():
            if node.is_compute:
                node.reads = expression_reads(node)
        self.order = live_nodes(lowered)
        self.position = {n.name: i for i, n in enumerate(lowered.nodes.values())}
        self.group_of: dict[str, Group] = {}
        self.report = FusionReport()
        self.rejected_pairs: dict = {}

    def run(self) -> list[Group]:
        groups: list[Group] = []
        for node in self.order:
            if not node.is_compute:
                continue
            group = self._fuse_into_producer(node)
            if group is None:
                outer, red = iteration_ranges(node)
                group = Group(outer, red, [node])
                groups.append(group)
            self.group_of[node.name] = group
        siblings = SiblingFusion(self, groups)
        groups = siblings.run()
        self.report.siblings_kept_apart = siblings.rejected
        self._record_unfused_edges()
        return groups

    def _fuse_into_producer(self, node: Node) -> Group | None:
        candidates = []
        # in graph order: `reads` is a set of names, whose order changes with PYTHONHASHSEED, and ties of
        # the candidate order would then fuse differently in every process
        for r in sorted(node.reads | set(node.fuse_with), key=self.position.__getitem__):
            g = self.group_of.get(r)
            if g is not None and all(g is not c for c in candidates):
                candidates.append(g)
        for group in self.choices.candidate_order(node, candidates, self._shared_reads):
            reason, merged = self._try(group, node)
            if reason is None:
                group.outer, group.reduction, group.members = merged.outer, merged.reduction, merged.members
                group.full_vars = merged.full_vars
                return group
            for producer in group.members:
                if producer.name in node.reads:
                    self.rejected_pairs.setdefault((producer.name, node.name), reason)
        return None

    def _shared_reads(self, group: Group, node: Node) -> int:
        group_reads = set().union(*(m.reads for m in group.members)) | group.names
        return len(group_reads & node.reads)

    def _try(self, group: Group, node: Node):
        verdict = check_fusion(group, node, self.nodes, self._unit)
        if not verdict.legal:
            return verdict.reason, None
        if verdict.merged.full_vars is not None:
            # per-element work over the reduction's space: a target that splits long reductions can still
            # split a phase that stores and reduces, not one that only stores (column_split.splittable)
            lost = self.choices.split_would_be_lost(verdict.kernel, self.lowered.size_hints)
            if lost is not None:
                return lost, None
        return self.choices.should_fuse(group, node, verdict.kernel), verdict.merged

    def _unit(self, name: str):
        return self.group_of.get(name, name)

    def _record_unfused_edges(self):
        for node in self.order:
            for r in sorted(node.reads):
                producer = self.nodes[r]
                if producer.kind == "input":
                    continue
                if node.is_compute and producer.is_compute:
                    if self.group_of[r] is self.group_of[node.name]:
                        continue
                    reason = self.rejected_pairs.get((r, node.name),
                                                     "producer's kernel was closed by an earlier choice")
                elif node.kind == "extern":
                    reason = f"consumer is an ATen call ({node.extern.target}): it reads the buffer from memory"
                else:
                    reason = f"producer is an ATen call ({producer.extern.target}): its result is read from memory"
                self.report.reject(r, node.name, reason, tuple(producer.origins) + tuple(node.origins))


"""Sibling (horizontal) fusion: the second step of the fusion pass.

After producer -> consumer fusion, two kernels with no data dependence between them can still run as one:
kernels reading the same buffers over one iteration space (BatchNorm backward's sum(grad) and
sum(grad * (x - mean)), LayerNorm backward's weight and bias sums, the gradients of a residual's two
branches) then read them once, and either way one launch goes. The same step merges a kernel with one
that reads its buffers directly when producer -> consumer fusion left them apart (the consumer joined
another producer first: BatchNorm backward's sums join the ReLU backward's kernel, and `x - mean`, which
they read too, stays behind): legal when no path leads from one to the other through a third kernel or
ATen call. Candidates are pairs of kernels that read a common buffer or one another's, the pairs with the
most such bytes first, then pairs of small kernels over one space (launch-bound) and pairs of kernels one
kernel or ATen call reads together (their results are needed at the same moment: one launch fewer, no
buffer lives longer). Legality is `legality.check_sibling_fusion`; whether it pays is
`FusionChoices.should_fuse_siblings` (a target's veto included). Every fusion is noted on the merged group
(the report's "why") and every candidate sharing reads that stays apart gets its reason.

Dependence between kernels is kept as bit sets of ancestors per unit (kernel or ATen call), updated on each
merge, so "is there a path between these two" is one AND, not a graph walk per candidate.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import sympy

from .kernelgen import Group
from .legality import check_sibling_fusion
from .symbolic import size_hint
from .tiling import DTYPE_BYTES

MAX_READERS_PAIRED = 8   # a buffer read by many kernels: each is paired with its next few readers only
DEFAULT_SIZE_HINT = 1024


@dataclass
class _Unit:
    group: Group | None         # None: an ATen call
    bit: int                    # bits of the original units merged into this one
    ancestors: int = 0          # bits of every unit this one reads from, transitively


class SiblingFusion:
    def __init__(self, fusion, groups: list[Group]):
        self.fusion, self.choices = fusion, fusion.choices
        self.nodes, self.hints = fusion.nodes, fusion.lowered.size_hints
        self.groups = groups
        self.units: list[_Unit] = []
        self.unit_of: dict[str, int] = {}      # node name -> index into self.units (the current unit via find)
        self.parent: list[int] = []
        self._build_units()
        self.stored = self._stored_names()
        self.rejected: list[dict] = []
        self.feeding_together: dict[tuple, int] = {}   # (a, b) -> a unit that reads both

    # ---- dependence ------------------------------------------------------------------------------------
    def _build_units(self) -> None:
        extern_unit: dict = {}
        for g in self.groups:
            self._add_unit(g, [m.name for m in g.members])
        for node in self.fusion.order:
            if node.kind == "extern":
                key = id(node.extern)
                if key not in extern_unit:
                    extern_unit[key] = self._add_unit(None, [])
                self.unit_of[node.name] = extern_unit[key]
        reads: list[set] = [set() for _ in self.units]
        readers_of: dict[str, set] = {}
        for node in self.fusion.order:
            u = self.unit_of.get(node.name)
            if u is None:
                continue
            reads[u] |= {self.unit_of[r] for r in node.reads if r in self.unit_of and self.unit_of[r] != u}
            for r in node.reads:
                readers_of.setdefault(r, set()).add(u)
        from .schedule import _written_inputs   # the same ordering schedule() adds: see there
        for node in self.fusion.order:
            if node.kind == "extern":
                u = self.unit_of[node.name]
                for written in _written_inputs(node.extern):
                    reads[u] |= readers_of.get(written, set()) - {u}
        done: dict[int, int] = {}

        def ancestors(u: int) -> int:   # iterative DFS: graphs of thousands of kernels
            stack = [u]
            while stack:
                v = stack[-1]
                if v in done:
                    stack.pop()
                    continue
                pending = [d for d in reads[v] if d not in done]
                if pending:
                    stack.extend(pending)
                    continue
                bits = 0
                for d in reads[v]:
                    bits |= self.units[d].bit | done[d]
                done[v] = bits
                stack.pop()
            return done[u]

        for u, unit in enumerate(self.units):
            unit.ancestors = ancestors(u)
        self.deps = reads

    def _add_unit(self, group, names) -> int:
        index = len(self.units)
        self.units.append(_Unit(group, 1 << index))
        self.parent.append(index)
        for name in names:
            self.unit_of[name] = index
        return index

    def find(self, u: int) -> int:
        while self.parent[u] != u:
            self.parent[u] = self.parent[self.parent[u]]
            u = self.parent[u]
        return u

    def _index_of(self, group: Group) -> int:
        return self.find(self.unit_of[group.members[0].name])

    def depends_on(self, a: Group, b: Group) -> bool:
        """`a` reads something `b` computes through another kernel or ATen call (a direct read is no
        obstacle: the merged kernel computes it in place)."""
        ia, ib = self._index_of(a), self._index_of(b)
        bits = self.units[ib].bit
        for d in {self.find(d) for d in self.deps[ia]}:
            if d != ib and d != ia and self.units[d].ancestors & bits:
                return True
        return False

    def reads_directly(self, a: Group, b: Group) -> bool:
        ib = self._index_of(b)
        return any(self.find(d) == ib for d in self.deps[self._index_of(a)])

    def _merge(self, a: int, b: int, merged: Group) -> None:
        ua, ub = self.units[a], self.units[b]
        ua.group, ua.bit = merged, ua.bit | ub.bit
        ua.ancestors = (ua.ancestors | ub.ancestors) & ~ua.bit
        self.deps[a] = {d for d in self.deps[a] | self.deps[b] if self.find(d) not in (a, b)}
        self.parent[b] = a
        for u, unit in enumerate(self.units):   # what depended on either half depends on the whole
            if self.parent[u] == u and u != a and unit.ancestors & ua.bit:
                unit.ancestors |= ua.bit | ua.ancestors

    def _stored_names(self) -> set:
        """Members read outside their own kernel or returned: a sibling merge never changes this set (the
        two kernels read nothing of each other)."""
        from .program import BufferRef
        stored = {o.name for o in self.fusion.lowered.outputs if isinstance(o, BufferRef)}
        for node in self.fusion.order:
            own = self.unit_of.get(node.name)
            stored |= {r for r in node.reads if self.unit_of.get(r, own) != own}
        return stored

    # ---- candidates ------------------------------------------------------------------------------------
    def _memory_reads(self, group: Group) -> set:
        names = group.names
        return {r for m in group.members for r in m.reads if r not in names}

    def _bytes(self, name: str) -> int:
        spec = self.nodes[name].spec
        numel = size_hint(sympy.Mul(*spec.size), self.hints, DEFAULT_SIZE_HINT) if spec.size else 1
        return numel * DTYPE_BYTES.get(str(spec.dtype), 4)

    def _numel(self, group: Group) -> int:
        return size_hint(sympy.Mul(*group.outer, *group.reduction), self.hints, DEFAULT_SIZE_HINT)

    def _candidates(self) -> list[tuple]:
        """(score, first position, a, b) pairs of unit indices: shared readers, then small kernels."""
        readers: dict[str, list[int]] = {}
        for u, unit in enumerate(self.units):
            if unit.group is not None:
                for r in sorted(self._memory_reads(unit.group), key=self.fusion.position.__getitem__):
                    readers.setdefault(r, []).append(u)
        shared: dict[tuple, int] = {}
        for name, us in readers.items():
            for i, a in enumerate(us):
                for b in us[i + 1:i + 1 + MAX_READERS_PAIRED]:
                    shared[(a, b)] = shared.get((a, b), 0) + self._bytes(name)
            producer = self.unit_of.get(name)      # a kernel's buffer read by another kernel directly
            if producer is not None and self.units[producer].group is not None:
                for b in us[:MAX_READERS_PAIRED]:
                    key = (min(producer, b), max(producer, b))
                    shared[key] = shared.get(key, 0) + self._bytes(name)
        pairs = [(score, a, b) for (a, b), score in shared.items()]
        by_space: dict = {}
        for u, unit in enumerate(self.units):
            g = unit.group
            if g is not None and self._numel(g) <= self.choices.small_kernel_numel:
                by_space.setdefault((str(g.outer), str(g.reduction)), []).append(u)
        for us in by_space.values():
            pairs += [(0, a, b) for a, b in itertools.pairwise(us) if (a, b) not in shared]
        # kernels whose buffers one kernel or ATen call reads together: needed at the same moment anyway
        for u in range(len(self.units)):
            producers = sorted(d for d in self.deps[u] if self.units[d].group is not None)
            for a, b in itertools.pairwise(producers):
                if (a, b) not in shared:
                    self.feeding_together.setdefault((a, b), u)
        pairs += [(0, a, b) for (a, b) in self.feeding_together if (0, a, b) not in pairs]
        return sorted(pairs, key=lambda p: (-p[0], p[1], p[2]))

    # ---- the pass --------------------------------------------------------------------------------------
    def run(self) -> list[Group]:
        if not self.choices.sibling_fusion:
            return self.groups
        position = self.fusion.position.__getitem__
        for score, a0, b0 in self._candidates():
            a, b = self.find(a0), self.find(b0)
            if a == b:
                continue
            reader = self.feeding_together.get((a0, b0))
            first, second = sorted((self.units[a].group, self.units[b].group),
                                   key=lambda g: position(g.members[0].name))
            verdict = check_sibling_fusion(first, second, self.nodes, self.stored, position, self.depends_on)
            reason = verdict.reason
            if reason is None:
                numel = max(self._numel(first), self._numel(second))
                reason = self.choices.should_fuse_siblings(first, second, verdict.kernel, score, numel, self.hints,
                                                           feed_one_reader=reader is not None)
            if reason is None:
                reason = self._target_veto(first, second, verdict.kernel)
            if reason is not None:
                if score > 0 and not reason.startswith("different iteration spaces"):
                    self.rejected.append({"first": [m.name for m in first.members],
                                          "second": [m.name for m in second.members], "reason": reason})
                continue
            merged = verdict.merged
            merged.sibling_notes.append(self._note(first, second, score, reader))
            keep, drop = (a, b) if self.units[a].group is first else (b, a)
            self._merge(keep, drop, merged)
            for m in merged.members:
                self.fusion.group_of[m.name] = merged
        return [self.units[u].group for u in range(len(self.units))
                if self.parent[u] == u and self.units[u].group is not None]

    def _target_veto(self, first: Group, second: Group, kernel) -> str | None:
        """A kernel reading the other's buffers directly: each such consumer node is a producer -> consumer
        fusion too, so the target's `veto_fusion` has its say on it."""
        for producer, consumer in ((first, second), (second, first)):
            names = producer.names
            for node in consumer.members:
                if node.reads & names:
                    reason = self.choices.veto_fusion(producer, node, kernel)
                    if reason is not None:
                        return reason
        return None

    def _note(self, first: Group, second: Group, score: int, reader: int | None) -> str:
        def names(g):
            shown = [m.name for m in g.members]
            return ", ".join(shown[:4]) + (f" (+{len(shown) - 4})" if len(shown) > 4 else "")
        def listed(buffers):
            buffers = sorted(buffers, key=self.fusion.position.__getitem__)
            return ", ".join(buffers[:4]) + (f" (+{len(buffers) - 4})" if len(buffers) > 4 else "")
        producer, consumer = (second, first) if self._memory_reads(first) & second.names else (first, second)
        direct = self._memory_reads(consumer) & producer.names
        common = self._memory_reads(first) & self._memory_reads(second)
        if direct:
            relation = f"[{names(consumer)}] reads {listed(direct)} of [{names(producer)}] directly (no path " \
                       "through another kernel or ATen call)"
        else:
            relation = f"siblings [{names(first)}] and [{names(second)}] share no data dependence"
        if common:
            why = f"both read {listed(common)} ({score} bytes read once)"
        elif direct:
            why = f"{score} bytes no longer read back"
        elif reader is not None and max(self._numel(first), self._numel(second)) > self.choices.small_kernel_numel:
            unit = self.units[reader]
            what = f"[{names(unit.group)}]" if unit.group is not None else "one ATen call"
            why = f"both feed {what}: one launch"
        else:
            why = f"both small ({max(self._numel(first), self._numel(second))} points): one launch"
        return f"{relation}, {why}"

"""Turn a fusion group (nodes sharing one iteration space) into a `Kernel` of SSA statements.

Building a kernel is also the final word on legality: a group whose values can't be wired together (a
reduction result read at another row, a strided view of an in-kernel value) raises `IllegalFusion` with the
reason, and the fusion pass keeps the nodes apart.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from .indexing import ranges_id, simplify_index
from .nodes import E, Node, load_parts, mask_loads
from .program import Compute, Const, IndexValue, Kernel, Load, Loop, Reduce, Store
from .rounding import unrounded_for_store
from .symbolic import free_size_symbols, linear_index, rvar, sizes_equal, xvar
from .tiling import plan_tiling


class IllegalFusion(Exception):
    pass


def iteration_ranges(node: Node) -> tuple[tuple, tuple]:
    """(outer, reduction) ranges of a node's own loops, outer in storage (iteration) order. Dimensions of
    size 1 are dropped: they don't loop, and views that add or remove them ((1, 12, 768) vs (12, 768))
    then still land in one kernel."""
    key = (node.kind, node.spec.size, node.iter_order, node.reduction_size)
    memo = node.__dict__.get("_ranges")      # fusion asks for every member of every probe kernel
    if memo is not None and memo[0] == key:
        return memo[1]
    if node.kind == "reduction":
        ranges = _loops(node.spec.size), _loops(node.reduction_size)
    else:
        ranges = _loops(node.spec.size[d] for d in node.iter_order), ()
    node.__dict__["_ranges"] = (key, ranges)
    return ranges


def _loops(sizes) -> tuple:
    return tuple(s for s in sizes if s != 1)


def _assign(sizes, loop_vars) -> list:
    """Index per dimension: the next loop variable for each dimension that loops, 0 for size-1 ones."""
    loop_vars = iter(loop_vars)
    return [sympy.Integer(0) if s == 1 else next(loop_vars) for s in sizes]


@dataclass
class Group:
    outer: tuple
    reduction: tuple = ()
    members: list = field(default_factory=list)   # Nodes in topological order
    # why kernels that share no data dependence were merged into this one (sibling fusion), for the report
    sibling_notes: list = field(default_factory=list)
    # reduction groups: the loop variable of each dim of the full (outer x reduction) space in the order
    # pointwise members over it walk it, when that is not outer + reduction (BatchNorm: pointwise over
    # (N, C, H, W), statistics over C x (N, H, W): (r0, x0, r1, r2)); see full_space.py
    full_vars: tuple | None = None

    @property
    def names(self) -> set:
        return {m.name for m in self.members}

    def full_loop_vars(self) -> tuple:
        if self.full_vars is not None:
            return self.full_vars
        return tuple(xvar(k) for k in range(len(self.outer))) + tuple(rvar(k) for k in range(len(self.reduction)))

    def full_space(self) -> tuple:
        """The sizes of the full space in the order its pointwise members walk it."""
        ranges = {xvar(k): n for k, n in enumerate(self.outer)}
        ranges.update({rvar(k): n for k, n in enumerate(self.reduction)})
        return tuple(ranges[v] for v in self.full_loop_vars())

    def space_of(self, node: Node) -> str | None:
        """'red' (runs over the reduction space), 'scalar' (once per outer point), or None (doesn't fit)."""
        outer, red = iteration_ranges(node)
        if node.kind == "reduction":
            if not self.reduction and _same(outer + red, self.outer) and all(
                    m.kind != "reduction" for m in self.members):
                return "regroup"
            return "red" if _same(outer, self.outer) and _same(red, self.reduction) else None
        if self.reduction and _same(outer, self.full_space()):
            return "red"
        if _same(outer, self.outer):
            return "scalar"
        return None


def _same(a, b) -> bool:
    return len(a) == len(b) and all(x == y or sizes_equal(x, y) for x, y in zip(a, b))


def node_index(group: Group, node: Node, space: str | None = None):
    """The node's logical index (and reduction index) in the group's loop variables (`space`: the node's
    `group.space_of`, when the caller knows it)."""
    index, red, _ = _node_indices(group, node, space)
    return list(index), (list(red) if red is not None else None)


def node_store_index(group: Group, node: Node, space: str | None = None) -> sympy.Expr:
    """Where the node's value at its `node_index` is stored: `store_index(node, node_index(...)[0])`."""
    entry = _node_indices(group, node, space)
    if entry[2] is None:
        entry[2] = store_index(node, entry[0])
    return entry[2]


def _node_indices(group: Group, node: Node, space: str | None) -> list:
    """[index, reduction index, store index or None], memoised per node and what of the group they depend
    on (how many outer and reduction loops, the full space's order): fusion's probes build the same
    members into a growing kernel again and again. The key holds no sympy value (hashing those is a
    Python call per element); the memo is dropped when the node's layout object changes."""
    if node.kind != "reduction" and space is None:
        space = group.space_of(node)
    over_full_space = space == "red" and node.kind != "reduction"
    key = (len(group.outer), len(group.reduction), over_full_space,
           group.full_vars if over_full_space else None)
    memo = node.__dict__.get("_node_indices")
    layout = (node.spec, node.iter_order, node.reduction_size)
    if memo is None or any(a is not b for a, b in zip(memo[0], layout)):
        memo = node.__dict__["_node_indices"] = (layout, {})
    found = memo[1].get(key)
    if found is None:
        index, red = _node_index(group, node, space)
        found = memo[1][key] = [tuple(index), tuple(red) if red is not None else None, None]
    return found


def _node_index(group: Group, node: Node, space: str | None):
    if node.kind == "reduction":
        return (_assign(node.spec.size, (xvar(k) for k in range(len(group.outer)))),
                _assign(node.reduction_size, (rvar(k) for k in range(len(group.reduction)))))
    if space == "red":
        loop_vars = list(group.full_loop_vars())
    else:
        loop_vars = [xvar(k) for k in range(len(group.outer))]
    in_loop_order = _assign([node.spec.size[d] for d in node.iter_order], loop_vars)
    index = [None] * len(node.spec.size)
    for position, dim in enumerate(node.iter_order):
        index[dim] = in_loop_order[position]
    return index, None


def store_index(node: Node, index) -> sympy.Expr:
    return linear_index(node.spec.offset, index, node.spec.stride)


class KernelBuilder:
    def __init__(self, group: Group, nodes: dict, stored: set, name: str):
        self.group, self.nodes, self.stored, self.name = group, nodes, stored, name
        self.members = {m.name: m for m in group.members}
        self.ranges = {xvar(k): n for k, n in enumerate(group.outer)}
        self.ranges.update({rvar(k): n for k, n in enumerate(group.reduction)})
        self.ranges_key = ranges_id(self.ranges)
        self.reduced: dict[str, str] = {}       # reduction member -> SSA name of its result
        self.depth = self._depths()
        self.spaces = {m.name: group.space_of(m) for m in group.members if m.kind != "reduction"}
        self.origins: list = []
        self._counter = 0

    def _depths(self) -> dict:
        depth = {}
        for m in self.group.members:
            d = 0
            for r in m.reads:
                if r in self.members:
                    d = max(d, depth[r] + (1 if self.members[r].kind == "reduction" else 0))
            depth[m.name] = d
        return depth

    def build(self, tile: bool = True) -> Kernel:
        """The kernel; with `tile`, also its `TilePlan` (fusion's legality probes skip that)."""
        phases = self._phases()
        loops = []
        for (over_reduction, depth), members in phases:
            self.phase_depth, self.phase_is_red = depth, over_reduction
            self.body, self.cse, self.emitted = [], {}, {}
            for m in members:
                self._emit_member(m)
            if self.body:
                loops.append(Loop(over_reduction, self.body))
        if not self.group.reduction:
            loops = [Loop(False, [s for loop in loops for s in loop.body])]
        kernel = self._kernel(loops)
        return plan_tiling(kernel) if tile else kernel

    def _phases(self):
        """Members by phase: scalar0, red0, scalar1, red1, ... A reduction's stored result goes into the
        scalar phase after it."""
        slots: dict = {}
        for m in self.group.members:
            d = self.depth[m.name]
            if m.kind == "reduction":
                slots.setdefault((True, d), []).append(("reduce", m))
                if m.name in self.stored:
                    slots.setdefault((False, d + 1), []).append(("store_reduced", m))
            elif self.spaces[m.name] == "red":
                slots.setdefault((True, d), []).append(("pointwise", m))
            else:
                slots.setdefault((False, d), []).append(("pointwise", m))
        return sorted(slots.items(), key=lambda kv: (kv[0][1], kv[0][0]))

    def _emit_member(self, item):
        what, m = item
        self.origins.extend(m.origins)
        if what == "reduce":
            outer_index, red_index = node_index(self.group, m, self.spaces.get(m.name))
            value = self.emit(m.expression(outer_index, red_index))
            dtype = m.spec.dtype
            # one Reduce per (op, value): identical reductions that sibling fusion brought into one kernel
            # (LayerNorm's and GroupNorm's statistics of one row) share it, and codegens that group
            # reductions by their argument (welford.welford_groups) see each group once
            self.reduced[m.name] = self._add(("reduce", m.reduction_op, value, dtype),
                                             lambda n: Reduce(n, m.reduction_op, value, dtype))
        elif what == "store_reduced":
            where = node_store_index(self.group, m, self.spaces.get(m.name))
            self.body.append(Store(m.name, self._simplify(where), self.reduced[m.name]))
        elif m.scatter is not None:
            index, _ = node_index(self.group, m, self.spaces.get(m.name))
            value = self.emit(m.expression(index))
            static, offset, mask = m.scatter.position(index)
            self.body.append(Store(m.name, self._simplify(static), value, offset=self.emit(offset),
                                   mask=self.emit(mask), accumulate=True))
        elif m.name in self.stored:
            index, _ = node_index(self.group, m, self.spaces.get(m.name))
            value = self.emit(unrounded_for_store(m.expression(index), m.spec.dtype))
            where = node_store_index(self.group, m, self.spaces.get(m.name))
            self.body.append(Store(m.name, self._simplify(where), value))

    def _new(self) -> str:
        self._counter += 1
        return f"t{self._counter}"

    def _simplify(self, expr):
        return simplify_index(expr, self.ranges, self.ranges_key)

    def _add(self, key, make):
        if key in self.cse:
            return self.cse[key]
        name = self._new()
        self.body.append(make(name))
        self.cse[key] = name
        return name

    def emit(self, e: E) -> str:
        """The SSA name of `e` in this phase. Expressions are DAGs (a scan such as a pooling window's running
        maximum reads each step twice): each node is emitted once, not once per path to it."""
        seen = self.emitted.get(id(e))
        if seen is not None and seen[0] is e:
            return seen[1]
        name = self._emit(e)
        self.emitted[id(e)] = (e, name)
        return name

    def _emit(self, e: E) -> str:
        if e.origin is not None:
            self.origins.append(e.origin)
        if e.kind == "const":
            return self._add(("const", repr(e.value), e.dtype), lambda n: Const(n, e.value, e.dtype))
        if e.kind == "index":
            expr = self._simplify(e.index)
            return self._add(("index", expr, e.dtype), lambda n: IndexValue(n, expr, e.dtype))
        if e.kind == "op":
            args = tuple(self.emit(a) for a in e.args)
            return self._add(("op", e.op, args, e.dtype), lambda n: Compute(n, e.op, args, e.dtype))
        if e.kind == "load":
            return self._emit_load(e)
        raise IllegalFusion(f"unknown expression kind {e.kind}")

    def _emit_load(self, e: E) -> str:
        member = self.members.get(e.buffer)
        mask_e, offset_e = load_parts(e)
        if member is None:
            mask = self.emit(mask_e) if mask_e is not None else None
            offset = self.emit(offset_e) if offset_e is not None else None
            index = self._simplify(e.index)
            return self._add(("load", e.buffer, index, mask, repr(e.value), offset),
                             lambda n: Load(n, e.buffer, index, e.dtype, mask, e.value, offset))
        if offset_e is not None:
            raise IllegalFusion(f"{e.buffer} is read at computed positions (a gather) inside the kernel")
        if member.scatter is not None:
            raise IllegalFusion(f"{e.buffer} is read in the kernel that scatter-adds into it")
        if member.kind == "reduction":
            return self._reduced_value(member, e)
        if e.logical is None:
            raise IllegalFusion(f"{e.buffer} is read through a strided view inside the kernel")
        inlined = member.expression(list(e.logical))
        if e.args:
            inlined = mask_loads(inlined, e.args[0])
        return self.emit(inlined)

    def _reduced_value(self, member: Node, e: E) -> str:
        if member.name not in self.reduced:
            raise IllegalFusion(f"{member.name} is read before its reduction finished")
        expected = self._simplify(node_store_index(self.group, member, self.spaces.get(member.name)))
        if sympy.expand(self._simplify(e.index) - expected) != 0:
            raise IllegalFusion(f"reads reduction {member.name} of another row ({e.index} vs {expected})")
        if self.phase_is_red is False and any(s.name.startswith("r") for s in e.index.free_symbols):
            raise IllegalFusion(f"reads reduction {member.name} with a reduction index")
        return self.reduced[member.name]

    def _kernel(self, loops) -> Kernel:
        reads, writes, symbols = [], [], set()
        for loop in loops:
            for s in loop.body:
                if isinstance(s, Load) and s.buffer not in reads:
                    reads.append(s.buffer)
                if isinstance(s, Store) and s.buffer not in writes:
                    writes.append(s.buffer)
                for expr in (getattr(s, "index", None), getattr(s, "expr", None)):
                    if expr is not None:
                        symbols |= free_size_symbols(expr)
        for n in self.group.outer + self.group.reduction:
            symbols |= free_size_symbols(n)
        origins = tuple(dict.fromkeys(self.origins))
        return Kernel(self.name, tuple(self.group.outer), tuple(self.group.reduction), loops, tuple(reads),
                      tuple(writes), tuple(sorted(symbols, key=lambda s: s.name)), origins,
                      tuple(m.name for m in self.group.members))

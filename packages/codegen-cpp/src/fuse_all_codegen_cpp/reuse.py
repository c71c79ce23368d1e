"""Reuse costly values across reduction phases instead of recomputing them.

Fused reductions recompute: softmax's last phase evaluates `exp(x - max)` again although the sum phase
just did, over the same reduction loop. When a later phase computes a value with the same expression tree
as an earlier phase (same loads at the same indices, same ops, same cross-phase inputs) and the tree
contains a libm call, the earlier phase writes it to a per-outer-point scratch array and the later phase
reads it back. The array lives on the (per-thread) stack, so only static, cache-sized reductions qualify.
"""
from __future__ import annotations

import sympy

from fuse_all_ir.program import Compute, Const, IndexValue, Kernel, Load, Reduce

from . import rules

COSTLY_OPS = frozenset(rules.UNARY_LIBM + rules.BINARY_LIBM + ("sigmoid", "erfinv", "floordiv", "remainder"))
MAX_SCRATCH_BYTES = 64 * 1024      # all scratch arrays of a kernel together: they should stay in L1/L2


def plan_reuse(kernel: Kernel) -> dict[str, tuple[int, str]]:
    """{later value: (scratch id, earlier value)}; the earlier value is written to scratch `id`."""
    size = sympy.Mul(*[sympy.sympify(n) for n in kernel.reduction]) if kernel.reduction else sympy.Integer(1)
    if not kernel.reduction or not size.is_Integer:
        return {}
    written = set(kernel.outputs)
    keys: dict[str, tuple] = {}            # value -> structural key (None: never reusable)
    costly: dict[str, bool] = {}
    first_seen: dict[tuple, tuple[int, str]] = {}   # key -> (phase, value) where it is first computed
    plan: dict[str, tuple[int, str]] = {}
    sources: dict[str, int] = {}           # earlier value -> scratch id
    budget = MAX_SCRATCH_BYTES
    for phase, loop in enumerate(kernel.loops):
        local = set()
        for stmt in loop.body:
            if not hasattr(stmt, "name") or isinstance(stmt, Reduce):
                continue
            local.add(stmt.name)
            key = _key(stmt, keys, local, written) if loop.over_reduction else None
            keys[stmt.name] = key
            costly[stmt.name] = isinstance(stmt, Compute) and (
                stmt.op in COSTLY_OPS or any(costly.get(a, False) for a in stmt.args))
            if key is None:
                continue
            seen = first_seen.setdefault(key, (phase, stmt.name))
            if seen[0] == phase or not costly[stmt.name]:
                continue
            earlier = seen[1]
            if earlier not in sources:
                nbytes = int(size) * (8 if stmt.dtype in ("float64", "int64") else 4)
                if nbytes > budget:
                    continue
                budget -= nbytes
                sources[earlier] = len(sources)
            plan[stmt.name] = (sources[earlier], earlier)
    # keep only the outermost reuse of a tree (its operands need no scratch of their own), then number the
    # scratch arrays of the reuses that are left
    used_by_reused = {a for name in plan for a in _operands(kernel, name)}
    kept = {name: earlier for name, (_, earlier) in plan.items()
            if name not in used_by_reused or _needed(kernel, name, plan)}
    ids = {earlier: i for i, earlier in enumerate(dict.fromkeys(kept.values()))}
    return {name: (ids[earlier], earlier) for name, earlier in kept.items()}


def _key(stmt, keys, local, written):
    """A structural key for a value of a reduction phase; None where equality can't be trusted."""
    def arg_key(name):
        # a value of this phase by its structure; a value from an earlier phase (a reduction result, a
        # per-row scalar) by name: it is the same variable wherever it is read
        return keys.get(name) if name in local else ("value", name)
    if isinstance(stmt, Load):
        if stmt.buffer in written:
            return None                    # the kernel writes it: a later read may see another value
        mask = arg_key(stmt.mask) if stmt.mask is not None else None
        if stmt.mask is not None and mask is None:
            return None
        return ("load", stmt.buffer, sympy.sympify(stmt.index), stmt.dtype, mask, stmt.other)
    if isinstance(stmt, Const):
        return ("const", repr(stmt.value), stmt.dtype)
    if isinstance(stmt, IndexValue):
        return ("index", sympy.sympify(stmt.expr), stmt.dtype)
    if isinstance(stmt, Compute):
        args = tuple(arg_key(a) for a in stmt.args)
        return None if any(a is None for a in args) else ("op", stmt.op, stmt.dtype, args)
    return None


def _operands(kernel: Kernel, name: str) -> set[str]:
    """Every value the definition of `name` depends on inside its phase (transitively)."""
    defs = {s.name: s for s in kernel.statements() if hasattr(s, "name")}
    out, todo = set(), [name]
    while todo:
        stmt = defs.get(todo.pop())
        for arg in getattr(stmt, "args", ()):
            if arg not in out:
                out.add(arg)
                todo.append(arg)
    return out


def _needed(kernel: Kernel, name: str, plan) -> bool:
    """An inner reused value still matters when something other than a reused tree reads it."""
    for stmt in kernel.statements():
        reads = set(getattr(stmt, "args", ())) | {getattr(stmt, "value", None), getattr(stmt, "arg", None)}
        if name in reads and getattr(stmt, "name", None) not in plan:
            return True
    return False

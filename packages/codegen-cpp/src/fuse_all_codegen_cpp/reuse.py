"""Reuse costly values across reduction phases instead of recomputing them.

Fused reductions recompute: softmax's last phase evaluates `exp(x - max)` again although the sum phase
just did, over the same reduction loop. When a later phase computes a value with the same expression tree
as an earlier phase (same loads at the same indices, same ops, same cross-phase inputs) and the tree
contains a libm call, the earlier phase writes it to a per-outer-point scratch array and the later phase
reads it back. The array lives on the (per-thread) stack, so only static, cache-sized reductions qualify.

float16/bfloat16 trees qualify too when their conversions and roundings cost more than a scratch read:
a float16 load is ~11 vector ops, each rounding of a float16 (bfloat16) ATen result ~8 (~6), while a
reduction's phases each recompute their shared prefix (softmax(x * 0.5 + 1) in float16: a load and two
roundings in the max and the sum phase; add + layer norm: two loads and a rounding in each of three). The
budget goes to libm trees first.
"""
from __future__ import annotations

import sympy

from fuse_all_ir.program import Compute, Const, IndexValue, Kernel, Load, Reduce

from fuse_all_ir.symbolic import rvar

from . import rules
from .hoist import loop_invariants

COSTLY_OPS = frozenset(rules.UNARY_LIBM + rules.BINARY_LIBM + ("sigmoid", "erfinv", "floordiv", "remainder"))
MAX_SCRATCH_BYTES = 64 * 1024      # all scratch arrays of a kernel together: they should stay in L1/L2
# vector ops per lane group of a float16/bfloat16 load (prelude.h: fa_h2f, fa_b2f) and of a rounding of a
# float value to them (fa_round_h, fa_round_b); a tree of at least REUSE_MIN_CONVERSION_OPS is reused. 8:
# bfloat16 add + LayerNorm's `x + y` (two loads, one rounding) read back was ~1.2x faster than recomputed
# in its two later phases (bench/cpu_time_rounds.py, 2026-12-02); one load and one rounding (7) is not.
LOAD_OPS = {"float16": 11, "bfloat16": 1}
ROUND_OPS = {"float16": 8, "bfloat16": 6}
REUSE_MIN_CONVERSION_OPS = 8


def plan_reuse(kernel: Kernel) -> dict[str, tuple[int, str]]:
    """{later value: (scratch id, earlier value)}; the earlier value is written to scratch `id`."""
    size = sympy.Mul(*[sympy.sympify(n) for n in kernel.reduction]) if kernel.reduction else sympy.Integer(1)
    if not kernel.reduction or not size.is_Integer:
        return {}
    written = set(kernel.outputs)
    dtypes = {st.name: st.dtype for st in kernel.statements() if hasattr(st, "name")}
    keys: dict[str, tuple] = {}            # value -> structural key (None: never reusable)
    costly: dict[str, bool] = {}           # a libm call in the value's tree
    conversion_ops: dict[str, int] = {}    # float16/bfloat16 conversions and roundings in the value's tree
    first_seen: dict[tuple, tuple[int, str]] = {}   # key -> (phase, value) where it is first computed
    candidates: dict[str, str] = {}        # later value -> the earlier value it equals
    counters = {rvar(i) for i in range(len(kernel.reduction))}
    for phase, loop in enumerate(kernel.loops):
        local = set()
        # the same for every reduction index: computed once before the loop (hoist.py), nothing to save
        invariant = {st.name for st in loop_invariants(loop.body, counters)} if loop.over_reduction else set()
        for stmt in loop.body:
            if not hasattr(stmt, "name") or isinstance(stmt, Reduce):
                continue
            local.add(stmt.name)
            key = _key(stmt, keys, local, written) if loop.over_reduction else None
            keys[stmt.name] = key
            args = getattr(stmt, "args", ()) if isinstance(stmt, Compute) else ()
            costly[stmt.name] = isinstance(stmt, Compute) and (
                stmt.op in COSTLY_OPS or any(costly.get(a, False) for a in args))
            conversion_ops[stmt.name] = _own_conversion_ops(stmt, dtypes) + sum(
                conversion_ops.get(a, 0) for a in args if a in local)
            if key is None:
                continue
            seen = first_seen.setdefault(key, (phase, stmt.name))
            if seen[0] != phase and stmt.name not in invariant and (
                    costly[stmt.name] or conversion_ops[stmt.name] >= REUSE_MIN_CONVERSION_OPS):
                candidates[stmt.name] = seen[1]
    # scratch space: trees with a libm call first, then by their conversion cost
    sources: dict[str, int] = {}           # earlier value -> scratch id
    budget = MAX_SCRATCH_BYTES
    plan: dict[str, tuple[int, str]] = {}
    for name in sorted(candidates, key=lambda v: (not costly[v], -conversion_ops[v])):
        earlier = candidates[name]
        if earlier not in sources:
            nbytes = int(size) * (8 if dtypes[name] in ("float64", "int64") else 4)
            if nbytes > budget:
                continue
            budget -= nbytes
            sources[earlier] = len(sources)
        plan[name] = (sources[earlier], earlier)
    # keep only the outermost reuse of a tree (its operands need no scratch of their own), then number the
    # scratch arrays of the reuses that are left
    used_by_reused = {a for name in plan for a in _operands(kernel, name)}
    kept = {name: earlier for name, (_, earlier) in plan.items()
            if name not in used_by_reused or _needed(kernel, name, plan)}
    ids = {earlier: i for i, earlier in enumerate(dict.fromkeys(kept.values()))}
    return {name: (ids[earlier], earlier) for name, earlier in kept.items()}


def _own_conversion_ops(stmt, dtypes) -> int:
    if isinstance(stmt, Load):
        return LOAD_OPS.get(stmt.dtype, 0)
    if isinstance(stmt, Compute) and stmt.op == "cast" and stmt.dtype in ROUND_OPS:
        return ROUND_OPS[stmt.dtype] if rules.compute_type(dtypes[stmt.args[0]]) == "float" else 0
    return 0


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

"""Statements of an inner loop that do not depend on its counters, to run once before it.

GCC 12 leaves an `omp simd` loop scalar ("latch block not empty") when it holds loads that do not move
with the loop and that it hoists itself into the loop's latch: the last phase of add + LayerNorm + GELU
read the row's first element of `x + y` (the shift of the two-pass variance) inside the loop and ran
scalar, calling libm's `erff` per element (28 ms CPU per call against Inductor's 3.7). Written before the
loop they are plain scalars and the loop vectorises (`_ZGVeN16v_erff`).

A hoisted load runs even when the loop would run zero times: `guard` (a C++ condition, the loop's trip
count being positive) keeps it from reading past an empty buffer when that count is not known here.

One level up: float16 loads of a row reduction that read the same elements in every row (LayerNorm's
weight and bias) are converted once before the rows (`row_invariant_half_loads`).
"""
from __future__ import annotations

import sympy

from fuse_all_ir.program import Compute, Const, IndexValue, Kernel, Load, Reduce, Store
from fuse_all_ir.symbolic import rvar

# a row-invariant float16 vector converted once per kernel: at most this many elements (64 KB of floats on the
# calling thread's stack)
ROW_CONVERT_MAX = 16384


def loop_invariants(body, counters: set[sympy.Symbol], keep: set[str] = frozenset()) -> list:
    """The statements of `body`, in order, that depend on none of `counters` (directly, or through a
    value computed in `body` that does); `keep` names values that must stay in the loop (a phase's
    values another phase reads back from scratch)."""
    defined = {s.name for s in body if hasattr(s, "name") and not isinstance(s, Store)}
    hoisted: list = []
    names: set[str] = set()

    def fixed(name) -> bool:        # defined before the loop, or itself hoisted
        return name is None or name not in defined or name in names

    for stmt in body:
        if isinstance(stmt, (Reduce, Store)) or getattr(stmt, "name", None) in keep:
            continue
        if isinstance(stmt, Const):
            ok = True
        elif isinstance(stmt, Load):
            ok = not (sympy.sympify(stmt.index).free_symbols & counters) and fixed(stmt.mask)
        elif isinstance(stmt, IndexValue):
            ok = not (sympy.sympify(stmt.expr).free_symbols & counters)
        else:
            ok = isinstance(stmt, Compute) and all(fixed(a) for a in stmt.args)
        if ok:
            hoisted.append(stmt)
            names.add(stmt.name)
    return hoisted


def positive_guard(trip_count) -> str | None:
    """None when `trip_count` (a sympy expression) is a positive number, else the C++ test of it. Size
    symbols are declared positive, but an unbacked size may still be 0 at run time: only numbers count."""
    from .index_printer import cpp_index
    count = sympy.sympify(trip_count)
    if count.is_Integer and int(count) > 0:
        return None
    return f"({cpp_index(count)}) > 0"


def row_invariant_half_loads(kernel: Kernel, buffers: dict[str, str]) -> dict[tuple, list[Load]]:
    """The float16 loads of a row reduction (one reduction dim, rows in `outer`) whose index depends on the
    reduction counter alone, grouped by (buffer, index): the same elements for every row, such as a float16
    LayerNorm's weight and bias, which the phase would otherwise convert again in every row (~11 vector ops
    per 16 elements on the portable path; render.py converts them once before the rows). Not for buffers
    the kernel writes, nor rows of a size unknown here or beyond ROW_CONVERT_MAX."""
    size = sympy.sympify(kernel.reduction[0]) if len(kernel.reduction) == 1 else None
    if size is None or not kernel.outer or not size.is_Integer or not 0 < int(size) <= ROW_CONVERT_MAX:
        return {}
    found: dict[tuple, list[Load]] = {}
    for loop in kernel.loops:
        for st in loop.body if loop.over_reduction else ():
            if (isinstance(st, Load) and buffers[st.buffer] == "float16" and st.mask is None
                    and st.buffer not in kernel.outputs
                    and sympy.sympify(st.index).free_symbols == {rvar(0)}):
                found.setdefault((st.buffer, sympy.sympify(st.index)), []).append(st)
    return found

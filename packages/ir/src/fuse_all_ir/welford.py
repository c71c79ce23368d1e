"""The one-pass variance reductions (`welford_mean`, `welford_m2`) and their two-pass form.

The lowering writes a variance as ``welford_mean(x)`` and ``welford_m2(x)`` in ONE reduction phase, so a
codegen that streams the row (a looped Triton reduction, a split column reduction) reads the input once:
per lane a Welford accumulator (mean, M2, count), lanes and chunks combined by Chan's formula.

Where the row is held anyway (a persistent Triton reduction keeps it in registers; the C++ loops, which
re-walk a row that is mostly in cache) the corrected two-pass algorithm is as cheap and a little more
accurate: `two_pass_form` rewrites each Welford group of a kernel into it (Chan, Golub, LeVeque):
m = sum(x) / n, then in a second phase S = sum(x - m), Q = sum((x - m)^2); mean = m + S / n,
M2 = |Q - S^2 / n|. The rewrite only adds phases and statements; the rest of the kernel is unchanged.

`welford_groups` says which Reduces share an accumulator: the welford reduces of one phase with the same
argument and mask.
"""
from __future__ import annotations

import dataclasses

import sympy

from .program import Compute, Const, IndexValue, Kernel, Load, Loop, Reduce, Store
from .vocabulary import ReductionOp, is_welford


def welford_groups(body) -> dict[tuple, dict[str, Reduce]]:
    """{(arg, mask): {"welford_mean"/"welford_m2": its Reduce}} for the welford Reduces of a phase body,
    in the order their first Reduce appears."""
    groups: dict[tuple, dict[str, Reduce]] = {}
    for s in body:
        if isinstance(s, Reduce) and is_welford(s.op):
            groups.setdefault((s.arg, s.mask), {})[str(s.op)] = s
    return groups


def has_welford(kernel: Kernel) -> bool:
    return any(isinstance(s, Reduce) and is_welford(s.op) for s in kernel.statements())


class _Names:
    def __init__(self, kernel: Kernel):
        self.taken = {getattr(s, "name", None) for s in kernel.statements()}
        self.n = 0

    def __call__(self, hint: str = "wf") -> str:
        while True:
            name = f"{hint}{self.n}"
            self.n += 1
            if name not in self.taken:
                self.taken.add(name)
                return name


def value_slice(body, wanted: set) -> list:
    """The statements of `body` that the values `wanted` depend on (no Reduce, no Store), in order."""
    by_name = {s.name: s for s in body if not isinstance(s, (Store, Reduce))}
    need, stack = set(), [w for w in wanted if w in by_name]
    while stack:
        name = stack.pop()
        if name in need:
            continue
        need.add(name)
        s = by_name[name]
        deps = list(getattr(s, "args", ())) + [getattr(s, "mask", None)]
        stack.extend(d for d in deps if d in by_name and d not in need)
    return [s for s in body if getattr(s, "name", None) in need and not isinstance(s, (Store, Reduce))]


def _renamed(stmts: list, rename: dict) -> list:
    out = []
    for s in stmts:
        s = dataclasses.replace(s, name=rename[s.name])
        if isinstance(s, Compute):
            s = dataclasses.replace(s, args=tuple(rename.get(a, a) for a in s.args))
        elif isinstance(s, Load) and s.mask is not None:
            s = dataclasses.replace(s, mask=rename.get(s.mask, s.mask))
        out.append(s)
    return out


def two_pass_form(kernel: Kernel) -> Kernel:
    """`kernel` with every Welford group computed by the corrected two-pass algorithm (module docstring):
    its phase keeps the other statements and gains the sums of x (and of the mask), a new reduction phase
    re-derives x and sums the centered values and their squares, and a per-point phase defines the
    original Reduce names. Unchanged when the kernel has no welford reduce."""
    if not has_welford(kernel):
        return kernel
    names = _Names(kernel)
    count_all = sympy.Mul(*[sympy.sympify(n) for n in kernel.reduction])
    loops = []
    for loop in kernel.loops:
        groups = welford_groups(loop.body) if loop.over_reduction else {}
        if not groups:
            loops.append(loop)
            continue
        first = [s for s in loop.body if not (isinstance(s, Reduce) and is_welford(s.op))]
        means, second, finals = [], [], []
        slice_ = value_slice(loop.body, {v for key in groups for v in key if v is not None})
        rename = {s.name: names("wr") for s in slice_}
        second += _renamed(slice_, rename)
        for (arg, mask), reduces in groups.items():
            dtype = next(iter(reduces.values())).dtype
            total, count, mean0 = names("wsum"), names("wn"), names("wm")
            if mask is None:
                first.append(Reduce(total, ReductionOp.SUM, arg, dtype))
                n_int = names("wni")
                means += [IndexValue(n_int, count_all, "int64"), Compute(count, "cast", (n_int,), dtype)]
            else:   # the count is the number of points the mask keeps
                ones, kept, zero = names("wone"), names("wx"), names("wz")
                first += [Compute(ones, "cast", (mask,), dtype), Reduce(count, ReductionOp.SUM, ones, dtype),
                          Const(zero, 0.0, dtype), Compute(kept, "where", (mask, arg, zero), dtype),
                          Reduce(total, ReductionOp.SUM, kept, dtype)]
            means.append(Compute(mean0, "truediv", (total, count), dtype))
            x = rename.get(arg, arg)
            centered, square, s_sum, q_sum = names("wc"), names("wq"), names("ws"), names("wqs")
            second.append(Compute(centered, "sub", (x, mean0), dtype))
            if mask is not None:
                zero2, kept_c = names("wz"), names("wc")
                second += [Const(zero2, 0.0, dtype),
                           Compute(kept_c, "where", (rename.get(mask, mask), centered, zero2), dtype)]
                centered = kept_c
            second += [Compute(square, "mul", (centered, centered), dtype),
                       Reduce(s_sum, ReductionOp.SUM, centered, dtype), Reduce(q_sum, ReductionOp.SUM, square, dtype)]
            shift = names("wsh")
            finals.append(Compute(shift, "truediv", (s_sum, count), dtype))
            if ReductionOp.WELFORD_MEAN in reduces:
                finals.append(Compute(reduces[ReductionOp.WELFORD_MEAN].name, "add", (mean0, shift), dtype))
            if ReductionOp.WELFORD_M2 in reduces:
                # Q >= S^2 / n in exact arithmetic; rounding can leave -tiny (a constant row): |.| is as close
                # and, unlike a NaN-propagating max, keeps NaN
                product, diff = names("wsp"), names("wd")
                finals += [Compute(product, "mul", (s_sum, shift), dtype),
                           Compute(diff, "sub", (q_sum, product), dtype),
                           Compute(reduces[ReductionOp.WELFORD_M2].name, "abs", (diff,), dtype)]
        loops += [Loop(True, first), Loop(False, means), Loop(True, second), Loop(False, finals)]
    return dataclasses.replace(kernel, loops=loops)


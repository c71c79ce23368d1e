"""When a kernel may write an output into the memory of an input that dies at that kernel (in-place reuse,
Inductor's `can_inplace`), and the kernel rewrite that does it. Used by the memory plan (`memory.py`),
which decides, and by the validator (`validate.py`), which checks every decision again.

The rewrite: the kernel reads the input's values through the output (its loads of the input become loads
of the output, and the input leaves `Kernel.inputs`; `Kernel.in_place` records the pair), and the host
program hands the input's tensor to the output (`buf5 = buf3; del buf3  # reuses buf3 in place`). So no
kernel ever receives two pointers to the same memory: codegens keep `__restrict__` (C++) and need no
aliasing rule; they only see a kernel that loads its own output before storing it.

That is correct when every element is read before it is overwritten and by the same kernel point that
overwrites it. Checked on the rewritten kernel, for the output `o`:

* `o` is stored by exactly one `Store`, at index E, in phase S;
* every load of `o` reads index E (the same expression: a pointwise read, not a transposed, broadcast,
  shifted or reduced one) and comes before that store: in an earlier phase, or earlier in phase S;
* E is injective over the variables of phase S (the outer ones, and the reduction ones when S is a
  reduction phase): an affine expression whose coefficients provably keep the variables apart, so no two
  points of the kernel (which codegens run in parallel, in any order) touch the same element. With E the
  store index, an earlier phase of the same outer point is the only other place that element is read.
"""
from __future__ import annotations

import dataclasses
import functools

import sympy

from .program import Kernel, Load, Store
from .symbolic import rvar, xvar


def refusal(kernel: Kernel, output: str, hints: dict | None = None) -> str | None:
    """Why `kernel` (already rewritten: it reads its in-place input through `output`) cannot compute
    `output` in place; None when it can (see the module docstring)."""
    stores = [(p, i, st) for p, loop in enumerate(kernel.loops) for i, st in enumerate(loop.body)
              if isinstance(st, Store) and st.buffer == output]
    if len(stores) != 1:
        return f"{len(stores)} stores to {output}, not one"
    phase, position, store = stores[0]
    if store.accumulate or store.offset is not None:
        return f"scatter-adds into {output}: its elements are not each written once"
    index = sympy.sympify(store.index)
    for p, loop in enumerate(kernel.loops):
        for i, st in enumerate(loop.body):
            if not (isinstance(st, Load) and st.buffer == output):
                continue
            if st.offset is not None:
                return f"reads {output} at computed positions (a gather): not provably the element it writes"
            if sympy.expand(sympy.sympify(st.index) - index) != 0:
                return f"reads {output}[{st.index}] but writes {output}[{index}]: not the element it writes"
            if (p, i) > (phase, position):
                return f"reads {output} after writing it (phase {p})"
    over = [xvar(i) for i in range(len(kernel.outer))]
    extents = list(kernel.outer)
    if kernel.loops[phase].over_reduction:
        over += [rvar(i) for i in range(len(kernel.reduction))]
        extents += list(kernel.reduction)
    hints = hints or {}
    try:
        return _not_injective_memo(index, tuple(over), tuple(extents), tuple(hints.items()))
    except TypeError:    # something unhashable: prove it unmemoised
        return _not_injective(index, over, extents, hints)


@functools.lru_cache(maxsize=1 << 12)
def _not_injective_memo(index, variables: tuple, extents: tuple, hints: tuple) -> str | None:
    # the memory plan asks once per donor candidate and the validator again, and a graph's kernels repeat
    # (ResNet's blocks): the same store index over the same space, each proof a few sympy expansions
    return _not_injective(index, variables, extents, dict(hints))


def _not_injective(index: sympy.Expr, variables, extents, hints: dict) -> str | None:
    """None when `index` maps the points of the space (`variables` with `extents`) to distinct elements,
    proven for every value of the size symbols; else why not (or why it could not be proven)."""
    index = sympy.expand(index)
    terms = []
    rest = index
    for var, extent in zip(variables, extents):
        extent = sympy.sympify(extent)
        coefficient = sympy.expand(sympy.diff(index, var))
        if coefficient.free_symbols & set(variables) or coefficient.has(sympy.Derivative):
            return f"index {index} is not affine in {var}"
        rest = sympy.expand(rest - coefficient * var)
        if extent == 1:
            continue
        if coefficient.is_positive is not True:
            return f"index {index} does not provably grow with {var}"
        terms.append((coefficient, extent))
    if rest.free_symbols & set(variables):
        return f"index {index} is not affine in the kernel's variables"

    def hint(expr):
        return float(expr.subs({s: hints.get(s, hints.get(str(s), 8)) for s in expr.free_symbols}))
    terms.sort(key=lambda t: hint(t[0]))
    span = sympy.Integer(0)          # the largest offset the variables with smaller coefficients reach
    for coefficient, extent in terms:
        gap = sympy.factor(sympy.expand(coefficient - span - 1))
        if gap.is_nonnegative is not True:
            return f"index {index}: stride {coefficient} may not clear the {span} below it (overlapping points)"
        span = sympy.expand(span + coefficient * (extent - 1))
    return None


def rewrite(kernel: Kernel, output: str, source: str) -> Kernel:
    """`kernel` reading `source`'s values through `output` (see the module docstring)."""
    loops = [dataclasses.replace(loop, body=[dataclasses.replace(st, buffer=output)
                                             if isinstance(st, Load) and st.buffer == source else st
                                             for st in loop.body])
             for loop in kernel.loops]
    return dataclasses.replace(kernel, loops=loops, inputs=tuple(b for b in kernel.inputs if b != source),
                               in_place=(*kernel.in_place, (output, source)))

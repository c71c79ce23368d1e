"""Reshape a kernel's iteration space before rendering, without changing what it computes.

* Size-1 dims are dropped (batch-1 shapes like (1, 768) would otherwise put OpenMP on a 1-trip loop).
* Adjacent dims that every access walks as one (stride of the outer == stride of the inner × its size)
  merge into one, so a contiguous (N, 3) kernel is one long loop rather than N loops of 3.

Only affine index expressions are merged; anything else (FloorDiv, ModularIndexing, products of index
variables) keeps its dims. Flattened reduction positions (argmax) are unchanged by both rewrites.
"""
from __future__ import annotations

import dataclasses
import functools

import sympy

from .program import IndexValue, Kernel, Load, Loop, Store
from .symbolic import rvar, sizes_equal, xvar


def _index_of(stmt):
    if isinstance(stmt, (Load, Store)):
        return stmt.index
    if isinstance(stmt, IndexValue):
        return stmt.expr
    return None


def _rewrite(kernel: Kernel, outer, reduction, subs: dict, expand: bool = False) -> Kernel:
    def new(expr):
        expr = sympy.sympify(expr).xreplace(subs)
        return sympy.expand(expr) if expand and _has_division(expr) else expr

    def fix(stmt):
        if isinstance(stmt, (Load, Store)):
            return dataclasses.replace(stmt, index=new(stmt.index))
        if isinstance(stmt, IndexValue):
            return dataclasses.replace(stmt, expr=new(stmt.expr))
        return stmt
    loops = [Loop(loop.over_reduction, [fix(s) for s in loop.body]) for loop in kernel.loops]
    return dataclasses.replace(kernel, outer=tuple(outer), reduction=tuple(reduction), loops=loops)




def squeeze(kernel: Kernel) -> Kernel:
    subs = {}
    dims = {}
    for name, sizes, var in (("outer", kernel.outer, xvar), ("reduction", kernel.reduction, rvar)):
        keep = [i for i, n in enumerate(sizes) if sympy.sympify(n) != 1]
        subs.update({var(i): sympy.Integer(0) for i, n in enumerate(sizes) if i not in keep})
        subs.update({var(i): var(j) for j, i in enumerate(keep) if i != j})   # renumber the rest
        dims[name] = [sizes[i] for i in keep]
    if not subs:
        return kernel
    return _rewrite(kernel, dims["outer"], dims["reduction"], subs)


def affine_stride(expr, var, index_vars=None) -> sympy.Expr | None:
    """How far `expr` moves when `var` grows by one, or None when that is not a constant (`var` inside
    FloorDiv/ModularIndexing, or multiplied by `var` itself or by another of `index_vars`)."""
    return _affine_stride(sympy.sympify(expr), var, frozenset(index_vars or ()))


@functools.lru_cache(maxsize=1 << 16)   # tiling, merging and both renderers ask about the same indices
def _affine_stride(expr, var, index_vars: frozenset) -> sympy.Expr | None:
    if var not in expr.free_symbols:
        return sympy.Integer(0)
    step = _linear_step(expr, var)
    if step is None:
        for sub in sympy.preorder_traversal(expr):
            if isinstance(sub, sympy.Function) and var in sub.free_symbols:
                return None
        step = sympy.diff(expr, var)
    return None if step.free_symbols & ({var} | index_vars) else step


def _linear_step(expr, var) -> sympy.Expr | None:
    """d expr / d var without `sympy.diff`, when every term of `expr` is free of `var`, is `var`, or is a
    product with `var` as one plain factor beside factors free of it (a strided address: nearly every
    index); None otherwise. The same product and sum as `diff`'s (the Leibniz rule of
    `Mul._eval_derivative_n_times`: the product of the factors with `var` replaced by 1) at a tenth of its
    cost."""
    steps = []
    for term in sympy.Add.make_args(expr):
        if term == var:
            steps.append(sympy.S.One)
        elif var not in term.free_symbols:
            continue
        elif term.is_Mul and term.args.count(var) == 1:
            factors = [sympy.S.One if f == var else f for f in term.args]
            if any(var in f.free_symbols for f in factors):
                return None
            steps.append(sympy.Mul(*factors))
        else:
            return None
    return sympy.Add(*steps)


def _mergeable(kernel: Kernel, sizes, var, i: int, all_vars) -> bool:
    a, b = var(i), var(i + 1)
    for stmt in kernel.statements():
        expr = _index_of(stmt)
        if expr is None:
            continue
        expr = sympy.sympify(expr)
        if a not in expr.free_symbols and b not in expr.free_symbols:
            continue
        sa, sb = affine_stride(expr, a, all_vars), affine_stride(expr, b, all_vars)
        if sa is None or sb is None or not sizes_equal(sa, sb * sympy.sympify(sizes[i + 1])):
            return False
    return True


def merge(kernel: Kernel) -> Kernel:
    for field, var in (("outer", xvar), ("reduction", rvar)):
        i = len(getattr(kernel, field)) - 2
        while i >= 0:
            sizes = list(getattr(kernel, field))
            all_vars = {xvar(j) for j in range(len(kernel.outer))} | {rvar(j) for j in range(len(kernel.reduction))}
            if _mergeable(kernel, sizes, var, i, all_vars):
                # s_a*v_i + s_b*v_{i+1} with s_a = s_b*n_b is s_b*v' for v' = n_b*v_i + v_{i+1} over n_a*n_b:
                # substitute v_i -> v'/n_b (the n_b cancels) and v_{i+1} -> 0; xreplace is simultaneous.
                # The n_b cancels only once expanded: s*(v'/s + 1) stays a product of a division (which no
                # codegen prints as integer arithmetic) until sympy distributes it (fuzz seed 41 index 206:
                # a narrow of an (s, 1, s) buffer under dynamic shapes), and so does a constant n_b in a
                # symbolic stride, v'*(12*s + 36)/12 (fuzz seed 51 index 789: a padded dim's stride)
                inner = sympy.sympify(sizes[i + 1])
                subs = {var(i): var(i) / inner, var(i + 1): sympy.Integer(0)}
                subs.update({var(j): var(j - 1) for j in range(i + 2, len(sizes))})
                merged = sizes[:i] + [sympy.sympify(sizes[i]) * inner] + sizes[i + 2:]
                outer = merged if field == "outer" else kernel.outer
                reduction = merged if field == "reduction" else kernel.reduction
                candidate = _rewrite(kernel, outer, reduction, subs, expand=True)
                if all(_integral(_index_of(s)) for s in candidate.statements() if _index_of(s) is not None):
                    kernel = candidate
            i -= 1
    return kernel


@functools.lru_cache(maxsize=1 << 14)     # every index of every merge candidate, the same ones again
def _has_division(expr) -> bool:
    return any((isinstance(a, sympy.Pow) and a.exp.is_negative) or (a.is_Rational and not a.is_Integer)
               for a in sympy.preorder_traversal(expr))


@functools.lru_cache(maxsize=1 << 14)     # the kernels of a graph repeat (ResNet's blocks)
def _integral(expr) -> bool:
    """No division left over (a merge whose strides did not cancel is not taken)."""
    return not _has_division(sympy.expand(expr))


def normalize(kernel: Kernel) -> Kernel:
    plan = kernel.tiling
    if plan is not None and plan.kind == "transpose":
        return kernel   # normalised when planned (tiling.plan_tiling): its dims are the plan's
    return merge(squeeze(kernel))

"""float16/bfloat16 results rounded where eager rounds them: once per ATen op.

Values of the narrow float types are computed in float32 (`vocabulary.compute_dtype`), so an expression of
dtype float16 may carry more precision than a float16 tensor. Eager writes every ATen op's result to a
float16 tensor, i.e. rounds it; a fused chain that kept its intermediates unrounded is not just a little
more precise: a value kept in memory (rounded) and recomputed elsewhere (unrounded) is two different
numbers. The min-cut partitioner saves a layer norm's float16 mean (rounded) and recomputes its input in
the backward (unrounded): on a constant row `x - mean` was one ulp instead of 0 and the input gradient 7 to
5900 instead of 0 (fuzz seeds 102 and 104); `x == x.mean()` failed where eager's var backward gives NaN.

So every lowered ATen op's narrow float result is rounded to its dtype: an IR `cast` to the value's own
dtype, which both codegens render as a round trip through the narrow type (C++ `fa_round_h`/`fa_round_b`,
Triton `.to(tl.float16).to(tl.float32)`). Inside one ATen op (a lowering's own decomposition: gelu, a
layer norm's normalisation) values stay float32, as in eager's kernels (opmath); so do constants (a
scalar operand is a float32 number in eager's opmath too). Nothing is rounded twice: loads, constants the
type holds exactly and casts to the type are rounded already, and so are the results of ops that cannot
leave the type when their operands are in it (neg, abs, max/min, where, floor, ...).
"""
from __future__ import annotations

import functools

import torch

from .nodes import E, Value, load_parts, op
from .vocabulary import DType, ExprKind, Op

NARROW_FLOATS = frozenset((DType.FLOAT16, DType.BFLOAT16))

# ops whose result is one of their (value) operands or an integer-valued/sign-changed one: a narrow float
# in, the same narrow float out
_EXACT_OPS = frozenset((Op.NEG, Op.ABS, Op.MAXIMUM, Op.MINIMUM, Op.WHERE, Op.FLOOR, Op.CEIL, Op.ROUND,
                        Op.TRUNC, Op.SIGN, Op.COPYSIGN))


@functools.lru_cache(maxsize=4096)
def _representable(value, dtype: str) -> bool:
    """Whether the constant `value` (as the float32 number it is computed as) is a `dtype` number."""
    single = torch.tensor(float(value), dtype=torch.float32)
    return not torch.isfinite(single) or bool(single.to(getattr(torch, dtype)).float() == single)


def is_rounded(e: E) -> bool:
    """Whether `e`'s value is certainly a value of its (narrow float) dtype."""
    if e.kind == ExprKind.LOAD:       # memory holds the narrow type; a masked load's `other` is a constant
        return load_parts(e)[0] is None or _representable(e.value, e.dtype)
    if e.kind == ExprKind.CONST:
        # a constant is a float32 number (eager's opmath scalar: `x * 0.1` multiplies by float32 0.1)
        return _representable(e.value, e.dtype)
    if e.kind != ExprKind.OP:
        return False
    if e.op == Op.CAST:
        return e.dtype in NARROW_FLOATS   # a cast to a narrow float rounds
    if e.op in _EXACT_OPS:
        values = e.args[1:] if e.op == Op.WHERE else e.args
        if e.op == Op.COPYSIGN:
            values = e.args[:1]       # the magnitude comes from the first operand only
        return all(a.dtype == e.dtype and is_rounded(a) for a in values)
    return False


def rounded(e: E) -> E:
    """`e` rounded to its dtype when that is a narrow float it may not be a value of."""
    if e.dtype not in NARROW_FLOATS or is_rounded(e):
        return e
    return op(Op.CAST, (e,), e.dtype, origin=e.origin)


def round_results(result):
    """A lowering's result(s) with every narrow float value that is an expression rounded to its dtype
    (a view of a buffer reads rounded values already)."""
    if isinstance(result, (tuple, list)):
        return type(result)(round_results(r) for r in result)
    if not isinstance(result, Value) or result.dtype not in NARROW_FLOATS or result.view is not None:
        return result
    inner = result.loader
    return Value(result.size, result.dtype, lambda index: rounded(inner(index)), origin=result.origin)


def unrounded_for_store(e: E, buffer_dtype: str) -> E:
    """The value a store into a `buffer_dtype` buffer needs: a store to float16/bfloat16 rounds, so a
    rounding of `e` to that same type right before it is dropped (the stored bits are the same)."""
    if (e.kind == ExprKind.OP and e.op == Op.CAST and e.dtype == buffer_dtype and e.dtype in NARROW_FLOATS
            and e.args[0].dtype == e.dtype):
        return e.args[0]
    return e


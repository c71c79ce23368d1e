"""How each IR reduction is written in Triton: its neutral element (what masked lanes hold), the
elementwise combine used by looped accumulators, and the final cross-lane reduction over RBLOCK.

Semantics follow torch: max/min propagate NaN (Triton's tl.max does not), argmax/argmin return the first
occurrence with NaN as the extreme, sums of small integers accumulate in the IR's result dtype.
"""
from __future__ import annotations

from fuse_all_ir.vocabulary import bool_form, compute_dtype, is_float, is_positional, reduction_identity

from .rules import SMALL_INTS, literal, tl_type


def normalize_op(op: str, arg_dtype: str, result_dtype: str) -> str:
    """max/min of bools are any/all (a sum of bools counts them, unless the result is a bool too)."""
    return bool_form(op, arg_dtype, result_dtype)


def neutral(op: str, dtype: str) -> str:
    """The value masked lanes hold, as Triton source, for values of (compute) dtype `dtype`."""
    return literal(reduction_identity(op, dtype), dtype)


def combine(op: str, dtype: str, acc: str, value: str) -> str:
    """Elementwise accumulate `value` into `acc` (looped reductions; not used for argmax/argmin)."""
    float_values = is_float(dtype)
    return {
        "sum": f"{acc} + {value}",
        "prod": f"{acc} * {value}",
        "max": f"fa.maximum({acc}, {value})" if float_values else f"tl.maximum({acc}, {value})",
        "min": f"fa.minimum({acc}, {value})" if float_values else f"tl.minimum({acc}, {value})",
        "any": f"{acc} | {value}",
        "all": f"{acc} & {value}",
    }[op]


def kahan_step(acc: str, comp: str, value: str, mask: str, new_name) -> list[str]:
    """Lines adding `value` to the float accumulator `acc` where `mask` holds, with Kahan compensation:
    `comp` carries the low-order bits each addition rounded away (the lane's sum is `acc - comp`).
    Where the new sum is inf or NaN the compensation is dropped (inf - inf would turn it into NaN and
    poison every later step); the sum itself propagates inf/NaN as a plain sum does. No multiplies, so
    FMA contraction cannot change the arithmetic, and Triton does not reassociate float adds."""
    y, t = new_name(), new_name()
    return [
        f"{y} = {value} - {comp}",
        f"{t} = {acc} + {y}",
        f"{comp} = tl.where({mask}, tl.where(tl.abs({t}) < float(\"inf\"), ({t} - {acc}) - {y}, 0.0), {comp})",
        f"{acc} = tl.where({mask}, {t}, {acc})",
    ]


def final(op: str, dtype: str, masked: str, index: str | None = None) -> str:
    """Reduce a neutral-filled [.., RBLOCK] block `masked` over axis 1, keeping a [.., 1] shape.
    `index` is the block of flat reduction positions (argmax/argmin only)."""
    if op == "sum":
        code = f"tl.sum({masked}, 1)[:, None]"
    elif op == "prod":
        code = f"fa.prod({masked}, 1)[:, None]"
    elif op in ("max", "min"):
        fn = (f"fa.{op}_nan" if is_float(dtype) else f"tl.{op}")
        code = f"{fn}({masked}, 1)[:, None]"
    elif op == "any":
        return f"tl.max({masked}.to(tl.int8), 1)[:, None] != 0"
    elif op == "all":
        return f"tl.min({masked}.to(tl.int8), 1)[:, None] != 0"
    elif is_positional(op):
        return f"fa.{op}({masked}, {index}, 1)[:, None].to(tl.int64)"
    else:
        raise NotImplementedError(f"reduction {op!r}")
    if compute_dtype(dtype) in SMALL_INTS:   # tl.sum/max promote small ints to int32
        code = f"({code}).to({tl_type(dtype)})"
    return code


def accumulator_dtype(op: str, value_dtype: str, result_dtype: str) -> str:
    """The compute dtype reduced values are converted to before masking/accumulating."""
    if op in ("any", "all"):
        return "bool"
    if is_positional(op):
        return compute_dtype(value_dtype)
    return compute_dtype(result_dtype)

"""Both codegens cover the IR's vocabulary: a missing rule would send every graph using that op to ATen.

For every op of `OP_ARITY` and every dtype class, an (op, dtype) pair one codegen renders must render in the
other too, unless it is listed in `IR_NEVER_EMITS` with the reason (the lowering rewrites the op, or torch
has no such op on that dtype). Each codegen's table is probed through its own rendering function, so a rule
added or dropped on one side makes this test fail until the other side or the list follows.
"""
from __future__ import annotations

import pytest

import fuse_all_ir as ir
from fuse_all_codegen_cpp import rules as cpp_rules
from fuse_all_codegen_triton import reductions as triton_reductions
from fuse_all_codegen_triton import rules as triton_rules

SAMPLE_DTYPES = ("float32", "float64", "float16", "int32", "int64", "int8", "uint8", "bool")
BOOL_RESULT = ("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not",
               "isnan", "isinf", "isfinite")

_FLOATS = ("float32", "float64", "float16")
_INTS = ("int32", "int64", "int8", "uint8")
IR_NEVER_EMITS = {
    **{(op, dt): "the lowering turns rounding of an integer into the identity (lowerings_pointwise._ROUNDING)"
       for op in ("floor", "ceil", "round", "trunc") for dt in _INTS},
    **{("truediv", dt): "truediv is on floating values only (program.py); integer division casts first"
       for dt in _INTS},
    **{(op, dt): "torch has no bitwise ops or shifts on floating tensors"
       for op in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "lshift", "rshift") for dt in _FLOATS},
    **{(op, "bool"): "torch refuses shifts of bool tensors" for op in ("lshift", "rshift")},
    ("sub", "bool"): "torch refuses subtraction of bool tensors",
}


def _arguments(op: str, dtype: str) -> tuple[list[str], str]:
    arity = ir.OP_ARITY[op]
    arg_dtypes = ["bool", dtype, dtype] if op == "where" else [dtype] * arity
    result = "bool" if op in BOOL_RESULT else ("float64" if op == "cast" else dtype)
    return arg_dtypes, result


def _renders(render, op: str, dtype: str) -> bool:
    arg_dtypes, result = _arguments(op, dtype)
    try:
        render(op, arg_dtypes, result)
    except NotImplementedError:
        return False
    return True


def _cpp(op, arg_dtypes, result):
    return cpp_rules.render_op(op, [f"a{i}" for i in range(len(arg_dtypes))], arg_dtypes, result)


def _triton(op, arg_dtypes, result):
    return triton_rules.render_compute(op, [(f"a{i}", d) for i, d in enumerate(arg_dtypes)], result)


CODEGENS = {"cpp": _cpp, "triton": _triton}


@pytest.mark.parametrize("op", sorted(ir.OP_ARITY))
def test_both_codegens_render_the_same_dtypes_of_each_op(op):
    covered = {name: {dt for dt in SAMPLE_DTYPES if _renders(render, op, dt)} for name, render in CODEGENS.items()}
    for name, dtypes in covered.items():
        assert dtypes, f"{name} has no rule at all for IR op {op!r}"
    emitted = (covered["cpp"] | covered["triton"]) - {dt for (o, dt) in IR_NEVER_EMITS if o == op}
    for name, dtypes in covered.items():
        missing = sorted(emitted - dtypes)
        assert not missing, f"{name} lacks a rule for IR op {op!r} on {missing} (the other codegen has one)"


def test_the_exception_list_is_not_stale():
    """Every listed exception still describes a real asymmetry (else it hides nothing and should go)."""
    for (op, dtype), reason in IR_NEVER_EMITS.items():
        rendered = {name for name, render in CODEGENS.items() if _renders(render, op, dtype)}
        assert len(rendered) == 1, f"({op}, {dtype}) is rendered by {sorted(rendered) or 'neither'}: {reason}"


@pytest.mark.parametrize("dtype", ir.DTYPES)
def test_both_codegens_know_every_dtype(dtype):
    assert cpp_rules.storage_type(dtype) and cpp_rules.compute_type(dtype)
    assert triton_rules.tl_type(dtype) and triton_rules.tl_storage_type(dtype)
    assert cpp_rules.dtype_class(dtype) == triton_rules.dtype_class(dtype)


# any/all take bool (program.py); torch refuses argmax/argmin of bool
REDUCTION_CASES = [(op, dt) for op in ir.REDUCTION_OPS for dt in ("float32", "int32", "bool")
                   if (op in ("any", "all")) == (dt == "bool") or op in ("sum", "prod", "max", "min")]


@pytest.mark.parametrize("op, dtype", REDUCTION_CASES)
def test_both_codegens_have_an_identity_for_every_reduction(op, dtype):
    result = "int64" if op in ("argmax", "argmin") else dtype
    triton_op = triton_reductions.normalize_op(op, dtype, result)
    assert triton_reductions.neutral(triton_op, triton_rules.compute_dtype(dtype))
    if op not in ("argmax", "argmin"):   # C++ renders argmax/argmin as its own loop (render.py), no identity
        assert cpp_rules.reduction_init(op, dtype)

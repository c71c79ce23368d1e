"""The IR's vocabulary (`fuse_all_ir.vocabulary`) against the codegens and the lowering.

* Coverage: for every op the IR can emit -- every (op, dtype) whose dtype class the op's table entry
  declares in `operands` -- every codegen renders a kernel computing it. A missing rule would send every
  graph using that op to ATen at run time; here it fails a test. The classes an op is never emitted on are
  declared in the same table with the reason (the lowering rewrites it, or torch refuses it), and the
  validator (run on every Program the suite compiles) rejects a kernel that uses one, so the declaration
  cannot drift from what the lowering does.
* Reductions likewise: every codegen renders every reduction on every dtype it takes.
* The codegens share the table's facts: dtype classes (an unknown dtype is a clear `UnsupportedDtype` in
  both), compute types, reduction identities and the non-finite literals.
"""
from __future__ import annotations

import math

import pytest
import sympy

import fuse_all_ir as ir
from fuse_all_ir import vocabulary as vocab
from fuse_all_ir.program import Compute, Kernel, Load, Loop, Reduce, Store
from fuse_all_ir.symbolic import rvar, xvar
from fuse_all_ir.vocabulary import DType, DTypeClass, Op, OpResult, ReductionOp

from fuse_all_codegen_cpp import render as cpp_render
from fuse_all_codegen_cpp import rules as cpp_rules
from fuse_all_codegen_triton import reductions as triton_reductions
from fuse_all_codegen_triton import render as triton_render
from fuse_all_codegen_triton.choices import TritonChoices
from fuse_all_codegen_triton import rules as triton_rules

# Every codegen by name: how it renders one kernel (the program's buffer dtypes given), as the backend does.
CODEGENS = {
    "cpp": lambda kernel, dtypes: cpp_render.render_kernel(kernel, dtypes),
    "triton": lambda kernel, dtypes: triton_render.render_kernel(kernel, dtypes).source,
}


def _result_dtype(op: Op, operand: DType) -> DType:
    result = vocab.OP_INFO[op].result
    if result is OpResult.RANDOM:
        return DType.FLOAT32
    return DType.BOOL if result is OpResult.BOOL else operand


def _compute_kernel(op: Op, arg_dtypes: list[DType], result: DType) -> tuple[Kernel, dict]:
    """A pointwise kernel: load each argument from its own input, compute `op`, store the result."""
    body = [Load(f"a{i}", f"in{i}", xvar(0), dt) for i, dt in enumerate(arg_dtypes)]
    body += [Compute("v", op, tuple(f"a{i}" for i in range(len(arg_dtypes))), result), Store("out", xvar(0), "v")]
    inputs = tuple(f"in{i}" for i in range(len(arg_dtypes)))
    kernel = Kernel(f"k_{op}", (sympy.Integer(64),), (), [Loop(False, body)], inputs, ("out",), ())
    return kernel, {**dict(zip(inputs, arg_dtypes)), "out": result}


def _emitted_cases():
    """(op, argument dtypes, result dtype) for every op on every dtype of a class the IR emits it on."""
    for op, info in vocab.OP_INFO.items():
        for dtype in vocab.DTYPES:
            if vocab.dtype_class(dtype) not in info.operands:
                continue
            if op is Op.CAST:
                for result in vocab.DTYPES:
                    yield op, [dtype], result
            elif op is Op.WHERE:
                yield op, [DType.BOOL, dtype, dtype], dtype
            else:
                yield op, [dtype] * info.arity, _result_dtype(op, dtype)


EMITTED = list(_emitted_cases())


def _case_id(case) -> str:
    op, args, result = case
    return f"{op}-{'-'.join(args)}-{result}"


@pytest.mark.parametrize("codegen", sorted(CODEGENS))
@pytest.mark.parametrize("case", EMITTED, ids=[_case_id(c) for c in EMITTED])
def test_every_codegen_has_a_rule_for_every_op_the_ir_emits(codegen, case):
    op, arg_dtypes, result = case
    kernel, dtypes = _compute_kernel(op, arg_dtypes, result)
    ir.validate_kernel(kernel)   # the probe itself is a kernel the IR could emit
    try:
        source = CODEGENS[codegen](kernel, dtypes)
    except NotImplementedError as exc:
        pytest.fail(f"{codegen} has no rule for IR op {op!r} on {arg_dtypes} -> {result}: {exc} (the IR emits it: "
                    f"add the rule, or declare in vocabulary.OP_INFO why the IR never emits it)")
    assert source


def test_the_probe_fails_when_a_rule_is_missing(monkeypatch):
    """The coverage test can fail: without its C++ rule, hypot on float32 does not render."""
    case = (Op.HYPOT, [DType.FLOAT32] * 2, DType.FLOAT32)
    monkeypatch.delitem(cpp_rules.FLOAT_RULES, "hypot")
    with pytest.raises(NotImplementedError, match="hypot"):
        CODEGENS["cpp"](*_compute_kernel(*case))


@pytest.mark.parametrize("op", list(Op))
def test_every_op_says_why_the_ir_never_emits_it_on_the_other_classes(op):
    info = vocab.OP_INFO[op]
    assert info.operands, f"{op} is emitted on no dtype class"
    assert set(info.operands) | set(info.not_emitted) == set(DTypeClass)
    assert not set(info.operands) & set(info.not_emitted)
    assert all(reason.strip() for reason in info.not_emitted.values())


def test_the_validator_rejects_an_op_on_a_class_the_ir_never_emits():
    kernel, _ = _compute_kernel(Op.FLOOR, [DType.INT32], DType.INT32)
    with pytest.raises(ir.InvalidProgram, match="never emits.*identity"):
        ir.validate_kernel(kernel)


# ---- reductions ------------------------------------------------------------------------------------------

def _reduction_kernel(op: ReductionOp, dtype: DType, length: int = 128) -> tuple[Kernel, dict]:
    result = vocab.reduction_result_dtype(op, dtype)
    body = [Load("a", "in0", xvar(0) * length + rvar(0), dtype), Reduce("v", op, "a", result)]
    kernel = Kernel(f"k_{op}", (sympy.Integer(2),), (sympy.Integer(length),),
                    [Loop(True, body), Loop(False, [Store("out", xvar(0), "v")])], ("in0",), ("out",), ())
    return kernel, {"in0": dtype, "out": result}


REDUCTION_CASES = [(op, dt) for op, info in vocab.REDUCTION_INFO.items() for dt in vocab.DTYPES
                   if vocab.dtype_class(dt) in info.takes]


# each codegen's reduction shapes: C++ loops, and splits a long reduction over threads (combining partials);
# Triton keeps a short row in registers (persistent) or loops over it with accumulators
REDUCTION_SHAPES = {
    "cpp": (128, lambda kernel, dtypes: cpp_render.render_kernel(kernel, dtypes)),
    "cpp-split": (1 << 16, lambda kernel, dtypes: cpp_render.render_kernel(kernel, dtypes)),
    "triton-persistent": (128, lambda kernel, dtypes: triton_render.render_kernel(kernel, dtypes).source),
    "triton-looped": (128, lambda kernel, dtypes: triton_render.render_kernel(
        kernel, dtypes, options=triton_render.RenderOptions(choices=TritonChoices(force_looped=True))).source),
}


@pytest.mark.parametrize("shape", sorted(REDUCTION_SHAPES))
@pytest.mark.parametrize("op, dtype", REDUCTION_CASES, ids=[f"{o}-{d}" for o, d in REDUCTION_CASES])
def test_every_codegen_renders_every_reduction_the_ir_emits(shape, op, dtype):
    length, render = REDUCTION_SHAPES[shape]
    kernel, dtypes = _reduction_kernel(op, dtype, length)
    ir.validate_kernel(kernel)
    source = render(kernel, dtypes)
    assert ("split over threads" in source) == (shape == "cpp-split")
    assert ("for roffset" in source) == (shape == "triton-looped")


def test_reduction_identities():
    """One table: the identity is the neutral element of its reduction, per dtype (bool included)."""
    assert vocab.reduction_identity("sum", "float16") == 0.0 and isinstance(
        vocab.reduction_identity("sum", "float16"), float)
    assert vocab.reduction_identity("prod", "int32") == 1 and isinstance(vocab.reduction_identity("prod", "int32"), int)
    assert vocab.reduction_identity("max", "bfloat16") == -math.inf
    assert vocab.reduction_identity("argmin", "float32") == math.inf   # its value accumulator's: min's
    assert vocab.reduction_identity("max", "uint8") == 0 and vocab.reduction_identity("min", "uint8") == 255
    assert vocab.reduction_identity("argmax", "int64") == -2 ** 63
    assert vocab.reduction_identity("min", "int8") == 127
    assert vocab.reduction_identity("sum", "bool") is False and vocab.reduction_identity("min", "bool") is True
    assert vocab.reduction_identity("any", "bool") is False and vocab.reduction_identity("all", "bool") is True
    for op, dtype in [("max", "bool"), ("sum", "bool"), ("min", "bool"), ("prod", "bool")]:
        bool_op = vocab.bool_form(op, dtype, dtype)
        assert bool_op in ("any", "all")
        assert vocab.reduction_identity(bool_op, dtype) == vocab.reduction_identity(op, dtype)
    assert vocab.bool_form("sum", "bool", "int64") == "sum"   # counting bools is a sum


@pytest.mark.parametrize("op, dtype", [(o, d) for o, d in REDUCTION_CASES])
def test_triton_spells_every_identity_as_its_value(op, dtype):
    """Triton literals are Python: the neutral element it writes evaluates to the table's identity."""
    normalized = triton_reductions.normalize_op(op, dtype, vocab.reduction_result_dtype(op, dtype))
    acc = triton_reductions.accumulator_dtype(normalized, dtype, vocab.reduction_result_dtype(op, dtype))
    written = eval(triton_reductions.neutral(normalized, acc), {"float": float})
    assert written == vocab.reduction_identity(normalized, acc)


def test_cpp_identities_come_from_the_table():
    assert cpp_rules.reduction_init("max", "float32") == "-__builtin_inff()"
    assert cpp_rules.reduction_init("min", "float64") == "__builtin_inf()"
    assert cpp_rules.reduction_init("max", "int64") == "(int64_t)(-9223372036854775807LL - 1)"
    assert cpp_rules.reduction_init("min", "uint8") == "((uint8_t)255)"
    assert cpp_rules.reduction_init("sum", "bool") == "false" and cpp_rules.reduction_init("prod", "bool") == "true"


# ---- dtypes and literals ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", vocab.DTYPES)
def test_both_codegens_compute_in_the_tables_compute_type(dtype):
    compute = vocab.compute_dtype(dtype)
    assert cpp_rules.compute_type(dtype) == cpp_rules.compute_type(compute)
    assert triton_rules.tl_type(dtype) == triton_rules.tl_type(compute)
    assert cpp_rules.storage_type(dtype) and triton_rules.tl_storage_type(dtype)
    assert (compute != dtype) == (dtype in ("float16", "bfloat16"))


@pytest.mark.parametrize("unknown", ["complex64", "float8_e4m3fn", "int4"])
def test_an_unknown_dtype_is_a_clear_error_in_both_codegens(unknown):
    for convert in (cpp_rules.compute_type, cpp_rules.storage_type, triton_rules.tl_type):
        with pytest.raises(vocab.UnsupportedDtype, match=unknown):
            convert(unknown)
    kernel, dtypes = _compute_kernel(Op.ADD, [DType.FLOAT32] * 2, DType.FLOAT32)
    for name, render in CODEGENS.items():
        with pytest.raises(vocab.UnsupportedDtype):
            render(kernel, {**dtypes, "in0": unknown})


def test_non_finite_values_have_a_spelling_in_both_codegens():
    for value, special in [(math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf")]:
        assert vocab.non_finite(value) == special
        for dtype in vocab.FLOAT_DTYPES:
            assert eval(triton_rules.literal(value, dtype), {"float": float}) == value or special == "nan"
            assert "__builtin_" in cpp_rules.literal(value, dtype)
    assert vocab.non_finite(1e308) is None
    assert cpp_rules.literal(math.nan, "float32") == '__builtin_nanf("")'
    assert cpp_rules.literal(-math.inf, "float64") == "-__builtin_inf()"
    assert triton_rules.literal(True, "bool") == "1" and triton_rules.literal(3.0, "int8") == "3"


def test_names_behave_as_their_strings():
    """Enum members are interchangeable with the plain strings of older Programs and artifacts."""
    import json
    assert DType.FLOAT32 == "float32" and {"float32": 1}[DType.FLOAT32] == 1 and {DType.FLOAT32: 1}["float32"] == 1
    assert f"{Op.ADD}" == str(Op.ADD) == "add" and repr(ReductionOp.ARGMAX) == "'argmax'"
    assert json.dumps([DType.INT8, Op.WHERE]) == '["int8", "where"]'
    assert vocab.dtype("bfloat16") is DType.BFLOAT16 and vocab.op("where") is Op.WHERE
    with pytest.raises(ValueError, match="vocabulary"):
        vocab.op("frobnicate")


def test_the_program_tuples_are_the_tables_names():
    assert set(ir.OP_ARITY) == set(Op) and set(ir.REDUCTION_OPS) == set(ReductionOp) and set(ir.DTYPES) == set(DType)
    assert set(ir.UNARY_OPS) | set(ir.BINARY_OPS) | set(ir.TERNARY_OPS) == set(Op)
    assert all(ir.OP_ARITY[o] == vocab.OP_INFO[o].arity for o in Op)


def test_buffer_dtypes_of_a_kernel_one_rule_for_both_codegens():
    """The program's layouts first, else what the kernel loads, else what it stores, else float32."""
    body = [Load("a", "in0", xvar(0), DType.FLOAT16), Compute("b", Op.CAST, ("a",), DType.INT32),
            Store("out", xvar(0), "b")]
    kernel = Kernel("k", (sympy.Integer(8),), (), [Loop(False, body)], ("in0", "untouched"), ("out",), ())
    assert kernel.buffer_dtypes() == {"in0": "float16", "untouched": "float32", "out": "int32"}
    assert kernel.buffer_dtypes({"in0": "bfloat16", "other": "int8"}) == {
        "in0": "bfloat16", "untouched": "float32", "out": "int32"}

"""The Program validator: every hand-built example and compiled graph passes; broken Programs are rejected
with the rule they break; the backend turns a violation into an ATen fallback (or raises with
fallback=False)."""
from __future__ import annotations

import dataclasses

import pytest
import sympy
import torch

import fuse_all_ir as ir
import kernel_examples as ke
from fuse_all_ir import Compute, Const, IndexValue, Load, Loop, Reduce, Store, rvar, xvar
from kernel_program_builders import pointwise, program, spec

x0, r0 = xvar(0), rvar(0)
N = 7


@pytest.mark.parametrize("name", sorted(ke.EXAMPLES))
def test_every_kernel_example_is_valid(name):
    ir.validate_program(ke.EXAMPLES[name]("cpu")[0])


def one_kernel(body, inputs=("arg0",), outputs=("buf0",), out_dtype="float32", in_dtype="float32"):
    k = pointwise("kernel_0", [N], body, list(inputs), list(outputs))
    return program("broken", "cpu", {i: spec(in_dtype, [N]) for i in inputs},
                   {o: spec(out_dtype, [N]) for o in outputs}, [k])


def reduction_kernel(loops):
    k = ir.Kernel("kernel_0", (sympy.Integer(3),), (sympy.Integer(N),), loops, ("arg0",), ("buf0",), ())
    return program("broken", "cpu", {"arg0": spec("float32", [3, N])}, {"buf0": spec("float32", [3])}, [k])


def assert_rejected(prog, *words):
    with pytest.raises(ir.InvalidProgram) as info:
        ir.validate_program(prog)
    for word in words:
        assert word in str(info.value), str(info.value)


def test_a_valid_pointwise_kernel_passes():
    ir.validate_program(one_kernel([Load("a", "arg0", x0, "float32"), Compute("b", "sin", ("a",), "float32"),
                                    Store("buf0", x0, "b")]))


def test_a_value_defined_twice_is_rejected():
    assert_rejected(one_kernel([Load("a", "arg0", x0, "float32"), Compute("a", "sin", ("a",), "float32"),
                                Store("buf0", x0, "a")]), "'a' is defined twice")


def test_a_value_used_before_its_definition_is_rejected():
    assert_rejected(one_kernel([Compute("b", "sin", ("a",), "float32"), Load("a", "arg0", x0, "float32"),
                                Store("buf0", x0, "b")]), "reads 'a' before it is defined")


def test_a_value_of_a_reduction_phase_read_after_it_is_rejected():
    loops = [Loop(True, [Load("a", "arg0", x0 * N + r0, "float32"), Reduce("m", "max", "a", "float32")]),
             Loop(False, [Compute("b", "add", ("a", "m"), "float32"), Store("buf0", x0, "b")])]
    assert_rejected(reduction_kernel(loops), "defined in an earlier reduction phase")


def test_a_reduce_result_is_visible_in_later_phases():
    loops = [Loop(True, [Load("a", "arg0", x0 * N + r0, "float32"), Reduce("m", "max", "a", "float32")]),
             Loop(False, [Store("buf0", x0, "m")])]
    ir.validate_program(reduction_kernel(loops))


def test_a_reduce_outside_a_reduction_phase_is_rejected():
    loops = [Loop(True, [Load("a", "arg0", x0 * N + r0, "float32")]),
             Loop(False, [Const("c", 1.0, "float32"), Reduce("m", "sum", "c", "float32"), Store("buf0", x0, "m")])]
    assert_rejected(reduction_kernel(loops), "Reduce outside a reduction phase")


def test_a_reduction_variable_outside_a_reduction_phase_is_rejected():
    loops = [Loop(True, [Load("a", "arg0", x0 * N + r0, "float32"), Reduce("m", "sum", "a", "float32")]),
             Loop(False, [Load("b", "arg0", x0 * N + r0, "float32"), Store("buf0", x0, "b")])]
    assert_rejected(reduction_kernel(loops), "uses ['r0']", "only x variables")


def test_an_unknown_symbol_in_an_index_is_rejected():
    s9 = ir.size_symbol("s9")
    assert_rejected(one_kernel([Load("a", "arg0", x0 + s9, "float32"), Store("buf0", x0, "a")]), "uses ['s9']")


def test_a_non_integer_index_is_rejected():
    assert_rejected(one_kernel([Load("a", "arg0", x0 / 2, "float32"), Store("buf0", x0, "a")]),
                    "not integer-valued")


def test_dtype_disagreement_is_rejected():
    assert_rejected(one_kernel([Load("a", "arg0", x0, "float32"), Const("c", 1, "int32"),
                                Compute("b", "add", ("a", "c"), "float32"), Store("buf0", x0, "b")]),
                    "add of float32, int32 declared float32")
    assert_rejected(one_kernel([Load("a", "arg0", x0, "float32"), Compute("b", "lt", ("a", "a"), "float32"),
                                Store("buf0", x0, "b")]), "lt yields bool")
    assert_rejected(one_kernel([Load("a", "arg0", x0, "float32"), Compute("b", "where", ("a", "a", "a"), "float32"),
                                Store("buf0", x0, "b")]), "condition is float32")
    assert_rejected(one_kernel([Load("a", "arg0", x0, "float32"), Compute("b", "cast", ("a",), "int32"),
                                Store("buf0", x0, "b")]), "stores a int32 value into float32 buffer")
    assert_rejected(one_kernel([Load("a", "arg0", x0, "float64"), Store("buf0", x0, "a")]),
                    "loads float32 buffer 'arg0' as float64")
    loops = [Loop(True, [Load("a", "arg0", x0 * N + r0, "float32"), Reduce("m", "argmax", "a", "float32")]),
             Loop(False, [Store("buf0", x0, "m")])]
    assert_rejected(reduction_kernel(loops), "argmax gives int64")


def test_unknown_ops_and_wrong_arity_are_rejected():
    assert_rejected(one_kernel([Load("a", "arg0", x0, "float32"), Compute("b", "frobnicate", ("a",), "float32"),
                                Store("buf0", x0, "b")]), "unknown op 'frobnicate'")
    assert_rejected(one_kernel([Load("a", "arg0", x0, "float32"), Compute("b", "add", ("a",), "float32"),
                                Store("buf0", x0, "b")]), "add takes 2 argument(s), got 1")


def test_buffers_outside_the_kernel_signature_are_rejected():
    assert_rejected(one_kernel([Load("a", "arg1", x0, "float32"), Store("buf0", x0, "a")]),
                    "loads 'arg1', not one of its inputs")
    assert_rejected(one_kernel([Load("a", "arg0", x0, "float32"), Store("buf7", x0, "a")]),
                    "stores to 'buf7', not one of its outputs")


def test_reading_a_buffer_no_step_wrote_or_a_freed_one_is_rejected():
    a, b = ke.two_kernels("cpu")[0], ke.two_kernels("cpu")[0]
    a.steps = [s for s in a.steps if not (isinstance(s, ir.KernelCall) and s.kernel == a.steps[-2].kernel)]
    assert_rejected(a, "which no earlier step wrote")
    first_output = b.kernels[b.steps[-2].kernel].outputs[0]
    b.steps.insert(len(b.steps) - 1, ir.Free(first_output))
    assert_rejected(b, "which no earlier step wrote (or it was freed)")


def test_index_values_may_use_only_the_kernel_variables():
    assert_rejected(one_kernel([IndexValue("i", r0, "int64"), Compute("f", "cast", ("i",), "float32"),
                                Store("buf0", x0, "f")]), "expression r0 uses ['r0']")


def test_compiled_graphs_pass(nonzero):
    from ir_testing import lower
    lower(lambda x: (torch.softmax(x, -1), x.argmax(1), (x > 0).any(1), x.t()[1:, ::2].exp()), nonzero(8, 16))


def test_the_backend_falls_back_on_an_invalid_program_or_raises_without_fallback(monkeypatch, nonzero):
    import fuse_all
    import fuse_all_ir.api as api
    real_schedule = api.schedule

    def broken_schedule(lowered, *args):
        prog = real_schedule(lowered, *args)
        for name, kernel in prog.kernels.items():
            first = kernel.loops[0].body[0]
            kernel.loops[0].body.insert(0, dataclasses.replace(first))   # define its first value twice
        return prog

    monkeypatch.setattr(api, "schedule", broken_schedule)
    monkeypatch.setenv("FUSE_ALL_VALIDATE", "1")
    x = nonzero(5, 6)
    torch._dynamo.reset()
    fn = torch.compile(lambda x: x.sin() + 1, backend="fuse_all", options={"fallback": False})
    with pytest.raises(Exception, match="InvalidProgram|defined twice"):
        fn(x)
    torch._dynamo.reset()
    fuse_all.reset() if hasattr(fuse_all, "reset") else None
    fn = torch.compile(lambda x: x.sin() + 1, backend="fuse_all")
    torch.testing.assert_close(fn(x), x.sin() + 1)
    record = fuse_all.compiled_graphs()[-1]
    assert record.fallback_reason.startswith("InvalidProgram") and "defined twice" in record.fallback_reason
    torch._dynamo.reset()

"""The host program's memory plan (`fuse_all_ir.memory`): buffer lifetimes and the reuse of dead buffers'
memory, on the CPU (C++ kernels); results are checked against eager and against the same program without
reuse (the kernels are the same, so the results must be bit-identical)."""
from __future__ import annotations

import dataclasses

import sympy
import torch

import fuse_all_ir as ir
from fuse_all_codegen_cpp import CppTarget
from fuse_all_ir import Alloc, BufferRef, ExternCall, Free, KernelCall, Load, Compute, Store, xvar
from fuse_all_ir.memory import extern_may_alias, plan_reuse, storage_elements
from kernel_program_builders import pointwise, program, spec
from ir_testing import lower


def run(prog: ir.Program, inputs) -> tuple:
    module = ir.load_host_program(ir.render_host_program(prog, CppTarget()))
    return module.call(list(inputs))


def reuses(prog: ir.Program) -> dict[str, str]:
    """receiver -> donor"""
    return {s.buffer: s.reuse for s in prog.steps if isinstance(s, Alloc) and s.reuse is not None}


def output_names(prog: ir.Program) -> set[str]:
    return {o.name for o in prog.outputs if isinstance(o, BufferRef)}


def lower_both(fn, *inputs):
    plain = ir.lower(torch.fx.experimental.proxy_tensor.make_fx(fn)(*inputs), list(inputs), "g",
                     validate=True, reuse_buffers=False)
    return plain, lower(fn, *inputs)    # ir_testing.lower: reuse on (the default), validated


def chain(x, w):
    """Pointwise kernels separated by matmuls: every kernel's output dies at the next matmul."""
    a = (x @ w).sin()
    b = (a @ w).cos()
    c = (b @ w).tanh()
    return ((c @ w) * 2,)


def test_a_chain_reuses_dead_buffers_and_computes_the_same(nonzero):
    x, w = nonzero(8, 8), nonzero(8, 8)
    plain, planned = lower_both(chain, x, w)
    assert not reuses(plain.program)
    taken = reuses(planned.program)
    assert len(taken) >= 2, planned.program.steps
    allocs = sum(isinstance(s, Alloc) for s in planned.program.steps)
    assert allocs == sum(isinstance(s, Alloc) for s in plain.program.steps)
    # a donor's Free step is gone (the reusing Alloc ends its life), every other buffer is still freed
    freed = {s.buffer for s in planned.program.steps if isinstance(s, Free)}
    assert not freed & set(taken.values())
    expected = chain(x, w)[0]
    got, = run(planned.program, [x, w])
    same, = run(plain.program, [x, w])
    assert torch.equal(got, same)
    torch.testing.assert_close(got, expected)
    source = ir.render_host_program(planned.program, CppTarget())
    assert "# reuse" in source and "empty_strided_cpu(" in source
    receiver, donor = next(iter(taken.items()))
    assert f"alloc {receiver} (reusing the memory of {donor}" in ir.format_program(planned.program)


def test_graph_outputs_and_inputs_never_give_their_memory(nonzero):
    def f(x, w):
        a = (x @ w).sin()            # a graph output that later kernels are computed after
        b = (a @ w).cos()
        c = (b @ w).tanh()
        return a, (c @ w) * 2
    x, w = nonzero(8, 8), nonzero(8, 8)
    x0, w0 = x.clone(), w.clone()
    plain, planned = lower_both(f, x, w)
    donors = set(reuses(planned.program).values())
    assert donors and not donors & (output_names(planned.program) | {i.name for i in planned.program.inputs})
    a, out = run(planned.program, [x, w])
    assert torch.equal(x, x0) and torch.equal(w, w0)
    pa, pout = run(plain.program, [x, w])
    assert torch.equal(a, pa) and torch.equal(out, pout)   # a reused `a` would be overwritten by a later kernel
    ea, eout = f(x, w)
    torch.testing.assert_close(a, ea)
    torch.testing.assert_close(out, eout, rtol=1e-5, atol=1e-5)


def test_an_output_takes_only_memory_of_its_own_exact_layout(nonzero):
    def f(x, w):
        a = (x @ w).sin()
        return ((a @ w).reshape(4, 16).cos(),)     # the output has 64 elements like `a`, another shape
    x, w = nonzero(8, 8), nonzero(8, 8)
    planned = lower(f, x, w).program
    out, = output_names(planned)
    assert out not in reuses(planned)
    got, = run(planned, [x, w])
    torch.testing.assert_close(got, f(x, w)[0])


def test_a_buffer_of_another_shape_over_as_many_elements_is_reinterpreted(nonzero):
    def f(x, w, v):
        a = (x.t() * x).sin()                          # (8, 8), host-allocated: dies at the next matmul
        b = (a @ w).reshape(4, 16).cos()               # (4, 16): 64 elements, a kernel's own buffer
        return (b @ v,)
    x, w, v = nonzero(8, 8), nonzero(8, 8), nonzero(16, 8)
    plain, planned = lower_both(f, x, w, v)
    lines = ir.render_host_program(planned.program, CppTarget()).splitlines()
    assert any("reinterpret_tensor(" in line and "# reuse" in line for line in lines), \
        [line for line in lines if "buf" in line]
    got, = run(planned.program, [x, w, v])
    assert torch.equal(got, run(plain.program, [x, w, v])[0])
    torch.testing.assert_close(got, f(x, w, v)[0])


def _two_kernel_program(extern_target: str) -> ir.Program:
    """buf0 = 2*x (4x4); buf1 = extern(buf0) (a 16-vector); buf2 = 3 * transpose(buf1) (4x4): buf0 dies at
    the extern call, and buf2 has its exact layout."""
    x0, x1 = xvar(0), xvar(1)
    k0 = pointwise("kernel_0", (4, 4), [Load("a", "arg0", 4 * x0 + x1, "float32"),
                                        ir.Const("two", 2.0, "float32"), Compute("b", "mul", ("a", "two"), "float32"),
                                        Store("buf0", 4 * x0 + x1, "b")], ["arg0"], ["buf0"])
    k1 = pointwise("kernel_1", (4, 4), [Load("a", "buf1", 4 * x1 + x0, "float32"),
                                        ir.Const("three", 3.0, "float32"), Compute("b", "mul", ("a", "three"), "float32"),
                                        Store("buf2", 4 * x0 + x1, "b")], ["buf1"], ["buf2"])
    prog = program("g", "cpu", {"arg0": spec("float32", (4, 4))}, {"buf2": spec("float32", (4, 4))}, [k0, k1],
                   temps={"buf0": spec("float32", (4, 4))})
    args = (BufferRef("buf0"), [16]) if extern_target.startswith("aten.view") else (BufferRef("buf0"),)
    out_spec = spec("float32", (16,)) if extern_target.startswith("aten.view") else spec("float32", (4, 4))
    prog.steps = [Alloc("buf0"), KernelCall("kernel_0"),
                  ExternCall(extern_target, args, {}, ("buf1",), (out_spec,)),
                  Free("buf0"), Alloc("buf2"), KernelCall("kernel_1"), Free("buf1")]
    return prog


def test_a_buffer_an_aten_call_may_have_viewed_is_never_reused():
    x = torch.randn(4, 4)
    viewed = plan_reuse(_two_kernel_program("aten.view.default"))
    ir.validate_program(viewed)
    assert not reuses(viewed)                   # buf1 is a live view of buf0: buf2 must not overwrite it
    got, = run(viewed, [x])
    torch.testing.assert_close(got, (2 * x).reshape(16).reshape(4, 4).t() * 3)
    cloned = plan_reuse(_two_kernel_program("aten.clone.default"))
    ir.validate_program(cloned)
    assert reuses(cloned) == {"buf2": "buf0"}   # a copy: buf0's memory is free once the clone ran
    got, = run(cloned, [x])
    torch.testing.assert_close(got, (2 * x).t() * 3)


def test_the_alias_rule_reads_the_op_schema():
    assert extern_may_alias("aten.view.default") and extern_may_alias("aten.transpose.int")
    assert extern_may_alias("aten.copy_.default")                 # writes into an argument
    assert extern_may_alias("aten.no_such_op.default")            # unknown: assume the worst
    assert not extern_may_alias("aten.mm.default") and not extern_may_alias("aten.convolution.default")


def test_storage_elements():
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    assert storage_elements(spec("float32", (8, 8))) == 64
    assert storage_elements(spec("float32", (4, 3), (1, 4))) == 12
    assert storage_elements(spec("float32", (4, 0))) == 0
    assert sympy.expand(storage_elements(spec("float32", (s0, 8))) - 8 * s0) == 0


def test_validation_rejects_reusing_an_output_or_a_buffer_read_later(nonzero):
    def f(x, w):
        a = (x @ w).sin()
        b = (a @ w).cos()
        return a, (b @ w).tanh()
    x, w = nonzero(8, 8), nonzero(8, 8)
    prog = lower(f, x, w).program
    out_a = prog.outputs[0].name
    positions = [i for i, s in enumerate(prog.steps) if isinstance(s, Alloc)]
    last = positions[-1]                       # allocated after `a` was written
    broken = list(prog.steps)
    broken[last] = Alloc(prog.steps[last].buffer, reuse=out_a)
    try:
        ir.validate_program(dataclasses.replace(prog, steps=broken))
    except ir.InvalidProgram as e:
        assert "a graph input or output" in str(e)
    else:
        raise AssertionError("a reuse of a graph output passed validation")
    # after a reuse the donor is dead: any later use of it is rejected like a use of a freed buffer
    planned = lower(chain, x, w).program
    at, step = next((i, s) for i, s in enumerate(planned.steps) if isinstance(s, Alloc) and s.reuse)
    call = next(i for i in range(at, len(planned.steps)) if isinstance(planned.steps[i], KernelCall))
    broken = planned.steps[:call + 1] + [Free(step.reuse)] + planned.steps[call + 1:]
    try:
        ir.validate_program(dataclasses.replace(planned, steps=broken))
    except ir.InvalidProgram as e:
        assert repr(step.reuse) in str(e) and "freed" in str(e)
    else:
        raise AssertionError("a use of a reused (dead) buffer passed validation")


def test_a_training_forward_keeps_its_saved_tensors():
    """Saved activations are outputs of the forward graph: never reused, and the gradients match."""
    import fuse_all_capture as capture
    from fuse_all.backend import _decompositions

    torch.manual_seed(0)
    x, w = torch.randn(8, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)

    def f(x, w):
        return (((x @ w).sin() @ w).cos() @ w).tanh().sum()
    graphs = capture.capture(f, x, w, training=True, decompositions=_decompositions())
    forward = next(g for g in graphs if g.kind == "forward")
    prog = ir.lower(forward.graph_module, forward.example_inputs, forward.graph_id, forward.device,
                    validate=True).program
    assert not set(reuses(prog).values()) & output_names(prog)
    compiled = torch.compile(f, backend="fuse_all")
    loss = compiled(x, w)
    gx, gw = torch.autograd.grad(loss, (x, w))
    ex, ew = torch.autograd.grad(f(x, w), (x, w))
    torch.testing.assert_close(loss, f(x, w))
    torch.testing.assert_close(gx, ex)
    torch.testing.assert_close(gw, ew)


def test_dynamic_shapes_reuse_only_buffers_of_equal_symbolic_size():
    torch._dynamo.reset()
    compiled = torch.compile(chain, backend="fuse_all", dynamic=True)
    w = torch.randn(8, 8)
    for rows in (5, 9, 16):
        x = torch.randn(rows, 8)
        torch.testing.assert_close(compiled(x, w)[0], chain(x, w)[0])


def test_an_aten_call_that_writes_gets_real_views_and_others_reinterpreted_ones():
    """Views passed to an op that writes into them are `as_strided` views: the write bumps the base's
    version counter, as in eager; views for other ops are `reinterpret_tensor`s (no dispatcher)."""
    half = ir.TensorSpec("float32", (sympy.Integer(2), sympy.Integer(4)), (sympy.Integer(4), sympy.Integer(1)),
                         sympy.Integer(4))
    prog = program("g", "cpu", {"arg0": spec("float32", (4, 4)), "arg1": spec("float32", (4, 4))}, {}, [])
    prog.steps = [ExternCall("aten.copy_.default", (BufferRef("arg0", half), BufferRef("arg1", half)), {},
                             (None,), (None,)),
                  ExternCall("aten.mul.Tensor", (BufferRef("arg1", half), 2.0), {}, ("buf0",),
                             (spec("float32", (2, 4)),))]
    prog.outputs = [BufferRef("buf0")]
    source = ir.render_host_program(prog, CppTarget())
    copy_line = next(line for line in source.splitlines() if "aten_copy_" in line and "(" in line and "=" in line
                     and "torch.ops" not in line)
    mul_line = next(line for line in source.splitlines() if "aten_mul_" in line and "torch.ops" not in line
                    and "buf0 =" in line)
    assert "as_strided(arg0" in copy_line and "reinterpret_tensor(" not in copy_line
    assert "reinterpret_tensor(arg1" in mul_line
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    expected_x = x.clone()
    expected_x[1:3] = y[1:3]
    version = x._version
    out, = run(prog, [x, y])
    assert torch.equal(x, expected_x) and x._version > version
    torch.testing.assert_close(out, y[1:3] * 2)


def test_an_aten_result_on_another_device_never_gives_its_memory():
    """buf1 = clone(x) by ATen dies before buf3 (same layout) is allocated: reused when the result is on
    the program's device, never when it is elsewhere (`.cpu()` in a CUDA graph)."""
    x0, x1 = xvar(0), xvar(1)

    def scale(name, src, dst, factor):
        return pointwise(name, (4, 4), [Load("a", src, 4 * x1 + x0, "float32"), ir.Const("f", factor, "float32"),
                                        Compute("b", "mul", ("a", "f"), "float32"), Store(dst, 4 * x0 + x1, "b")],
                         [src], [dst])

    def build(result_device: str) -> ir.Program:
        prog = program("g", "cpu", {"arg0": spec("float32", (4, 4))}, {"buf4": spec("float32", (4, 4))},
                       [scale("kernel_0", "buf1", "buf2", 3.0), scale("kernel_1", "buf2", "buf3", 2.0),
                        scale("kernel_2", "buf3", "buf4", 5.0)],
                       temps={"buf2": spec("float32", (4, 4)), "buf3": spec("float32", (4, 4))})
        prog.steps = [ExternCall("aten.clone.default", (BufferRef("arg0"),), {}, ("buf1",),
                                 (spec("float32", (4, 4), device=result_device),)),
                      Alloc("buf2"), KernelCall("kernel_0"), Free("buf1"),
                      Alloc("buf3"), KernelCall("kernel_1"), Free("buf2"),
                      Alloc("buf4"), KernelCall("kernel_2"), Free("buf3")]
        planned = plan_reuse(prog)
        ir.validate_program(planned)
        return planned
    assert reuses(build("cpu")) == {"buf3": "buf1", "buf4": "buf2"}
    assert reuses(build("cuda:0")) == {"buf4": "buf2"}       # the output takes only the host's own memory
    x = torch.randn(4, 4)
    got, = run(build("cpu"), [x])
    torch.testing.assert_close(got, x.t() * 30)     # transposed three times

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
from fuse_all_ir import in_place
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


# ---- in place: an output takes the memory of an input that dies with its kernel (fuse_all_ir.in_place) ----

X0, X1, R0 = xvar(0), xvar(1), ir.rvar(0)


def in_place_pairs(prog: ir.Program) -> dict[str, str]:
    """receiver -> donor, for the in-place reuses"""
    return {s.buffer: s.reuse for s in prog.steps if isinstance(s, Alloc) and s.in_place}


def _producer() -> ir.Kernel:
    """buf1 = 2 * arg0 (4x4, host-allocated)"""
    return pointwise("kernel_0", (4, 4), [Load("a", "arg0", 4 * X0 + X1, "float32"), ir.Const("two", 2.0, "float32"),
                                          Compute("b", "mul", ("a", "two"), "float32"), Store("buf1", 4 * X0 + X1, "b")],
                     ["arg0"], ["buf1"])


def _consumer_program(consumer: ir.Kernel, extra_steps=(), buf1_spec=None, outputs=("buf2",)) -> ir.Program:
    """kernel_0 writes buf1 from arg0; `consumer` (kernel_1) reads buf1 (and arg0) and writes buf2, the
    graph output; buf1 dies at kernel_1 unless the graph returns it too."""
    buf1_spec = buf1_spec or spec("float32", (4, 4))
    prog = program("g", "cpu", {"arg0": spec("float32", (4, 4))}, {"buf2": spec("float32", (4, 4))},
                   [_producer(), consumer], temps={"buf1": buf1_spec})
    prog.outputs = [BufferRef(o) for o in outputs]
    freed = [] if "buf1" in outputs else [Free("buf1")]
    prog.steps = [Alloc("buf1"), KernelCall("kernel_0"), *extra_steps, Alloc("buf2"), KernelCall("kernel_1"), *freed]
    return prog


def _pointwise_consumer(index, mask_expr=None) -> ir.Kernel:
    """buf2[x0, x1] = buf1[index] + arg0[x0, x1] (buf1 masked to 0 where `mask_expr` is False)"""
    body = []
    if mask_expr is not None:
        body.append(ir.IndexValue("m", mask_expr, "bool"))
    body += [Load("a", "buf1", index, "float32", mask="m" if mask_expr is not None else None),
             Load("c", "arg0", 4 * X0 + X1, "float32"), Compute("b", "add", ("a", "c"), "float32"),
             Store("buf2", 4 * X0 + X1, "b")]
    return pointwise("kernel_1", (4, 4), body, ["buf1", "arg0"], ["buf2"])


def _planned(prog: ir.Program) -> ir.Program:
    planned = plan_reuse(prog)
    ir.validate_program(planned)
    return planned


def test_a_pointwise_kernel_writes_in_place_of_an_input_dying_with_it():
    x = torch.randn(4, 4)
    planned = _planned(_consumer_program(_pointwise_consumer(4 * X0 + X1)))
    assert in_place_pairs(planned) == {"buf2": "buf1"}
    kernel = planned.kernels["kernel_1"]
    assert kernel.in_place == (("buf2", "buf1"),) and kernel.inputs == ("arg0",)   # read through buf2
    assert not any(isinstance(s, Free) and s.buffer == "buf1" for s in planned.steps)
    source = ir.render_host_program(planned, CppTarget())
    assert "buf2 = buf1; del buf1  # reuses buf1 in place" in source
    assert source.count("empty_strided_cpu(") == 2      # buf1 only, in `call` and `_call_profiled`
    assert "in place: buf2 holds buf1's values" in ir.format_program(planned)
    from fuse_all import provenance
    assert provenance.kernel_bytes(planned, kernel) == 3 * 64     # arg0 read; buf2 read, then written
    got, = run(planned, [x])
    torch.testing.assert_close(got, 2 * x + x)


def _reduction_kernel(loops, reduction=(4,), outer=(4,)) -> ir.Kernel:
    return ir.Kernel("kernel_1", tuple(sympy.sympify(n) for n in outer), tuple(sympy.sympify(n) for n in reduction),
                     loops, ("buf1",), ("buf2",), ())


def test_a_row_reduction_reading_the_element_it_later_writes_is_in_place():
    """buf2 = buf1 - sum(buf1, -1): each row is read whole (phase 0) before any of it is written (phase
    1), by the one kernel point that owns the row."""
    kernel = _reduction_kernel([
        ir.Loop(True, [Load("a", "buf1", 4 * X0 + R0, "float32"), ir.Reduce("s", "sum", "a", "float32")]),
        ir.Loop(True, [Load("b", "buf1", 4 * X0 + R0, "float32"), Compute("c", "sub", ("b", "s"), "float32"),
                       Store("buf2", 4 * X0 + R0, "c")])])
    planned = _planned(_consumer_program(kernel))
    assert in_place_pairs(planned) == {"buf2": "buf1"}
    x = torch.randn(4, 4)
    got, = run(planned, [x])
    torch.testing.assert_close(got, 2 * x - (2 * x).sum(-1, keepdim=True))


def _split_like_program(second_reads: str) -> ir.Program:
    """kernel_1 (buf2 = buf1 + arg0) then kernel_2 (buf3 = `second_reads`), then buf1's Free: the shape of a
    split reduction, whose final kernel runs between the partial kernel and the frees (column_split)."""
    second = pointwise("kernel_2", (4, 4), [Load("a", second_reads, 4 * X0 + X1, "float32"),
                                            Store("buf3", 4 * X0 + X1, "a")], [second_reads], ["buf3"])
    prog = program("g", "cpu", {"arg0": spec("float32", (4, 4))},
                   {"buf2": spec("float32", (4, 4)), "buf3": spec("float32", (4, 4))},
                   [_producer(), _pointwise_consumer(4 * X0 + X1), second], temps={"buf1": spec("float32", (4, 4))})
    prog.outputs = [BufferRef("buf2"), BufferRef("buf3")]
    prog.steps = [Alloc("buf1"), KernelCall("kernel_0"), Alloc("buf2"), Alloc("buf3"), KernelCall("kernel_1"),
                  KernelCall("kernel_2"), Free("buf1")]
    return prog


def test_in_place_across_a_kernel_that_does_not_read_the_donor():
    planned = _planned(_split_like_program("arg0"))
    assert in_place_pairs(planned) == {"buf2": "buf1"}
    x = torch.randn(4, 4)
    buf2, buf3 = run(planned, [x])
    torch.testing.assert_close(buf2, 3 * x)
    torch.testing.assert_close(buf3, x)
    # the kernel in between reads the donor: it is not dead after kernel_1
    planned = _planned(_split_like_program("buf1"))
    assert not in_place_pairs(planned)
    buf2, buf3 = run(planned, [x])
    torch.testing.assert_close(buf3, 2 * x)


def _refused(consumer=None, reason: str = "", **kwargs) -> ir.Program:
    prog = _consumer_program(consumer if consumer is not None else _pointwise_consumer(4 * X0 + X1), **kwargs)
    planned = _planned(prog)
    assert not in_place_pairs(planned), reason
    if consumer is not None:
        rewritten = in_place.rewrite(prog.kernels["kernel_1"], "buf2", "buf1")
        assert in_place.refusal(rewritten, "buf2") is not None, reason
    return planned


def test_in_place_is_refused_for_a_transposed_read():
    planned = _refused(_pointwise_consumer(4 * X1 + X0), "buf2[i, j] needs buf1[j, i], which another point overwrites")
    x = torch.randn(4, 4)
    torch.testing.assert_close(run(planned, [x])[0], 2 * x.t() + x)


def test_in_place_is_refused_for_a_broadcast_read():
    planned = _refused(_pointwise_consumer(4 * X0), "buf1[i, 0] is read by every point of row i")
    x = torch.randn(4, 4)
    torch.testing.assert_close(run(planned, [x])[0], 2 * x[:, :1] + x)


def test_in_place_is_refused_for_a_shifted_read():
    planned = _refused(_pointwise_consumer(4 * X0 + X1 + 1, sympy.Lt(X1, 3)), "buf1[i, j + 1] is another point's")
    x = torch.randn(4, 4)
    shifted = torch.nn.functional.pad((2 * x)[:, 1:], (0, 1))
    torch.testing.assert_close(run(planned, [x])[0], shifted + x)


def test_in_place_is_refused_for_a_reduction_read():
    """buf2[i, j] = buf1[i, j] * sum_k buf1[j, k]: the reduction reads rows other points write"""
    kernel = ir.Kernel("kernel_1", (sympy.Integer(4), sympy.Integer(4)), (sympy.Integer(4),), [
        ir.Loop(True, [Load("a", "buf1", 4 * X1 + R0, "float32"), ir.Reduce("s", "sum", "a", "float32")]),
        ir.Loop(False, [Load("b", "buf1", 4 * X0 + X1, "float32"), Compute("c", "mul", ("b", "s"), "float32"),
                        Store("buf2", 4 * X0 + X1, "c")])], ("buf1",), ("buf2",), ())
    planned = _refused(kernel, "a reduction over other points' elements")
    x = torch.randn(4, 4)
    torch.testing.assert_close(run(planned, [x])[0], 2 * x * (2 * x).sum(-1)[None, :])


def test_in_place_is_refused_for_a_read_after_the_write():
    kernel = pointwise("kernel_1", (4, 4), [
        Load("a", "buf1", 4 * X0 + X1, "float32"), Compute("b", "neg", ("a",), "float32"),
        Store("buf2", 4 * X0 + X1, "b"), Load("c", "buf1", 4 * X0 + X1, "float32"),
        Compute("d", "add", ("b", "c"), "float32"), Store("buf3", 4 * X0 + X1, "d")], ["buf1"], ["buf2", "buf3"])
    prog = _consumer_program(kernel)
    prog.buffers["buf3"] = spec("float32", (4, 4))
    prog.steps.insert(prog.steps.index(Alloc("buf2")) + 1, Alloc("buf3"))
    planned = _planned(prog)
    assert in_place_pairs(planned) == {"buf3": "buf1"}      # buf3's store comes after every read of buf1
    x = torch.randn(4, 4)
    torch.testing.assert_close(run(planned, [x])[0], -2 * x)
    assert planned.kernels["kernel_1"].in_place == (("buf3", "buf1"),)
    assert in_place.refusal(in_place.rewrite(kernel, "buf2", "buf1"), "buf2") is not None


def test_in_place_is_refused_for_a_graph_input_an_output_or_an_alias():
    # a graph input: the kernel reads arg0 at the element it writes, and arg0 dies with it
    kernel = pointwise("kernel_1", (4, 4), [Load("a", "arg0", 4 * X0 + X1, "float32"), Compute("b", "neg", ("a",), "float32"),
                                            Store("buf2", 4 * X0 + X1, "b")], ["arg0"], ["buf2"])
    prog = program("g", "cpu", {"arg0": spec("float32", (4, 4))}, {"buf2": spec("float32", (4, 4))}, [kernel])
    prog.steps = [Alloc("buf2"), KernelCall("kernel_1"), Free("arg0")]
    assert not in_place_pairs(_planned(prog))
    # buf1 returned too: the caller keeps it
    x = torch.randn(4, 4)
    planned = _refused(outputs=("buf2", "buf1"), reason="a graph output")
    got, kept = run(planned, [x])
    torch.testing.assert_close(kept, 2 * x)
    torch.testing.assert_close(got, 3 * x)
    # an ATen view of buf1 taken earlier (still live for all the plan knows)
    view = ExternCall("aten.view.default", (BufferRef("buf1"), [16]), {}, ("buf5",), (spec("float32", (16,)),))
    planned = _refused(extra_steps=[view], reason="a view of it may be live")
    torch.testing.assert_close(run(planned, [x])[0], 3 * x)
    # another layout over the same elements (buf1 column-major, read at the element of buf2 it matches)
    transposed = spec("float32", (4, 4), (1, 4))
    producer_t = dataclasses.replace(_producer(), loops=[ir.Loop(False, [
        Load("a", "arg0", 4 * X0 + X1, "float32"), ir.Const("two", 2.0, "float32"),
        Compute("b", "mul", ("a", "two"), "float32"), Store("buf1", X0 + 4 * X1, "b")])])
    prog = _consumer_program(_pointwise_consumer(X0 + 4 * X1), buf1_spec=transposed)
    prog.kernels["kernel_0"] = producer_t
    planned = _planned(prog)
    assert not in_place_pairs(planned)
    torch.testing.assert_close(run(planned, [x])[0], 3 * x)


def test_the_validator_checks_every_in_place_reuse():
    good = _planned(_consumer_program(_pointwise_consumer(4 * X0 + X1)))
    kernel = good.kernels["kernel_1"]

    def rejected(prog, words):
        try:
            ir.validate_program(prog)
        except ir.InvalidProgram as e:
            assert words in str(e), str(e)
        else:
            raise AssertionError(f"validation passed; expected {words!r}")

    # the kernel transposes what it reads through its output
    transposed = dataclasses.replace(kernel, loops=[ir.Loop(False, [
        dataclasses.replace(s, index=4 * X1 + X0) if isinstance(s, Load) and s.buffer == "buf2" else s
        for s in kernel.loops[0].body])])
    rejected(dataclasses.replace(good, kernels={**good.kernels, "kernel_1": transposed}), "not the element it writes")
    # an in-place Alloc whose kernel reads the donor directly (not rewritten)
    direct = dataclasses.replace(_pointwise_consumer(4 * X0 + X1), in_place=(("buf2", "buf1"),))
    rejected(dataclasses.replace(good, kernels={**good.kernels, "kernel_1": direct}), "still reads 'buf1' directly")
    # a kernel that reads through its output with no in-place Alloc before it: uninitialised memory
    steps = [Alloc("buf2") if isinstance(s, Alloc) and s.in_place else s for s in good.steps] + [Free("buf1")]
    rejected(dataclasses.replace(good, steps=steps), "did not take 'buf1''s memory in place")
    # the donor read after its kernel: it is dead
    reader = pointwise("kernel_2", (4, 4), [Load("a", "buf1", 4 * X0 + X1, "float32"), Store("buf3", 4 * X0 + X1, "a")],
                       ["buf1"], ["buf3"])
    later = dataclasses.replace(good, kernels={**good.kernels, "kernel_2": reader},
                                buffers={**good.buffers, "buf3": spec("float32", (4, 4))},
                                steps=good.steps + [Alloc("buf3"), KernelCall("kernel_2")])
    rejected(later, "freed")
    # in place of a buffer an ATen call may alias
    view = ExternCall("aten.view.default", (BufferRef("buf1"), [16]), {}, ("buf5",), (spec("float32", (16,)),))
    at = good.steps.index(KernelCall("kernel_0")) + 1
    rejected(dataclasses.replace(good, steps=good.steps[:at] + [view] + good.steps[at:]), "may alias")
    # other layouts: in place needs exactly the same strides
    other = dataclasses.replace(good, buffers={**good.buffers, "buf1": spec("float32", (4, 4), (1, 4))})
    rejected(other, "exactly its layout")


def test_in_place_needs_a_provably_injective_index():
    s0 = ir.size_symbol("s0")
    assert in_place._not_injective(4 * X0 + X1, [X0, X1], [4, 4], {}) is None
    assert in_place._not_injective(s0 * X0 + X1, [X0, X1], [3, s0], {}) is None
    assert in_place._not_injective(X0 + 4 * X1, [X0, X1], [4, 4], {}) is None
    assert in_place._not_injective(2 * X0 + X1, [X0, X1], [4, 4], {}) is not None      # overlapping rows
    assert in_place._not_injective(X0, [X0, X1], [4, 4], {}) is not None               # x1 unused
    assert in_place._not_injective(X0, [X0, X1], [4, 1], {}) is None                   # x1 has one value
    assert in_place._not_injective(ir.FloorDiv(X0, 2), [X0], [4], {}) is not None
    assert in_place._not_injective(s0 * X0 + X1, [X0, X1], [3, s0 + 1], {}) is not None


def test_kernel_bytes_of_every_kernel_at_once_uses_size_hints_for_symbolic_sizes():
    """`kernels_bytes` (the backend's per-graph call) looks the program's buffers up once and gives what
    `kernel_bytes` gives kernel by kernel; a symbolic extent counts at its hint, an unknown one gives None."""
    from types import SimpleNamespace

    import sympy

    from fuse_all import provenance
    s0, s1 = sympy.Symbol("s0", integer=True, positive=True), sympy.Symbol("s1", integer=True, positive=True)
    spec = lambda size: SimpleNamespace(size=size, dtype="float32")   # noqa: E731
    program = SimpleNamespace(inputs=[SimpleNamespace(name="arg0", spec=spec((s0, 4)))], steps=[],
                              buffers={"buf1": spec((s0, 4)), "buf2": spec((s1,)), "buf3": spec((8,))},
                              size_hints={s0: 3})
    kernels = [SimpleNamespace(name="k0", inputs=("arg0",), outputs=("buf1",), in_place=()),
               SimpleNamespace(name="k1", inputs=("buf1", "buf3"), outputs=("buf3",), in_place=(("buf3", "buf3"),)),
               SimpleNamespace(name="k2", inputs=("buf2",), outputs=("buf3",), in_place=())]
    got = provenance.kernels_bytes(program, kernels)
    assert got == {"k0": 2 * 12 * 4, "k1": (12 + 8 + 8) * 4, "k2": None}
    assert got == {k.name: provenance.kernel_bytes(program, k) for k in kernels}

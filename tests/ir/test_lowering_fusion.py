"""Lowering, fusion legality, scheduling order and the fusion report, on small ATen graphs."""
from __future__ import annotations

import torch

import fuse_all_ir as ir
from torch.fx.experimental.proxy_tensor import make_fx
from ir_testing import lower


def kinds(compiled) -> dict:
    return {name: node.kind for name, node in compiled.lowered.nodes.items()}


def steps(program) -> list[str]:
    out = []
    for s in program.steps:
        if isinstance(s, ir.KernelCall):
            out.append(f"call {s.kernel}")
        elif isinstance(s, ir.ExternCall):
            out.append(f"aten {s.target}")
        elif isinstance(s, ir.Alloc):
            out.append(f"alloc {s.buffer}")
        else:
            out.append(f"free {s.buffer}")
    return out


# ---- lowering ---------------------------------------------------------------------------------------

def test_a_pointwise_chain_lowers_to_one_expression(nonzero):
    compiled = lower(lambda x: (x.sin().cos() * 2,), nonzero(8, 16))
    compute = [n for n in compiled.lowered.nodes.values() if n.is_compute]
    assert [n.kind for n in compute] == ["pointwise"]          # sin, cos and mul compose into one buffer
    assert [op for op, _ in compiled.lowered.inlined] == ["aten.sin.default", "aten.cos.default", "aten.mul.Tensor"]
    text = ir.format_lowered(compiled.lowered)
    assert "sin(" in text and "cos(" in text and "mul(" in text


def test_a_reduction_becomes_a_reduction_node_with_its_space(nonzero):
    compiled = lower(lambda x: (x.sum(1),), nonzero(8, 16))
    (node,) = [n for n in compiled.lowered.nodes.values() if n.is_compute]
    assert node.kind == "reduction" and node.reduction_op == "sum"
    assert tuple(int(s) for s in node.spec.size) == (8,) and tuple(int(s) for s in node.reduction_size) == (16,)


def test_an_op_without_lowering_becomes_an_extern_call_with_its_reason(nonzero):
    compiled = lower(lambda x: (x.relu().cumsum(0).exp(),), nonzero(8, 16))
    assert sorted(kinds(compiled).values()).count("extern") == 1
    (extern,) = compiled.lowered.externs
    assert extern.target == "aten.cumsum.default" and "no lowering" in extern.reason
    assert "aten.cumsum.default" not in ir.lowered_ops() and "aten.add.Tensor" in ir.lowered_ops()


def test_a_matrix_product_stays_in_aten_unless_the_target_lowers_small_ones(nonzero):
    """Target-neutral choices keep every product in ATen, with the reason; a target's `small_matmul_rows`
    lowers a skinny one to a reduction (lowerings_matmul.py)."""
    fn, inputs = (lambda x, w: ((x.relu() @ w).exp(),)), (nonzero(8, 16), nonzero(16, 4))
    (extern,) = lower(fn, *inputs).lowered.externs
    assert extern.target == "aten.mm.default" and "keeps matrix products in ATen" in extern.reason
    assert "aten.mm.default" not in ir.lowered_ops()

    class Small(ir.FusionChoices):
        small_matmul_rows = 4
    compiled = ir.lower(make_fx(fn)(*inputs), inputs, "g", validate=True, choices=Small())
    assert compiled.lowered.externs == [] and "aten.mm.default" in ir.lowered_ops(Small())
    assert [n.kind for n in compiled.lowered.nodes.values() if n.is_compute].count("reduction") == 1


def test_lowered_values_match_eager(nonzero):
    """The lowered graph compiles (C++) to the eager result: a guard that the small graphs above are real."""
    from fuse_all_codegen_cpp import CppTarget
    x = nonzero(8, 16)
    program = lower(lambda x: (torch.softmax(x, -1),), x).program
    module = ir.load_host_program(ir.render_host_program(program, CppTarget()))
    (out,) = module.call([x])
    torch.testing.assert_close(out, torch.softmax(x, -1))


# ---- fusion legality ----------------------------------------------------------------------------------

def test_softmax_fuses_its_two_reductions_and_epilogue_into_one_kernel(nonzero):
    program = lower(lambda x: (torch.softmax(x, -1),), nonzero(8, 16)).program
    assert list(program.kernels) == ["kernel_0"]
    kernel = program.kernels["kernel_0"]
    assert kernel.kind == "reduction"
    assert sorted(s.op for s in kernel.statements() if isinstance(s, ir.Reduce)) == ["max", "sum"]
    assert len(kernel.outputs) == 1                                          # only the result is stored
    assert program.report.rejected == []


def test_a_reduction_fuses_its_pointwise_epilogue(nonzero):
    program = lower(lambda x: (x.sum(0) + 1,), nonzero(8, 16)).program
    (kernel,) = program.kernels.values()
    assert len(kernel.fused_nodes) == 2


def test_different_iteration_spaces_are_rejected_with_that_reason(nonzero):
    # a column sum is computed per column (16) x reduce (8); its broadcast over (5, 16) cannot join it
    program = lower(lambda x, y: (x.sum(0, keepdim=True) + y,), nonzero(8, 16), nonzero(5, 16)).program
    assert len(program.kernels) == 2
    assert [r["reason"] for r in program.report.rejected] == [
        "different iteration spaces: (5, 16) vs (16) x reduce (8)"]


def test_a_column_broadcast_joins_the_column_reduction_in_its_order(nonzero):
    # the broadcast back over (8, 16) walks the column sum's space as (r0, x0): one kernel, right values
    x = nonzero(8, 16)
    program = lower(lambda x: (x.sum(0, keepdim=True) + x,), x).program
    (kernel,) = program.kernels.values()
    assert program.report.rejected == []
    from fuse_all_codegen_cpp import CppTarget
    (out,) = ir.load_host_program(ir.render_host_program(program, CppTarget())).call([x])
    torch.testing.assert_close(out, x.sum(0, keepdim=True) + x)


def test_a_row_broadcast_shares_the_reduction_kernel(nonzero):
    # a row sum's outer space (8) splits (8, 16) as outer x reduction: the epilogue fuses ("regroup")
    program = lower(lambda x: (x.sum(1, keepdim=True) + x,), nonzero(8, 16)).program
    assert len(program.kernels) == 1 and program.report.rejected == []


def test_a_reduction_of_a_reduction_is_two_kernels(nonzero):
    program = lower(lambda x: (x.sum(1).sum(0),), nonzero(8, 16)).program
    assert [r["reason"] for r in program.report.rejected] == [
        "different iteration spaces: () x reduce (8) vs (8) x reduce (16)"]


def test_an_aten_call_between_producer_and_consumer_keeps_them_apart_with_reasons(nonzero):
    program = lower(lambda x, w: ((x.relu() @ w).exp(),), nonzero(8, 16), nonzero(16, 4)).program
    reasons = {(r["producer"], r["consumer"]): r["reason"] for r in program.report.rejected}
    assert any("consumer is an ATen call (aten.mm.default)" in r for r in reasons.values())
    assert any("producer is an ATen call (aten.mm.default)" in r for r in reasons.values())


def test_fusion_would_create_a_cycle_is_refused(nonzero):
    # y = relu(x); m = mm(y, w) (ATen); out = y[:, :4] + m: fusing `out` into y's kernel would need m first
    def fn(x, w):
        y = x.relu()
        return (y[:, :4] + y @ w,)
    program = lower(fn, nonzero(8, 16), nonzero(16, 4)).program
    order = steps(program)
    aten = order.index("aten aten.mm.default")
    calls = [i for i, s in enumerate(order) if s.startswith("call ")]
    assert calls[0] < aten < calls[-1]          # producer kernel, the ATen call, then the consumer kernel


# ---- scheduling -------------------------------------------------------------------------------------

def test_schedule_allocates_before_the_call_and_frees_after_the_last_use(nonzero):
    program = lower(lambda x, w: ((x.relu() @ w).exp(),), nonzero(8, 16), nonzero(16, 4)).program
    assert steps(program) == ["alloc buf1", "call kernel_0", "aten aten.mm.default", "free buf1",
                              "alloc buf3", "call kernel_1", "free buf2"]
    assert [o.name for o in program.outputs] == ["buf3"]


def test_independent_kernels_keep_graph_order(nonzero):
    program = lower(lambda x: (x.sum(0) + 1, x.t().contiguous().sum(0)), nonzero(8, 16)).program
    assert [s for s in steps(program) if s.startswith("call")] == ["call kernel_0", "call kernel_1"]
    assert [o.name for o in program.outputs] == [program.kernels["kernel_0"].outputs[0],
                                                 program.kernels["kernel_1"].outputs[0]]


# ---- the report ---------------------------------------------------------------------------------------

def test_the_report_describes_every_kernel_and_aten_call(nonzero):
    program = lower(lambda x, w: ((x.relu() @ w).exp(),), nonzero(8, 16), nonzero(16, 4)).program
    report = program.report
    assert [g["kernel"] for g in report.groups] == list(program.kernels)
    assert [g["aten_ops"] for g in report.groups] == [["aten.relu.default"], ["aten.exp.default"]]
    assert [e["target"] for e in report.externs] == ["aten.mm.default"]
    text = report.to_text()
    assert text.startswith("fusion report: 2 kernels, 1 ATen calls")
    assert "kernel_0: pointwise over (8, 16)" in text and "not fused:" in text
    as_json = report.to_json()
    assert len(as_json["groups"]) == 2 and len(as_json["rejected"]) == len(report.rejected) == 2

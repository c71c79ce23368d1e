"""Sibling (horizontal) fusion: kernels with no data dependence between them, over one iteration space,
merge when they read common buffers (or are both small); never across a dependence path, never over
different ranges. Legality (`legality.check_sibling_fusion`), the heuristic (`FusionChoices.should_fuse_
siblings` and its hooks) and the report's reasons."""
from __future__ import annotations

import torch

import fuse_all_ir as ir
from fuse_all_ir.fusion import FusionPass
from fuse_all_ir.kernelgen import Group, iteration_ranges
from fuse_all_ir.legality import check_sibling_fusion
from ir_testing import lower


def traced(fn, *inputs):
    from torch.fx.experimental.proxy_tensor import make_fx
    return make_fx(fn)(*inputs), list(inputs), "g"


def run_cpp(program, inputs):
    from fuse_all_codegen_cpp import CppTarget
    module = ir.load_host_program(ir.render_host_program(program, CppTarget()))
    return module.call(list(inputs))


def reduces(kernel) -> list:
    return sorted(s.op for s in kernel.statements() if isinstance(s, ir.Reduce))


def batchnorm_backward_sums(g, x, mean):
    # the two sums of BatchNorm's backward: same (C) x (N, H, W) space, both read g
    centered = x - mean[None, :, None, None]
    return g.sum((0, 2, 3)), (g * centered).sum((0, 2, 3))


def test_two_reductions_reading_one_buffer_become_one_kernel(nonzero):
    g, x, mean = nonzero(2, 3, 4, 5), nonzero(2, 3, 4, 5), nonzero(3)
    program = lower(batchnorm_backward_sums, g, x, mean).program
    (kernel,) = program.kernels.values()
    assert reduces(kernel) == ["sum", "sum"] and len(kernel.outputs) == 2
    loads_of_g = [s for s in kernel.statements() if isinstance(s, ir.Load) and s.buffer == "arg0"]
    assert len(loads_of_g) == 1                       # g is read once for both sums
    (group,) = program.report.groups
    assert "siblings" in group["why"] and "both read arg0" in group["why"]
    expected = batchnorm_backward_sums(g, x, mean)
    for got, want in zip(run_cpp(program, [g, x, mean]), expected):
        torch.testing.assert_close(got, want)


def test_pointwise_outputs_of_one_input_share_a_kernel(nonzero):
    x = nonzero(64, 96)
    program = lower(lambda x: (x.sin(), x.cos() * 2), x).program
    (kernel,) = program.kernels.values()
    assert len(kernel.outputs) == 2 and kernel.inputs == ("arg0",)
    sin, cos = run_cpp(program, [x])
    torch.testing.assert_close(sin, x.sin())
    torch.testing.assert_close(cos, x.cos() * 2)


def test_a_pointwise_kernel_joins_a_reduction_over_its_full_space(nonzero):
    # exp over (8, 16) and the row sums (8) x (16) both read x: the exp stores from the reduction phase
    x = nonzero(8, 16)
    program = lower(lambda x: (x.exp(), x.sum(1)), x).program
    (kernel,) = program.kernels.values()
    assert reduces(kernel) == ["sum"] and len(kernel.outputs) == 2
    e, s = run_cpp(program, [x])
    torch.testing.assert_close(e, x.exp())
    torch.testing.assert_close(s, x.sum(1))


# ---- legality ---------------------------------------------------------------------------------------------

def test_no_sibling_fusion_across_a_dependence_path(nonzero):
    # a = x.sum(1) and c = (x * m).sum(1) read x over one space, but m = mm(a-based matrix) is an ATen call
    # reading a's kernel: c's kernel needs the mm, which needs a's kernel -- one kernel cannot hold both
    def fn(x, w):
        a = x.sum(1, keepdim=True)
        m = (a * w) @ w.t()
        return a, (x * m).sum(1)
    x, w = nonzero(8, 8), nonzero(8, 8)
    program = lower(fn, x, w).program
    row_sums = [k for k in program.kernels.values() if k.reduction]
    assert len(row_sums) == 2
    reasons = [s["reason"] for s in program.report.siblings_kept_apart]
    assert "one kernel depends on the other through another kernel or ATen call" in reasons
    assert "siblings sharing reads, not fused" in program.report.to_text()
    a, c = run_cpp(program, [x, w])
    torch.testing.assert_close(c, (x * ((a * w) @ w.t())).sum(1))


def test_different_reduction_ranges_are_not_fused(nonzero):
    x = nonzero(8, 16)
    program = lower(lambda x: (x.sum(1), x[:, :8].sum(1), x.sum(0)), x).program
    spaces = sorted((tuple(map(int, k.outer)), tuple(map(int, k.reduction))) for k in program.kernels.values())
    assert spaces == [((8,), (8,)), ((8,), (16,)), ((16,), (8,))]


def groups_of(fn, *inputs):
    fusion = FusionPass(lower(fn, *inputs).lowered)
    nodes = [n for n in fusion.order if n.is_compute]
    return fusion, [Group(*iteration_ranges(n), [n]) for n in nodes]


def test_check_sibling_fusion_verdicts(nonzero):
    fusion, (rows, columns, rows_again) = groups_of(lambda x: (x.sum(1), x.sum(0), x.amax(1)), nonzero(8, 16))
    position = fusion.position.__getitem__
    never = lambda a, b: False  # noqa: E731
    stored = {g.members[0].name for g in (rows, columns, rows_again)}
    verdict = check_sibling_fusion(rows, rows_again, fusion.nodes, stored, position, never)
    assert verdict.legal and reduces(verdict.kernel) == ["max", "sum"]
    assert [m.name for m in verdict.merged.members] == sorted(stored - {columns.members[0].name}, key=position)
    verdict = check_sibling_fusion(rows, columns, fusion.nodes, stored, position, never)
    assert verdict.reason == "different iteration spaces: (8) x reduce (16) vs (16) x reduce (8)"
    verdict = check_sibling_fusion(rows, rows_again, fusion.nodes, stored, position, lambda a, b: a is rows_again)
    assert verdict.reason == "one kernel depends on the other through another kernel or ATen call"


# ---- heuristics -------------------------------------------------------------------------------------------

def test_unrelated_large_kernels_stay_apart_small_ones_merge(nonzero):
    class SmallLimit(ir.FusionChoices):
        small_kernel_numel = 100
    fn = lambda x, y: (x.sin(), y.cos())    # noqa: E731 - nothing read in common
    small = ir.lower(*traced(fn, nonzero(8, 8), nonzero(8, 8)), choices=SmallLimit()).program
    assert len(small.kernels) == 1
    assert "both small (64 points): one launch" in small.report.groups[0]["why"]
    large = ir.lower(*traced(fn, nonzero(16, 16), nonzero(16, 16)), choices=SmallLimit()).program
    assert len(large.kernels) == 2


def test_a_target_turns_sibling_fusion_off_or_vetoes_it_with_a_reason(nonzero):
    g, x, mean = nonzero(2, 3, 4, 5), nonzero(2, 3, 4, 5), nonzero(3)

    class Off(ir.FusionChoices):
        sibling_fusion = False

    class Veto(ir.FusionChoices):
        def veto_sibling_fusion(self, first, second, kernel, size_hints):
            return "test target: one reduction per kernel"

    assert len(ir.lower(*traced(batchnorm_backward_sums, g, x, mean), choices=Off()).program.kernels) == 2
    vetoed = ir.lower(*traced(batchnorm_backward_sums, g, x, mean), choices=Veto(), validate=True).program
    assert len(vetoed.kernels) == 2
    assert [s["reason"] for s in vetoed.report.siblings_kept_apart] == ["test target: one reduction per kernel"]


def test_limits_on_outputs_and_inputs(nonzero):
    class OneOutput(ir.FusionChoices):
        max_kernel_outputs = 1
    program = ir.lower(*traced(lambda x: (x.sin(), x.cos()), nonzero(8, 8)), choices=OneOutput()).program
    assert len(program.kernels) == 2
    (kept,) = program.report.siblings_kept_apart
    assert kept["reason"] == "merged kernel would write 2 buffers (limit 1)"

    class TwoInputs(ir.FusionChoices):
        max_kernel_inputs = 2
    program = ir.lower(*traced(lambda x, y, z: (x * y, x * z), nonzero(8, 8), nonzero(8, 8), nonzero(8, 8)),
                       choices=TwoInputs()).program
    assert len(program.kernels) == 2
    assert program.report.siblings_kept_apart[0]["reason"] == "merged kernel would read 3 buffers (limit 2)"


def test_split_reductions_take_a_pointwise_sibling_not_a_store_only_phase(nonzero, monkeypatch):
    # where a target splits reductions over programs, a pointwise sibling over the reduction's full space
    # joins the reduction: the split's partial kernel stores it (each element is in exactly one chunk)
    class Splitting(ir.FusionChoices):
        split_reductions = True
    monkeypatch.setenv("FUSE_ALL_COLUMN_SPLITS", "2")
    x = nonzero(8, 16)
    program = ir.lower(*traced(lambda x: (x.exp(), x.sum(1)), x), choices=Splitting()).program
    assert not program.report.siblings_kept_apart
    (partial,) = [k for k in program.kernels.values() if k.name.endswith("_part0")]
    assert reduces(partial) == ["sum"] and len(program.kernels) == 2
    assert any(not out.startswith(partial.name) for out in partial.outputs)   # the exp's buffer
    program = ir.lower(*traced(lambda x: (x.sum(1), x.amax(1)), x), choices=Splitting()).program
    (partial,) = [k for k in program.kernels.values() if k.name.endswith("_part0")]
    assert reduces(partial) == ["max", "sum"]
    # a phase that only stores (softmax's normalisation) has nothing to combine: that kernel stays whole
    program = ir.lower(*traced(lambda x: (torch.softmax(x, 1),), x), choices=Splitting()).program
    assert not any("_part" in name for name in program.kernels)


def test_kernels_one_aten_call_reads_together_merge(nonzero):
    # sin(x) and cos(y) share nothing, but the matmul reads both: their results are needed at once
    class NotSmall(ir.FusionChoices):
        small_kernel_numel = 0
    x, y = nonzero(16, 16), nonzero(16, 16)
    program = ir.lower(*traced(lambda x, y: (x.sin() @ y.cos(),), x, y), choices=NotSmall(), validate=True).program
    (kernel,) = program.kernels.values()
    assert len(kernel.outputs) == 2
    assert "both feed one ATen call: one launch" in program.report.groups[0]["why"]
    (out,) = run_cpp(program, [x, y])
    torch.testing.assert_close(out, x.sin() @ y.cos())
    # returned separately, nothing reads them together: two kernels
    apart = ir.lower(*traced(lambda x, y: (x.sin(), y.cos()), x, y), choices=NotSmall()).program
    assert len(apart.kernels) == 2

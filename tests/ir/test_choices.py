"""Fusion legality in one place (`legality.check_fusion`) and the heuristics object (`FusionChoices`):
its limits, a target's veto and its kernel-shape hook."""
from __future__ import annotations

import torch

import fuse_all_ir as ir
from fuse_all_ir.fusion import FusionPass
from fuse_all_ir.kernelgen import Group, iteration_ranges
from fuse_all_ir.legality import check_fusion
from ir_testing import lower


def compute_nodes(fn, *inputs):
    """The live compute nodes of `fn`'s lowered graph (reads filled in) and a unit_of with no groups yet."""
    fusion = FusionPass(lower(fn, *inputs).lowered)
    return fusion, [n for n in fusion.order if n.is_compute]


def alone(node) -> Group:
    outer, red = iteration_ranges(node)
    return Group(outer, red, [node])


# ---- legality ---------------------------------------------------------------------------------------

def test_a_legal_fusion_gives_the_merged_group_and_its_kernel(nonzero):
    fusion, (reduction, epilogue) = compute_nodes(lambda x: (x.sum(1) * 2,), nonzero(8, 16))
    verdict = check_fusion(alone(reduction), epilogue, fusion.nodes, lambda name: name)
    assert verdict.legal and verdict.reason is None
    assert [m.name for m in verdict.merged.members] == [reduction.name, epilogue.name]
    assert [s.op for s in verdict.kernel.statements() if isinstance(s, ir.Reduce)] == ["sum"]


def test_different_iteration_spaces_are_illegal(nonzero):
    fusion, (column_sum, broadcast) = compute_nodes(lambda x, y: (x.sum(0, keepdim=True) + y,), nonzero(8, 16),
                                                    nonzero(5, 16))
    verdict = check_fusion(alone(column_sum), broadcast, fusion.nodes, lambda name: name)
    assert not verdict.legal and verdict.merged is None
    assert verdict.reason == "different iteration spaces: (5, 16) vs (16) x reduce (8)"


def test_a_pointwise_node_over_the_reductions_space_in_another_order_joins_it(nonzero):
    # x.sum(0) + x: the column sums loop x0 over columns, r0 over rows; the add walks (rows, columns)
    fusion, (column_sum, broadcast) = compute_nodes(lambda x: (x.sum(0, keepdim=True) + x,), nonzero(8, 16))
    verdict = check_fusion(alone(column_sum), broadcast, fusion.nodes, lambda name: name)
    assert verdict.legal and [str(v) for v in verdict.merged.full_vars] == ["r0", "x0"]


def test_a_fusion_through_an_aten_call_that_reads_the_group_is_a_cycle(nonzero):
    # y = relu(x); m = y @ w (ATen); out = y + m: `out` in y's kernel would need m, which needs y's kernel
    fusion, (y, out) = compute_nodes(lambda x, w: (x.relu() + x.relu() @ w,), nonzero(8, 16), nonzero(16, 16))
    group = alone(y)
    verdict = check_fusion(group, out, fusion.nodes, lambda name: group if name == y.name else name)
    assert verdict.reason == "fusing would create a cycle through another kernel or ATen call"


def test_a_kernel_that_cannot_be_built_is_illegal_with_the_builders_reason(nonzero):
    # the rotated row sums read the reduction at another row than the one being computed
    program = lower(lambda x: (torch.cat([x.sum(1)[1:], x.sum(1)[:1]]) * 2,), nonzero(8, 16)).program
    reasons = [r["reason"] for r in program.report.rejected]
    assert reasons and all(r.startswith("reads reduction buf") and "of another row" in r for r in reasons)


# ---- heuristics: FusionChoices --------------------------------------------------------------------------

class NoEpilogues(ir.FusionChoices):
    def veto_fusion(self, group, node, kernel):
        if any(m.kind == "reduction" for m in group.members) and node.kind != "reduction":
            return "test target: reductions take no epilogue"
        return None


def test_the_neutral_choices_are_what_lower_uses_by_default(nonzero):
    x = nonzero(8, 16)
    plain = lower(lambda x: (torch.softmax(x, -1),), x).program
    explicit = ir.lower(*traced(lambda x: (torch.softmax(x, -1),), x), choices=ir.FusionChoices()).program
    assert list(plain.kernels) == list(explicit.kernels) == ["kernel_0"]


def test_a_target_veto_keeps_a_legal_fusion_apart_with_its_reason(nonzero):
    x = nonzero(8, 16)
    program = ir.lower(*traced(lambda x: (x.sum(1) * 2,), x), choices=NoEpilogues(), validate=True).program
    assert len(program.kernels) == 2
    assert [r["reason"] for r in program.report.rejected] == ["test target: reductions take no epilogue"]
    module = ir.load_host_program(ir.render_host_program(program, cpp_target()))
    (out,) = module.call([x])
    torch.testing.assert_close(out, x.sum(1) * 2)


def test_the_veto_does_not_stop_fusions_it_allows(nonzero):
    # softmax: max, sum and the epilogue; the veto refuses the epilogues, the two reductions stay fused
    program = ir.lower(*traced(lambda x: (torch.softmax(x, -1),), nonzero(8, 16)), choices=NoEpilogues()).program
    reductions = [k for k in program.kernels.values() if k.kind == "reduction"]
    assert len(reductions) == 1
    assert sorted(s.op for s in reductions[0].statements() if isinstance(s, ir.Reduce)) == ["max", "sum"]


def test_a_target_limit_on_kernel_size_is_a_reason(nonzero):
    class Tiny(ir.FusionChoices):
        max_kernel_statements = 3
    program = ir.lower(*traced(lambda x: (x.sum(1) * 2,), nonzero(8, 16)), choices=Tiny()).program
    assert len(program.kernels) == 2
    (rejected,) = program.report.rejected
    assert rejected["reason"].startswith("fused kernel would have ") and rejected["reason"].endswith("(limit 3)")


def test_the_kernel_shape_hook_answers_per_kernel(nonzero):
    program = lower(lambda x: (x.sin(), x.sum(0)), nonzero(8, 16)).program   # no one space: 2 kernels
    shapes = sorted(ir.FusionChoices().choose_kernel_shape(k).kind for k in program.kernels.values())
    assert shapes == ["pointwise", "reduction"]


def traced(fn, *inputs):
    from torch.fx.experimental.proxy_tensor import make_fx
    return make_fx(fn)(*inputs), list(inputs), "g"


def cpp_target():
    from fuse_all_codegen_cpp import CppTarget
    return CppTarget()


_FUSE_IN_A_FRESH_PROCESS = """
import torch, fuse_all
def layer(x, w):
    a = torch.relu(x @ w)
    b = a.sum(-1, keepdim=True)
    return torch.softmax(a - b, -1).cos() + x.mean()
torch.manual_seed(0)
x, w = torch.randn(8, 16), torch.randn(16, 16, requires_grad=True)
torch.compile(layer, backend="fuse_all")(x, w).sum().backward()
print([[k.fused_nodes for k in g.kernels] for g in fuse_all.compiled_graphs()])
"""


def test_fusion_does_not_depend_on_the_string_hash_seed():
    """Ties between candidate producer groups are broken in graph order, not in the order of a set of
    names (which changes per process with PYTHONHASHSEED: seed 3 fused this forward differently)."""
    import os
    import subprocess
    import sys
    results = set()
    for seed in ("1", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", _FUSE_IN_A_FRESH_PROCESS], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        results.add(done.stdout.strip().splitlines()[-1])
    assert len(results) == 1

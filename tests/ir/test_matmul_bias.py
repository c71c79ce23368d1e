"""`unfuse_matmul_bias`: which `addmm`s become `mm` + a bias add, and that the rewritten graph computes the same."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import fuse_all_ir as ir
from fuse_all_ir.matmul_bias import unfuse_matmul_bias

aten = torch.ops.aten


def _targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def _inputs(*shapes):
    return [torch.randn(s) for s in shapes]


CASES = {
    # name: (fn, shapes, addmms left after the rewrite)
    "gelu": (lambda x, w, b: F.gelu(F.linear(x, w, b)), [(6, 8), (5, 8), (5,)], 0),
    "residual_layernorm": (lambda x, w, b: F.layer_norm(F.linear(x, w, b) + x[:, :5], (5,)), [(6, 8), (5, 8), (5,)], 0),
    "3d_input_view_then_add": (lambda x, w, b: F.linear(x, w, b) * 2, [(2, 3, 8), (5, 8), (5,)], 0),
    "returned": (lambda x, w, b: F.linear(x, w, b), [(6, 8), (5, 8), (5,)], 1),
    "returned_and_pointwise": (lambda x, w, b: (lambda y: (y, y.relu()))(F.linear(x, w, b)), [(6, 8), (5, 8), (5,)], 1),
    "feeds_a_matmul": (lambda x, w, b: F.linear(x, w, b) @ w, [(6, 8), (5, 8), (5,)], 1),
    "feeds_a_reduction": (lambda x, w, b: F.linear(x, w, b).sum(0), [(6, 8), (5, 8), (5,)], 1),
    "feeds_a_permute": (lambda x, w, b: F.linear(x, w, b).view(2, 3, 5).permute(1, 0, 2).sin(), [(6, 8), (5, 8), (5,)], 1),
    "scaled": (lambda x, w, b: torch.addmm(b, x, w.t(), beta=0.5).relu(), [(6, 8), (5, 8), (5,)], 1),
}


def test_a_product_feeding_dropout_is_split_only_where_random_numbers_are_drawn_in_kernels():
    """BERT's training forward: addmm -> view -> native_dropout -> residual add -> LayerNorm. Dropout reads
    the product elementwise, so with in-kernel random numbers the bias add fuses into the dropout kernel;
    with ATen's dropout (a separate call) the product must exist as is, and the addmm stays."""
    def fn(x, w, b):
        y, _ = aten.native_dropout(F.linear(x, w, b).view(2, 3, 5), 0.25, True)   # as AOTAutograd traces it
        return F.layer_norm(y + 1, (5,))
    inputs = _inputs((6, 8), (5, 8), (5,))
    for random_in_kernel, addmms_left in ((False, 1), (True, 0)):
        gm = make_fx(fn, tracing_mode="fake")(*inputs)
        assert aten.native_dropout.default in _targets(gm)
        assert unfuse_matmul_bias(gm, random_in_kernel) == 1 - addmms_left
        assert _targets(gm).count(aten.addmm.default) == addmms_left
        gm.graph.lint()
    torch.manual_seed(3)
    expected = fn(*inputs)
    torch.manual_seed(3)
    torch.testing.assert_close(gm(*inputs), expected)   # same dropout mask from the same generator state


@pytest.mark.parametrize("name", list(CASES))
def test_rewrite_decision_and_values(name):
    fn, shapes, addmms_left = CASES[name]
    inputs = _inputs(*shapes)
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    assert aten.addmm.default in _targets(gm)
    mms_before = _targets(gm).count(aten.mm.default)
    rewritten = unfuse_matmul_bias(gm)
    targets = _targets(gm)
    assert targets.count(aten.addmm.default) == addmms_left
    assert rewritten == (1 - addmms_left)
    assert targets.count(aten.mm.default) == mms_before + rewritten
    gm.graph.lint()
    expected = fn(*[t.double() for t in inputs])
    actual = gm(*inputs)
    for a, e in zip(torch.utils._pytree.tree_leaves(actual), torch.utils._pytree.tree_leaves(expected)):
        torch.testing.assert_close(a.double(), e, atol=1e-5, rtol=1e-5)


def test_rewritten_nodes_keep_shapes_strides_and_provenance():
    fn, shapes, _ = CASES["gelu"]
    gm = make_fx(fn, tracing_mode="fake")(*_inputs(*shapes))
    addmm = next(n for n in gm.graph.nodes if n.target is aten.addmm.default)
    addmm.meta["stack_trace"] = 'File "model.py", line 7, in forward\n    y = self.fc(x)'
    before = addmm.meta["val"]
    unfuse_matmul_bias(gm)
    add = next(n for n in gm.graph.nodes if n.target is aten.add.Tensor)
    mm = next(n for n in gm.graph.nodes if n.target is aten.mm.default)
    assert add.meta["val"].shape == before.shape and add.meta["val"].stride() == before.stride()
    assert mm.meta["stack_trace"] == add.meta["stack_trace"] == addmm.meta["stack_trace"]


def test_only_grid_targets_ask_for_it():
    assert ir.FusionChoices().unfuse_matmul_bias is False


def test_lowering_with_the_choice_fuses_the_bias_add_into_the_consumer():
    """Through `ir.lower` with a choices object that asks for the rewrite: one ATen call (mm), and the bias
    add lands in the GELU kernel."""
    class GridChoices(ir.FusionChoices):
        unfuse_matmul_bias = True

    x, w, b = _inputs((6, 8), (5, 8), (5,))
    gm = make_fx(lambda x, w, b: (F.gelu(F.linear(x, w, b)),))(x, w, b)
    compiled = ir.lower(gm, [x, w, b], "g", validate=True, choices=GridChoices())
    externs = [e["target"] for e in compiled.program.report.externs]
    assert externs == ["aten.mm.default"], externs
    assert len(compiled.program.kernels) == 1

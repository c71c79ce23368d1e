"""The decomposition table: what is decomposed (and into what), what stays one ATen op, and numerics."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fuse_all_capture import capture, decomposition_table

aten = torch.ops.aten


def ops_of(fn, *inputs, training=False):
    graphs = capture(fn, *inputs, training=training)
    return [set(g.aten_ops()) for g in graphs]


def test_softmax_decomposes_into_pointwise_and_reductions():
    (ops,) = ops_of(lambda x: torch.softmax(x, dim=-1), torch.randn(4, 8))
    assert ops == {"aten.amax.default", "aten.sub.Tensor", "aten.exp.default", "aten.sum.dim_IntList", "aten.div.Tensor"}


def test_convolution_matmuls_embedding_and_dropout_stay_in_aten():
    conv = nn.Conv2d(3, 4, 3)
    embedding = nn.Embedding(10, 4)

    def fn(image, ids, a, b):
        y = conv(image).relu()
        z = torch.bmm(a, b) + torch.baddbmm(a @ b, a, b)
        return y, z, F.dropout(embedding(ids), 0.5, training=True)

    a, b = torch.randn(2, 4, 4), torch.randn(2, 4, 4)
    (ops,) = ops_of(fn, torch.randn(1, 3, 8, 8), torch.tensor([1, 2]), a, b)
    assert {"aten.convolution.default", "aten.bmm.default", "aten.baddbmm.default", "aten.embedding.default",
            "aten.native_dropout.default"} <= ops


def test_training_keeps_convolution_backward_and_embedding_backward():
    conv = nn.Conv2d(3, 4, 3)
    embedding = nn.Embedding(10, 4)

    def fn(image, ids):
        return conv(image).sum() + embedding(ids).sum()

    _, backward = ops_of(fn, torch.randn(1, 3, 8, 8), torch.tensor([1, 2]), training=True)
    assert {"aten.convolution_backward.default", "aten.embedding_dense_backward.default"} <= backward


def test_attention_stays_a_fused_kernel():
    q = torch.randn(2, 4, 16, 8)
    (ops,) = ops_of(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), q, q, q)
    assert "aten._scaled_dot_product_flash_attention_for_cpu.default" in ops
    assert "aten.bmm.default" not in ops and "aten.exp.default" not in ops


class Norms(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer_norm = nn.LayerNorm(8)
        self.batch_norm = nn.BatchNorm1d(8)
        self.group_norm = nn.GroupNorm(2, 8)

    def forward(self, x):
        y = self.layer_norm(x) + self.batch_norm(x) + self.group_norm(x)
        y = F.gelu(y) + F.silu(y) + F.hardswish(y) + F.leaky_relu(y) + F.elu(y)
        return y.mean(-1) + y.var(0).sum() + y.std(-1, correction=0) + torch.log_softmax(y, -1).sum(-1)


@pytest.mark.parametrize("training", [False, True])
def test_norms_activations_and_statistics_leave_only_simple_aten_ops(training):
    model = Norms().train(training)
    x = torch.randn(4, 8, requires_grad=training)
    graphs = capture(model, x, training=training)
    assert [g.kind for g in graphs] == (["forward", "backward"] if training else ["inference"])
    composite = ("norm", "gelu", "silu", "hardswish", "leaky_relu", "elu", "softmax", "mean", "var", "std")
    inference_batch_norm = "aten._native_batch_norm_legit_no_training.default"   # the IR lowers it whole
    for graph in graphs:
        for op in graph.aten_ops():
            assert not op.startswith("prims."), op
            assert op == inference_batch_norm or not any(name in op for name in composite), op
        assert (inference_batch_norm in graph.aten_ops()) == (not training)


def run_graph(fn, *inputs):
    (graph,) = capture(fn, *inputs)
    return graph.graph_module(*inputs)


@pytest.mark.filterwarnings("ignore:var.*degrees of freedom")  # the N - correction = 0 case, on purpose
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_statistics_decompositions_match_eager(dtype):
    torch.manual_seed(0)
    x = (torch.randn(5, 6, 7) * 3 + 1).to(dtype)
    cases = [
        lambda t: torch.var_mean(t, dim=(0, 2), correction=1, keepdim=False),
        lambda t: torch.var_mean(t, dim=-1, keepdim=True),
        lambda t: (t.var(), t.std(dim=1, correction=0), t.mean(), t.mean(dim=(1, 2), keepdim=True)),
        lambda t: torch.std_mean(t, dim=0),
        lambda t: t.var(dim=0, correction=5),  # N - correction = 0: inf or nan, as eager
    ]
    tolerance = {"rtol": 1e-3, "atol": 1e-3} if dtype == torch.float16 else {}
    for case in cases:
        torch.compiler.reset()
        expected = case(x)
        got = run_graph(case, x)
        for e, g in zip(expected if isinstance(expected, tuple) else (expected,), got):
            assert g.dtype == e.dtype and g.shape == e.shape
            torch.testing.assert_close(g, e, equal_nan=True, **tolerance)


def test_integer_mean_with_float_dtype_matches_eager():
    x = torch.arange(12).reshape(3, 4)
    (got,) = run_graph(lambda t: t.mean(dim=1, dtype=torch.float32), x)
    torch.testing.assert_close(got, x.mean(dim=1, dtype=torch.float32))


def test_table_contents():
    table = decomposition_table()
    assert aten._softmax.default in table and aten.native_layer_norm.default in table
    assert aten.var_mean.correction in table and aten.mean.dim in table
    for kept in (aten.convolution.default, aten.mm.default, aten.addmm.default, aten.bmm.default,
                 aten.baddbmm.default, aten.embedding.default, aten.embedding_dense_backward.default,
                 aten.native_dropout.default, aten._scaled_dot_product_flash_attention_for_cpu.default):
        assert kept not in table, kept
    table.clear()  # a copy: the next caller still gets the full table
    assert aten._softmax.default in decomposition_table()

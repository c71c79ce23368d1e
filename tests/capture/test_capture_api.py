"""The standalone capture() API for library users."""
import torch
import torch.nn as nn

from fuse_all_capture import CapturedGraph, capture


def mlp_step(x, w1, w2):
    hidden = torch.relu(x @ w1)
    return (hidden @ w2).tanh()


def test_capture_returns_the_inference_graph_without_compiling():
    x, w1, w2 = torch.randn(3, 4), torch.randn(4, 5), torch.randn(5, 2)
    graphs = capture(mlp_step, x, w1, w2)
    assert len(graphs) == 1 and isinstance(graphs[0], CapturedGraph)
    graph = graphs[0]
    assert graph.kind == "inference"
    assert graph.aten_ops() == ["aten.mm.default", "aten.relu.default", "aten.mm.default", "aten.tanh.default"]
    assert all(isinstance(v, torch.Tensor) for v in graph.example_inputs)
    (out,) = graph.graph_module(x, w1, w2)
    torch.testing.assert_close(out, mlp_step(x, w1, w2))


def test_training_capture_gives_forward_and_backward_and_leaves_grads_alone():
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 1))
    x = torch.randn(5, 4, requires_grad=True)
    graphs = capture(model, x, training=True)
    assert [g.kind for g in graphs] == ["forward", "backward"]
    assert all(p.grad is None for p in model.parameters()) and x.grad is None
    assert "aten.mm.default" in graphs[1].aten_ops()


def test_training_without_anything_to_differentiate_gives_inference_graphs():
    graphs = capture(lambda t: t.sin() * 2, torch.randn(3), training=True)
    assert [g.kind for g in graphs] == ["inference"]


def test_capture_with_graph_break_and_repeated_capture():
    def two_parts(x):
        y = x.exp()
        print(end="")  # Dynamo cannot trace print: a graph break that prints nothing
        return y.log1p()

    x = torch.randn(4)
    first = capture(two_parts, x)
    again = capture(two_parts, x)  # a new backend: Dynamo compiles again instead of reusing the cache
    assert [g.aten_ops() for g in first] == [["aten.exp.default"], ["aten.log1p.default"]]
    assert [g.aten_ops() for g in again] == [g.aten_ops() for g in first]
    assert first[0].graph_break is not None and first[1].graph_break is None

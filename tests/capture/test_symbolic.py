"""Symbolic sizes pass through: automatic dynamic shapes give SymInt inputs, symbolic metadata and hints."""
import torch

from fuse_all_capture import capture, make_backend


def rows(x, w):
    y = torch.softmax(x @ w, dim=-1)
    return y.reshape(-1) * x.shape[0]


def symbols_in(graph):
    found = set()
    for node in graph.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor):
            found.update(str(s) for s in value.shape if isinstance(s, torch.SymInt))
        elif isinstance(value, torch.SymInt):
            found.add(str(value))
    return found


def test_automatic_dynamic_shapes_reach_the_graph_as_symbols(recorder):
    compiled = torch.compile(rows, backend=make_backend(recorder), dynamic=None)
    w = torch.randn(8, 8)
    with torch.no_grad():
        for n in (3, 4, 5):
            x = torch.randn(n, 8)
            torch.testing.assert_close(compiled(x, w), rows(x, w))

    # First call: static. Second call: recompiled with a symbolic row count. Third: reuses the second.
    assert len(recorder.graphs) == 2
    static, dynamic = recorder.graphs
    assert static.size_hints == {} and not any(isinstance(v, torch.SymInt) for v in static.example_inputs)
    symints = [v for v in dynamic.example_inputs if isinstance(v, torch.SymInt)]
    assert len(symints) == 1
    (symbol,) = dynamic.size_hints
    assert str(symints[0]) == symbol and dynamic.size_hints[symbol] == 4  # traced with the second call's size
    assert symbol in symbols_in(dynamic)
    x_fake = next(v for v in dynamic.example_inputs if isinstance(v, torch.Tensor) and v.dim() == 2 and v.shape[1] == 8
                  and isinstance(v.shape[0], torch.SymInt))
    assert str(x_fake.shape[0]) == symbol


def test_capture_dynamic_true_marks_sizes_symbolic_in_forward_and_backward():
    x = torch.randn(6, 8, requires_grad=True)
    forward, backward = capture(rows, x, torch.randn(8, 8), dynamic=True, training=True)
    assert forward.size_hints and set(forward.size_hints.values()) <= {6, 8}
    assert symbols_in(forward) and symbols_in(backward)
    assert backward.size_hints == {k: v for k, v in forward.size_hints.items() if k in backward.size_hints}

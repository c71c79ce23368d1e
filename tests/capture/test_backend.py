"""make_backend through torch.compile: the graphs compile_graph receives, and that their results are right."""
import re

import pytest
import torch
import torch.nn as nn

from fuse_all_capture import format_graph, make_backend


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        return torch.softmax(self.norm(self.linear(x)), dim=-1)


def test_inference_graph_ops_and_static_parameters(recorder):
    torch.manual_seed(0)
    block = Block()
    x = torch.randn(4, 16)
    with torch.no_grad():
        out = torch.compile(block, backend=make_backend(recorder))(x)
        torch.testing.assert_close(out, block(x))
    (graph,) = recorder.graphs
    assert graph.kind == "inference"
    ops = set(graph.aten_ops())
    assert "aten.addmm.default" in ops
    assert {"aten.amax.default", "aten.exp.default", "aten.sum.dim_IntList", "aten.div.Tensor"} <= ops
    assert not any("softmax" in op or "layer_norm" in op or op.startswith("prims.") for op in ops)
    # The static inputs are exactly the 4 parameters, not the activation x.
    static_shapes = sorted(tuple(graph.example_inputs[i].shape) for i in graph.static_input_indices)
    assert static_shapes == [(8,), (8,), (8,), (8, 16)]
    x_index = next(i for i, v in enumerate(graph.example_inputs) if tuple(v.shape) == (4, 16))
    assert x_index not in graph.static_input_indices
    assert graph.mutated_input_indices == ()
    assert graph.device == "cpu"
    assert re.fullmatch(r"g_[0-9a-f]{8}_\d+", graph.graph_id)


@pytest.mark.parametrize("boxed", [True, False])
def test_training_forward_and_backward_graphs(boxed, recorder):
    torch.manual_seed(0)
    block = Block()
    recorder.boxed = boxed
    reference = Block()
    reference.load_state_dict(block.state_dict())
    x = torch.randn(4, 16)
    weights = torch.randn(4, 8)

    (torch.compile(block, backend=make_backend(recorder))(x) * weights).sum().backward()
    (reference(x) * weights).sum().backward()

    assert recorder.kinds() == ["forward", "backward"]
    forward, backward = recorder.graphs
    assert forward.graph_id.endswith("_fwd") and backward.graph_id.endswith("_bwd")
    assert forward.graph_id[:-4] == backward.graph_id[:-4]
    assert forward.num_fwd_outputs == 1  # one user output; the rest of the outputs are saved for backward
    assert len(forward.graph.find_nodes(op="output")[0].args[0]) > 1
    assert "aten.mm.default" in backward.aten_ops()
    assert backward.num_fwd_outputs is None
    for name, parameter in block.named_parameters():
        torch.testing.assert_close(parameter.grad, dict(reference.named_parameters())[name].grad)


def test_backward_static_inputs_are_saved_parameters(recorder):
    weight = nn.Parameter(torch.randn(8, 8))

    def fn(x):
        return (x @ weight).sin()

    torch.compile(fn, backend=make_backend(recorder))(torch.randn(3, 8, requires_grad=True)).sum().backward()
    forward, backward = recorder.graphs
    (weight_index,) = [i for i, v in enumerate(forward.example_inputs) if tuple(v.shape) == (8, 8)]
    assert forward.static_input_indices == (weight_index,)
    placeholders = [n.name for n in backward.graph.nodes if n.op == "placeholder"]
    # Backward needs the weight (for x's gradient): it is static there too; activations are not.
    assert [placeholders[i] for i in backward.static_input_indices] == [f"primals_{weight_index + 1}"]


def test_input_mutation_stays_in_the_graph(recorder):
    def fn(x, counter):
        counter.add_(1)
        return x * 2

    counter = torch.zeros(5)
    with torch.no_grad():
        out = torch.compile(fn, backend=make_backend(recorder))(torch.ones(3), counter)
    (graph,) = recorder.graphs
    (counter_index,) = [i for i, v in enumerate(graph.example_inputs) if tuple(v.shape) == (5,)]
    assert graph.mutated_input_indices == (counter_index,)
    (copy,) = graph.graph.find_nodes(op="call_function", target=torch.ops.aten.copy_.default)
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    assert copy.args[0] is placeholders[counter_index]
    torch.testing.assert_close(counter, torch.ones(5))
    torch.testing.assert_close(out, torch.full((3,), 2.0))


def test_compile_options_are_accepted_and_graph_ids_are_unique(recorder):
    backend = make_backend(recorder, name="probe")
    assert backend.__name__ == "probe"

    def fn(x):
        return x.cos() + 1

    with torch.no_grad():
        torch.compile(fn, backend=backend, options={"anything": 1})(torch.randn(3))
        torch.compile(fn, backend=backend)(torch.randn(3, 3))  # a new graph (new rank): a new id
    ids = [g.graph_id for g in recorder.graphs]
    assert len(ids) == 2 and len(set(ids)) == 2


def test_format_graph_shows_inputs_code_and_source_lines(recorder):
    def fn(x):
        return torch.cos(x) * 3

    with torch.no_grad():
        torch.compile(fn, backend=make_backend(recorder))(torch.randn(2, 5))
    text = format_graph(recorder.graphs[0])
    assert recorder.graphs[0].graph_id in text
    assert "float32[2, 5] stride=(5, 1) cpu" in text
    assert "torch.ops.aten.cos.default" in text
    assert re.search(r"aten\.cos\.default\s+<-\s+\S+test_backend\.py:\d+\s+return torch\.cos\(x\) \* 3", text)


def test_batch_norm_running_stats_are_written_by_the_training_forward_graph(recorder):
    torch.manual_seed(0)
    compiled_bn, eager_bn = nn.BatchNorm1d(6), nn.BatchNorm1d(6)
    x = torch.randn(5, 6, requires_grad=True)
    torch.compile(compiled_bn, backend=make_backend(recorder))(x).sum().backward()
    eager_bn(x).sum()
    forward = recorder.graphs[0]
    assert forward.kind == "forward"
    written = {tuple(forward.example_inputs[i].shape) for i in forward.mutated_input_indices}
    assert written == {(6,), ()}  # running_mean/var and num_batches_tracked
    assert len(forward.mutated_input_indices) == 3
    assert set(forward.mutated_input_indices) <= set(forward.static_input_indices)  # buffers
    torch.testing.assert_close(compiled_bn.running_mean, eager_bn.running_mean)
    torch.testing.assert_close(compiled_bn.running_var, eager_bn.running_var)
    assert int(compiled_bn.num_batches_tracked) == 1

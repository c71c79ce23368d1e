"""The torch.compile backend on a CPU-only machine: registered, correct, and clear about falling back."""
import re

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from fuse_all_cudagraphs.backend import (backward_static_indices, fuse_all_cudagraphs, graph_unsafe_reason,
                                         input_mutations)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch.compiler.reset()
    yield
    torch.compiler.reset()


def test_the_entry_point_registers_the_backend():
    assert "fuse_all_cudagraphs" in torch.compiler.list_backends()


def test_cpu_inference_is_correct_and_says_why_once(fallback_log):
    seen = []

    def fn(x):
        return torch.sin(torch.cos(x))

    compiled = torch.compile(fn, backend="fuse_all_cudagraphs", options={"on_fallback": seen.append})
    for _ in range(3):
        x = torch.randn(64)
        assert torch.allclose(compiled(x), fn(x))
    assert seen == ["the graph runs on cpu; CUDA graphs need CUDA tensors"]
    lines = [r.getMessage() for r in fallback_log.records]
    assert len(lines) == 1 and re.fullmatch(r"fuse_all_cudagraphs\[\d+ inference\]: running plainly: the graph "
                                            r"runs on cpu; CUDA graphs need CUDA tensors", lines[0])


def test_cpu_training_step_matches_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    reference.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="fuse_all_cudagraphs")
    x = torch.randn(5, 8)
    compiled(x).square().sum().backward()
    reference(x).square().sum().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-6)


def test_cpu_input_mutation_through_compile():
    def fn(x):
        x.mul_(2)
        return x + 1

    compiled = torch.compile(fn, backend="fuse_all_cudagraphs")
    x = torch.ones(4)
    y = compiled(x)
    assert torch.equal(x, torch.full((4,), 2.0)) and torch.equal(y, torch.full((4,), 3.0))


def fake_cuda(*shapes):
    """CUDA tensors with metadata only (no GPU needed), all in one fake mode."""
    with FakeTensorMode():
        return [torch.empty(*shape, device="cuda") for shape in shapes]


def test_input_mutations_are_read_from_the_schema():
    gm = make_fx(lambda x, y: (y.add_(1), x.sin()), tracing_mode="fake")(*fake_cuda((4,), (4,)))
    assert input_mutations(gm.graph) == {1}
    assert graph_unsafe_reason(gm) is None


def test_graph_unsafe_reasons():
    cpu_gm = make_fx(lambda x: (x.sin(),))(torch.randn(3))
    assert graph_unsafe_reason(cpu_gm) == "the graph runs on cpu; CUDA graphs need CUDA tensors"
    mixed = make_fx(lambda x, y: (x + y.sum().to(x.device),), tracing_mode="fake")(*fake_cuda((3,)), torch.randn(3))
    assert "mixes cuda with cpu tensors" in graph_unsafe_reason(mixed)

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    (x.meta["val"],) = fake_cuda((4, 4))
    eigh = graph.call_function(torch.ops.aten._linalg_eigh.default, (x,))
    graph.output((eigh,))
    reason = graph_unsafe_reason(torch.fx.GraphModule({}, graph))
    assert reason is not None and "aten._linalg_eigh.default ('_linalg_eigh_default') cannot be captured" in reason


def test_backward_parameters_are_found_by_their_forward_index():
    graph = torch.fx.Graph()
    for name in ("primals_1", "primals_3", "relu", "primals_10", "tangents_1"):
        graph.placeholder(name)
    graph.output(())
    assert backward_static_indices(torch.fx.GraphModule({}, graph), fw_static=[0, 9]) == [0, 3]


def test_unknown_options_are_an_error():
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['bogus'\]"):
        fuse_all_cudagraphs(gm, [torch.randn(2)], options={"bogus": 1})


def test_parameters_are_passed_as_static_inputs_forward_and_backward(monkeypatch):
    import fuse_all_cudagraphs.backend as backend_module

    calls = {}
    real_wrap = backend_module.wrap

    def recording_wrap(fn, inputs, **options):
        calls[options["name"].split()[-1].rstrip("]")] = (len(inputs), options)
        return real_wrap(fn, inputs, **options)

    monkeypatch.setattr(backend_module, "wrap", recording_wrap)
    scale = torch.nn.Parameter(torch.randn(4))
    compiled = torch.compile(lambda x: (x * scale).sin().sum(), backend="fuse_all_cudagraphs")
    compiled(torch.randn(4, requires_grad=True)).backward()
    (n_fw, fw), (n_bw, bw) = calls["forward"], calls["backward"]
    assert (n_fw, fw["static_input_indices"]) == (2, [1])  # [x, scale]: Dynamo lifted the parameter
    assert (n_bw, bw["static_input_indices"]) == (4, [1])  # [primals_1 (x), primals_2 (scale), mul, tangents_1]
    assert fw["check_input_metadata"] is False and fw["pool"] is bw["pool"]
    assert bw["force_fallback"] == "the graph runs on cpu; CUDA graphs need CUDA tensors"

    module = torch.compile(torch.nn.Linear(3, 3), backend="fuse_all_cudagraphs")
    with torch.no_grad():
        module(torch.randn(2, 3))
    assert calls["inference"][1]["static_input_indices"] == [0, 1]  # weight, bias

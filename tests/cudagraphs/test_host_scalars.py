"""0-dim CPU tensors among the inputs of a CUDA graph (AOTAutograd's backward gets attention's philox
seed/offset this way: on CUDA, ATen makes them on the CPU outside capture and on the device during capture).

Captured as they are, a graph would keep the value ATen read on the host at capture, or hand their host
address to a kernel (the efficient-attention backward with dropout reads seed/offset through device pointers
while capturing). So the graph reads a 0-dim device buffer instead, written with the caller's value on
every call. The FakeEngine with ``host_scalars=True`` plays this out on CPU tensors: 0-dim tensors play CPU
scalars and a capture bakes their value in; other tensors and the engine's device scalars are read at their
address. Replaying with a stale value therefore shows up as a wrong result."""
import pytest
import torch

from fuse_all_cudagraphs import GraphedCallable
from fuse_all_cudagraphs.graph import CapturedGraph
from fuse_all_cudagraphs.policy import TensorMeta, unsafe_reason


@pytest.fixture
def engine(host_scalar_engine):
    return host_scalar_engine


def scaled(a):
    """x * s, s read on the host (like a seed ATen unpacks at launch)."""
    x, s = a[0], a[1]
    return (x * s.item(),)


def make(engine, fn=scaled, example=None, **options):
    example = example or [torch.randn(4), torch.tensor(3.0)]
    return GraphedCallable(fn, example, engine=engine, name="g", **options)


def run(g, value):
    """One call: the tensor input at one address with new contents (it is read in place), the scalar a new
    tensor object on every call, like a saved tensor of a new forward call."""
    x = g.fixed_x if hasattr(g, "fixed_x") else torch.randn(4)
    g.fixed_x = x
    x.copy_(torch.randn(4))
    scalar = value if isinstance(value, torch.Tensor) else torch.tensor(value)
    out = g([x, scalar])[0]
    assert torch.allclose(out, x * scalar), (value, out, x * scalar)  # a stale captured value fails here
    return out


def fallbacks(g):
    return [d.reason for d in g.decisions if d.kind == "fallback"]


def test_unsafe_reason_accepts_a_cpu_scalar_beside_cuda_tensors_only():
    cuda = TensorMeta("cuda", 0, torch.float32, (2, 3), (3, 1))
    cpu_scalar = TensorMeta("cpu", None, torch.int64, (), ())
    cpu_vector = TensorMeta("cpu", None, torch.int64, (1,), (1,))
    assert unsafe_reason([cuda, cpu_scalar], grad_enabled=True) is None
    assert unsafe_reason([cuda, cpu_vector], grad_enabled=False) == "input 1 is on cpu; CUDA graphs need cuda tensors"
    assert "no cuda tensor" in unsafe_reason([cpu_scalar], grad_enabled=False)


def test_a_constant_cpu_scalar_is_captured_and_replays(engine):
    g = make(engine)
    for _ in range(6):
        run(g, 3.0)  # a new tensor object on every call, with the same value
    assert g.stats["plain_calls"] == 0 and g.stats["captures"] == 1 and g.stats["replays"] == 5
    assert fallbacks(g) == []
    assert "1 CPU scalars" in g.decisions[0].reason


def test_a_cpu_scalar_that_changes_on_every_call_replays_with_each_value(engine):
    g = make(engine)
    for step in range(8):
        run(g, float(step))  # a dropout seed from a forward that runs without a graph
    assert g.stats["captures"] == 1 and g.stats["plain_calls"] == 0 and g.stats["replays"] == 7
    assert fallbacks(g) == []


def test_without_writing_the_device_buffer_the_fake_would_replay_a_stale_value(engine, monkeypatch):
    """The fake is strict enough: the test above fails if the value is not written on every call."""
    g = make(engine)
    run(g, 3.0), run(g, 3.0)
    monkeypatch.setattr(CapturedGraph, "write_host_scalars", lambda self, inputs: None)
    with pytest.raises(AssertionError):
        run(g, 5.0)


def test_cpu_scalars_replay_under_inference_mode(engine):
    """Inference tensors have no version counter: a CPU scalar is not taken for written on that account."""
    with torch.inference_mode():
        g = make(engine)
        for step in range(5):
            run(g, float(step))
    assert g.stats["plain_calls"] == 0 and g.stats["captures"] == 1 and fallbacks(g) == []


def test_a_graph_that_writes_a_cpu_scalar_runs_plainly_and_writes_it_once_per_call(engine):
    def count(a):
        a[1].add_(1)  # a replay would write the graph's device copy, never the caller's CPU tensor
        return (a[0] * 2,)

    g = make(engine, count)
    counter = torch.tensor(0)
    for _ in range(4):
        x = torch.randn(4)
        assert torch.allclose(g([x, counter])[0], x * 2)
    assert counter.item() == 4
    assert g.stats["captures"] == 0 and g.stats["replays"] == 0
    assert "writes CPU scalar input(s) [1]; a replay would write the graph's device copy" in fallbacks(g)[0]


def test_a_cpu_scalar_that_becomes_a_device_tensor_and_back(engine):
    g = make(engine, check_input_metadata=False)  # AOTAutograd's graphs: devices are not part of the key
    run(g, 3.0), run(g, 3.0)  # warm-up, captured with a CPU scalar
    # the forward graph is captured now: the seed it outputs is on the device
    device_seed = engine.plays_device_scalar(torch.tensor(4.0))
    for value in (4.0, 5.0, 6.0):
        device_seed.fill_(value)  # the forward graph's replay writes a new seed in place
        run(g, device_seed)  # copied into the device buffer: no re-capture needed
    assert g.stats["plain_calls"] == 0 and g.stats["captures"] == 1 and g.stats["replays"] == 4

    h = make(engine, check_input_metadata=False)
    run(h, device_seed), run(h, device_seed)  # captured reading the device tensor in place
    run(h, 7.0)  # the forward ran without a graph once: a CPU scalar again
    assert h.decisions[-1].kind == "recapture" and "are CPU scalars now" in h.decisions[-1].reason
    for value in (8.0, 9.0):
        run(h, value)
    assert h.stats["plain_calls"] == 0 and h.stats["captures"] == 2 and fallbacks(h) == [], h.decisions


def test_the_attention_seed_pattern_replays_forward_and_backward(engine):
    """What AOTAutograd does with scaled_dot_product_attention on CUDA, dropout off: the forward returns
    a seed made on the CPU when it runs plainly (warm-up) and on the device when captured; the backward
    receives it as an input and never reads it. After warm-up both replay; nothing runs plainly."""
    def forward(a):
        # ATen: at::empty({}) on the device while capturing, on the CPU otherwise
        seed = engine.plays_device_scalar(torch.tensor(0)) if engine.capturing else torch.tensor(12345)
        return a[0] * 2, seed

    def backward(a):
        saved, seed, grad = a
        return (grad * saved,)

    x = torch.randn(4)
    fw = GraphedCallable(forward, [x], engine=engine, name="fw", check_input_metadata=False)
    bw = GraphedCallable(backward, [x, torch.tensor(0), x], engine=engine, name="bw", pool=fw.pool,
                         check_input_metadata=False)
    for _ in range(6):
        x, grad = torch.randn(4), torch.randn(4)
        saved, seed = fw([x])
        assert torch.allclose(bw([saved, seed, grad])[0], grad * x * 2)
        del saved, seed
    assert fallbacks(fw) == fallbacks(bw) == []
    assert fw.stats["plain_calls"] == bw.stats["plain_calls"] == 0
    assert bw.stats["replays"] >= 4 and bw.stats["captures"] <= 2  # + once for the new grad on every call
    assert not any("CPU scalar" in d.reason for d in bw.decisions[1:]), bw.decisions
    assert "0 CPU scalars" in bw.decisions[0].reason  # captured after the forward: the seed is on the device

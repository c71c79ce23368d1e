"""0-dim CPU tensors among the inputs of a CUDA graph (AOTAutograd's backward gets attention's philox
seed/offset this way: ATen makes them on the CPU outside capture, on the device during capture).

A captured graph keeps the value that ATen read on the host at capture. The FakeEngine with
``host_scalars=True`` models exactly that (0-dim tensors play CPU scalars, their value is baked into the
fake graph; other tensors play device tensors, read at their address), so replaying with a stale value
shows up as a wrong result here."""
import pytest
import torch

from fuse_all_cudagraphs import GraphedCallable
from fuse_all_cudagraphs.policy import (NOT_A_HOST_SCALAR, Action, HostScalarGuard, InputMode, TensorMeta,
                                        same_scalar, unsafe_reason)


@pytest.fixture
def engine(host_scalar_engine):
    return host_scalar_engine


def scaled(a):
    """x * s with s read on the host (like a seed ATen unpacks at launch), or read as a tensor when s is a
    device tensor (shape (1,) here)."""
    x, s = a[0], a[1]
    return (x * (s.item() if s.dim() == 0 else s),)


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


def test_same_scalar_is_equality_of_what_an_op_reads():
    assert same_scalar(3, 3) and same_scalar(float("nan"), float("nan")) and same_scalar(1.5, 1.5)
    assert not same_scalar(0.0, -0.0) and not same_scalar(1, 2) and not same_scalar(1, 1.0)
    assert not same_scalar(True, 1)


def test_the_guard_recaptures_once_for_a_new_value_then_runs_changing_values_plainly():
    modes = (InputMode.BORROWED, InputMode.HOST_SCALAR)
    guard = HostScalarGuard({1: 7})
    values = {1: 7}
    assert guard.check(values.get, modes, 0) is None
    values[1] = 8
    first = guard.check(values.get, modes, 0)
    assert first.action is Action.RECAPTURE and first.new_modes == modes and "1: 7 -> 8" in first.reason
    again = guard.check(values.get, modes, 1)
    assert again.action is Action.PLAIN and "change value from call to call" in again.reason
    moved = guard.check(lambda i: NOT_A_HOST_SCALAR, modes, 1)
    assert moved.action is Action.RECAPTURE and moved.new_modes == (InputMode.BORROWED, InputMode.BORROWED)


def test_a_constant_cpu_scalar_is_captured_and_replays(engine):
    g = make(engine)
    for _ in range(6):
        run(g, 3.0)  # a new tensor object on every call, with the same value
    assert g.stats["plain_calls"] == 0 and g.stats["captures"] == 1 and g.stats["replays"] == 5
    assert fallbacks(g) == []
    assert "1 CPU scalars" in g.decisions[0].reason


def test_a_cpu_scalar_that_changes_once_is_recaptured_with_the_new_value(engine):
    g = make(engine)
    run(g, 3.0), run(g, 3.0)  # warm-up, capture
    for _ in range(4):
        run(g, 5.0)
    assert g.stats["captures"] == 2 and g.stats["plain_calls"] == 0 and g.stats["replays"] == 5  # each capture too
    assert [d.kind for d in g.decisions] == ["capture", "recapture"]
    assert "changed value since capture (1: 3.0 -> 5.0)" in g.decisions[1].reason


def test_a_cpu_scalar_that_changes_on_every_call_runs_plainly_with_the_reason(engine):
    g = make(engine)
    for step in range(8):
        run(g, float(step))  # a dropout seed of a forward that runs without a graph
    assert g.stats["captures"] == 2  # the second value might have been the last new one
    assert g.stats["plain_calls"] == 5
    assert len(fallbacks(g)) == 1 and "change value from call to call" in fallbacks(g)[0]
    run(g, 2.0)  # the value captured last comes back: the graph is still there
    assert g.stats["plain_calls"] == 5 and g.stats["replays"] == 3


def test_without_the_guard_the_fake_would_replay_a_stale_value(engine, monkeypatch):
    """The fake keeps the captured value like a CUDA graph does: the tests above can fail."""
    monkeypatch.setattr(HostScalarGuard, "check", lambda self, read, modes, recaptures: None)
    g = make(engine)
    run(g, 3.0), run(g, 3.0)
    with pytest.raises(AssertionError):
        run(g, 5.0)


def test_a_graph_that_writes_a_cpu_scalar_runs_plainly_and_writes_it_once_per_call(engine):
    def count(a):
        a[1].add_(1)  # a host-side write: a replay would not repeat it
        return (a[0] * 2,)

    g = make(engine, count)
    counter = torch.tensor(0)
    for _ in range(4):
        x = torch.randn(4)
        assert torch.allclose(g([x, counter])[0], x * 2)
    assert counter.item() == 4
    assert g.stats["captures"] == 0 and g.stats["replays"] == 0
    assert "writes CPU scalar input(s) [1] on the host" in fallbacks(g)[0]


def test_a_cpu_scalar_that_becomes_a_device_tensor_is_then_read_in_place(engine):
    g = make(engine, check_input_metadata=False)  # AOTAutograd's graphs: devices are not part of the key
    run(g, 3.0), run(g, 3.0)  # warm-up, captured with a CPU scalar
    device_seed = torch.tensor([3.0])  # the forward graph is captured now: its seed output is on the device
    run(g, device_seed)
    assert g.decisions[-1].kind == "recapture" and "are device tensors now" in g.decisions[-1].reason
    for value in (4.0, 5.0, 6.0):
        device_seed.fill_(value)  # the forward graph's replay writes a new seed in place
        run(g, device_seed)
    assert g.stats["plain_calls"] == 0 and g.stats["captures"] == 2 and g.stats["replays"] == 5
    run(g, 6.0)  # the forward ran without a graph once: a CPU scalar again
    assert "are CPU scalars now" in g.decisions[-1].reason and g.stats["plain_calls"] == 0


def test_the_attention_seed_pattern_replays_forward_and_backward(engine):
    """What AOTAutograd does with scaled_dot_product_attention on CUDA, dropout off: the forward returns
    a seed made on the CPU when it runs plainly (warm-up) and on the device when captured; the backward
    receives it as an input and never reads it. After warm-up both replay; nothing runs plainly."""
    def forward(a):
        seed = torch.zeros(1) if engine.capturing else torch.tensor(12345)  # ATen: at::empty({}) on either
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

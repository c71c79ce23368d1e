"""CPU inference graphs keep the channels-last copies of their convolution weights across calls
(`fuse_all_ir.weight_layouts`) while a weight is unchanged, and never give a stale answer after the weight
changes: in-place updates, optimizer steps, `load_state_dict`, `.data` swaps, a new Parameter object.
Training graphs have no cache."""
from __future__ import annotations

import copy
import gc
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import fuse_all
from fuse_all_ir import weight_layouts


class Net(nn.Module):
    """3x3 convolutions (weights ATen converts to channels-last at every call), a depthwise and a 1x1 one
    (already channels-last compatible: no cache), BatchNorm and a linear head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.body = nn.Conv2d(8, 8, 3, stride=2, padding=1, bias=False)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.point = nn.Conv2d(8, 16, 1)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.stem(x)))
        y = torch.relu(self.body(y))
        y = self.point(torch.relu(self.depthwise(y)))
        return self.head(y.mean((2, 3)))


ON = {"fallback": False, "weight_layout_cache": True}


def _new_sites(before: set) -> list:
    gc.collect()
    return [s for s in weight_layouts.live_sites() if id(s) not in before]


def _site_ids() -> set:
    return {id(s) for s in weight_layouts.live_sites()}


def _host_sources() -> dict[str, str]:
    return {g.graph_id: Path(g.output_code).read_text() for g in fuse_all.compiled_graphs() if g.output_code}


@pytest.fixture
def model():
    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():   # BatchNorm statistics that are not the identity
        net.bn.running_mean.uniform_(-0.5, 0.5)
        net.bn.running_var.uniform_(0.5, 1.5)
    return net


def _check(compiled, net, x):
    with torch.no_grad():
        got, expected = compiled(x), net(x)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def _compiled_and_called(net, calls: int):
    """`net` compiled with the cache on and called `calls` times on one input (each checked against eager):
    the compiled module, the input, and the cache sites its compile made."""
    before = _site_ids()
    compiled = torch.compile(net, backend="fuse_all", options=ON)
    x = torch.randn(2, 3, 16, 16)
    for _ in range(calls):
        _check(compiled, net, x)
    return compiled, x, _new_sites(before)


def test_copies_kept_while_weights_unchanged(model):
    compiled, x, sites = _compiled_and_called(model, 4)
    assert len(sites) == 2            # stem and body; the depthwise and 1x1 weights need no copy
    # call 1: seen, call 2: seen unchanged -> kept, calls 3 and 4: reused
    assert sorted((s.hits, s.misses, s.holding) for s in sites) == [(2, 2, True)] * 2
    source = next(iter(_host_sources().values()))
    assert source.count("ChannelsLastWeight()") == 2


def test_every_kind_of_weight_update_between_calls_gives_eager_answer(model):
    compiled, x, sites = _compiled_and_called(model, 3)
    assert all(s.holding for s in sites) and len(sites) == 2

    updates = {
        "in-place under no_grad": lambda: model.stem.weight.mul_(-0.5),
        "in-place through a view": lambda: model.body.weight[:, :2].add_(1.0),
        "copy_": lambda: model.stem.weight.copy_(torch.randn_like(model.stem.weight)),
        "load_state_dict": lambda: model.load_state_dict(
            {k: v + 0.25 if k.endswith("weight") else v for k, v in copy.deepcopy(model.state_dict()).items()}),
        ".data swap": lambda: setattr(model.body.weight, "data", torch.randn_like(model.body.weight)),
    }
    for name, update in updates.items():
        with torch.no_grad():
            update()
        _check(compiled, model, x)     # the first call after the change: a miss, eager's answer
        _check(compiled, model, x)     # and the copy made from the new weight
        _check(compiled, model, x)
    # each update is noticed (one miss per changed site), the calls between them reuse the copies
    assert sum(s.hits for s in sites) > 0


def test_optimizer_steps_between_inference_calls(model):
    """Evaluation inside a training loop: the weights change between every call of the inference graph,
    so a site never keeps a copy (no extra memory, no stale answer)."""
    before = _site_ids()
    compiled = torch.compile(model, backend="fuse_all", options=ON)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(2, 3, 16, 16)
    for _ in range(4):
        _check(compiled, model, x)
        optimizer.zero_grad()
        model(x).square().mean().backward()    # eager training step
        optimizer.step()
    sites = _new_sites(before)
    assert len(sites) == 2
    assert all(s.hits == 0 and not s.holding for s in sites)


def test_data_swap_to_a_new_storage_at_the_same_address(model):
    """`.data =` leaves `_version` alone, and a new storage may sit at the old one's address (here: two
    storages over one bytearray, the contents rewritten in between): the swap must still be noticed."""
    before = _site_ids()
    compiled = torch.compile(model, backend="fuse_all", options=ON)
    x = torch.randn(2, 3, 16, 16)
    weight = model.stem.weight
    memory = bytearray(weight.numel() * 4)
    over_memory = lambda: torch.frombuffer(memory, dtype=torch.float32).view(weight.shape)  # noqa: E731
    weight.data = over_memory()
    weight.data.copy_(torch.randn(weight.shape))
    for _ in range(3):
        _check(compiled, model, x)
    address, version = weight.data_ptr(), weight._version
    rewritten = torch.randn(weight.shape)
    over_memory().copy_(rewritten)          # another storage writes the memory: no version bump on `weight`
    weight.data = over_memory()             # a new storage object over the same address
    assert (weight.data_ptr(), weight._version) == (address, version)
    _check(compiled, model, x)
    torch.testing.assert_close(weight.detach(), rewritten)
    sites = _new_sites(before)
    # body: calls 3 and 4 reuse its copy; stem: call 3 reuses, call 4 (after the swap) misses
    assert sorted((s.hits, s.misses, s.holding) for s in sites) == [(1, 3, False), (2, 2, True)]


def test_new_parameter_object(model):
    compiled = torch.compile(model, backend="fuse_all", options=ON)
    x = torch.randn(2, 3, 16, 16)
    for _ in range(3):
        _check(compiled, model, x)
    model.stem.weight = nn.Parameter(torch.randn_like(model.stem.weight))
    for _ in range(3):
        _check(compiled, model, x)


def test_inference_tensors_are_not_cached():
    with torch.inference_mode():
        torch.manual_seed(1)
        net = Net().eval()
        before = _site_ids()
        compiled = torch.compile(net, backend="fuse_all", options=ON)
        x = torch.randn(2, 3, 16, 16)
        for step in range(4):
            got, expected = compiled(x), net(x)
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
            net.stem.weight.mul_(0.9)     # inference tensors: no version counter to notice this
    sites = _new_sites(before)
    assert sites and all(s.hits == 0 and not s.holding for s in sites)


def test_copy_released_with_the_model():
    torch.manual_seed(2)
    net = Net().eval()
    compiled, x, sites = _compiled_and_called(net, 3)
    assert len(sites) == 2 and all(s.holding for s in sites)
    del net, compiled
    torch._dynamo.reset()   # Dynamo's guards refer to the parameters; the host program may live on
    gc.collect()
    assert not any(s.holding for s in sites)


@pytest.mark.parametrize("options", [{"fallback": False, "weight_layout_cache": False}, {"fallback": False}],
                         ids=["off", "default"])
def test_option_off_and_default_render_no_cache(model, options):
    """Off by default: writes through `p.data` do not bump `_version`, so the cache could not see them."""
    compiled = torch.compile(model, backend="fuse_all", options=options)
    x = torch.randn(2, 3, 16, 16)
    _check(compiled, model, x)
    assert all("ChannelsLastWeight" not in s for s in _host_sources().values())


def test_training_graphs_have_no_cache(model):
    """Training: weights change every step; the forward and backward graphs convert per call as before,
    and the steps match eager's."""
    model.train()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="fuse_all", options=ON)
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (model, reference))
    x = torch.randn(2, 3, 16, 16)
    for _ in range(3):
        for net, fn, o in ((model, compiled, opt), (reference, reference, ref_opt)):
            o.zero_grad()
            fn(x).square().mean().backward()
            o.step()
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    sources = _host_sources()
    assert any(g.endswith("_fwd") for g in sources) and any(g.endswith("_bwd") for g in sources)
    assert all("ChannelsLastWeight" not in s for s in sources.values())


def test_channels_last_rule_matches_torch():
    """The render-time layout check (`weight_layouts._is_channels_last`) against torch's own, on sizes with
    ones and zeros and on every dimension order."""
    import itertools

    import sympy

    from fuse_all_ir.program import TensorSpec
    checked = 0
    for size in [(4, 3, 3, 3), (8, 1, 3, 3), (16, 8, 1, 1), (1, 5, 1, 7), (2, 3, 0, 4), (3, 1, 1, 1)]:
        for order in itertools.permutations(range(4)):
            t = torch.empty([size[d] for d in order]).permute([order.index(d) for d in range(4)])
            spec = TensorSpec("float32", tuple(sympy.Integer(n) for n in t.shape),
                              tuple(sympy.Integer(s) for s in t.stride()))
            assert weight_layouts._is_channels_last(spec) == t.is_contiguous(memory_format=torch.channels_last), \
                (size, order, t.stride())
            checked += 1
    assert checked == 6 * 24
    symbolic = TensorSpec("float32", (sympy.Symbol("s0"), sympy.Integer(3), sympy.Integer(3), sympy.Integer(3)),
                          (sympy.Integer(27), sympy.Integer(9), sympy.Integer(3), sympy.Integer(1)))
    assert weight_layouts._is_channels_last(symbolic) is None

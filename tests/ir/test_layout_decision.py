"""`decide_channels_last`: Inductor's layout-optimisation rules, each case on a small traced conv graph, and
the same answer as Inductor's own `GraphLowering.decide_layout_opt` (the cross-check only; fuse-all's code
does not import it). oneDNN off stands in for a GPU: the rules past the CPU one are device-neutral."""
from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from fuse_all_ir import decide_channels_last

# switching oneDNN off (the stand-in for a GPU) makes torch warn about oneDNN's TF32 on Intel GPUs
pytestmark = pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")


def _trace(fn, *shapes, symbolic=False):
    args = [torch.randn(s) for s in shapes]
    return make_fx(fn, tracing_mode="symbolic" if symbolic else "fake")(*args)


def _inductor(gm, is_inference):
    from torch._inductor import config
    from torch._inductor.graph import GraphLowering
    with config.patch(layout_optimization=True, force_layout_optimization=False):
        return GraphLowering.decide_layout_opt(gm, is_inference=is_inference)


@contextlib.contextmanager
def _gpu_rules():
    with torch.backends.mkldnn.flags(enabled=False):
        yield


def two_convs(x, w1, w2):
    return F.conv2d(F.conv2d(x, w1, padding=1).relu(), w2, padding=1)


def grouped(x, w1, w2):                   # 128 -> 128 in 2 groups of 64 input channels: most of the flops
    return F.conv2d(F.conv2d(x, w1, padding=1).relu(), w2, padding=1, groups=2)


def depthwise(x, w1, w2):                 # groups of one input channel: channels-last still pays
    return F.conv2d(F.conv2d(x, w1, padding=1).relu(), w2, padding=1, groups=128)


def in_out(x, w1, w2):                    # 128 -> 32 with a 3x3 kernel
    return F.conv2d(F.conv2d(x, w1, padding=1).relu(), w2, padding=1)


def many_pointwise(x, w1, w2):
    y = F.conv2d(x, w1, padding=1)
    for _ in range(160):
        y = (y * 1.01).sin()
    return y


X = (2, 3, 16, 16)
CASES = {
    # name: (fn, weight shapes, inference decision, training decision, reason fragment for a refusal)
    "default": (two_convs, [(128, 3, 3, 3), (128, 128, 3, 3)], True, True, ""),
    "grouped": (grouped, [(128, 3, 3, 3), (128, 64, 3, 3)], False, False, "grouped"),
    "depthwise": (depthwise, [(128, 3, 3, 3), (128, 1, 3, 3)], True, True, ""),
    "in_out": (in_out, [(128, 3, 3, 3), (32, 128, 3, 3)], True, False, "input than output"),
    "all_small": (two_convs, [(16, 3, 3, 3), (32, 16, 3, 3)], True, False, "<=64"),
    "few_convs": (many_pointwise, [(128, 3, 3, 3), (1, 1, 1, 1)], False, False, "only 1 convolutions"),
}


@pytest.mark.parametrize("is_inference", [True, False], ids=["inference", "training"])
@pytest.mark.parametrize("case", list(CASES))
def test_rules_match_inductor(case, is_inference):
    fn, weights, for_inference, for_training, fragment = CASES[case]
    gm = _trace(fn, X, *weights)
    with _gpu_rules():
        decision = decide_channels_last(gm, is_inference)
        expected = for_inference if is_inference else for_training
        assert bool(decision) is expected, decision.reason
        assert decision.apply is _inductor(gm, is_inference)
    if not expected:
        assert fragment in decision.reason
    assert "\n" not in decision.reason and decision.reason


def test_inference_estimate_is_flop_weighted():
    gm = _trace(grouped, X, (128, 3, 3, 3), (128, 64, 3, 3))
    with _gpu_rules():
        reason = decide_channels_last(gm, True).reason
    # conv 1: 3 -> 128 (default, 0.823x), conv 2: 64 per group (grouped, 1.358x) with ~21x conv 1's flops
    assert "inference, 2 convolutions: flop-weighted estimate 1.33" in reason, reason
    assert "grouped 96%" in reason and "default 4%" in reason, reason


def test_dynamic_shapes_and_no_convolutions():
    gm = _trace(two_convs, X, (128, 3, 3, 3), (128, 128, 3, 3), symbolic=True)
    with _gpu_rules():
        decision = decide_channels_last(gm, True)
        assert not decision and "dynamic shapes" in decision.reason
        assert _inductor(gm, True) is False
    plain = _trace(lambda x: x.relu() + 1, X)
    assert decide_channels_last(plain, True).reason == "no convolutions"
    assert str(decide_channels_last(plain, False)) == "channels-last not applied: no convolutions"


needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs oneDNN")


@needs_onednn
def test_cpu_convolutions_with_onednn():
    gm = _trace(grouped, X, (128, 3, 3, 3), (128, 64, 3, 3))   # refused on a GPU, taken on CPU
    for is_inference in (True, False):
        decision = decide_channels_last(gm, is_inference, weights_kept=True)
        assert decision and "oneDNN" in decision.reason
        assert _inductor(gm, is_inference) is True
    assert decide_channels_last(gm, False)       # a training graph's weights are copied whatever the layout


@needs_onednn
def test_cpu_inference_keeps_dense_convolutions_nchw_when_weights_would_be_copied_per_call():
    """A k x k weight given to the graph in NCHW is copied to channels-last by ATen on every call of an NHWC
    convolution; for dense convolutions that costs more than the NHWC kernels save (module docstring)."""
    gm = _trace(grouped, X, (128, 3, 3, 3), (128, 64, 3, 3))
    decision = decide_channels_last(gm, True)
    assert not decision
    mb = (128 * 3 * 9 + 128 * 64 * 9) * 4 / 2**20
    assert decision.reason == (f"2 CPU convolutions, none depthwise: NHWC would copy 2 k x k weights ({mb:.1f} MB) "
                               "to channels-last on every call, which costs more than oneDNN's NHWC kernels save "
                               "on dense convolutions")
    # a depthwise convolution gains more from NHWC than the copies cost: channels-last
    assert decide_channels_last(_trace(depthwise, X, (128, 3, 3, 3), (128, 1, 3, 3)), True)
    # nothing to copy: 1 x 1 kernels are channels-last in either layout, and so are weights given channels-last
    one_by_one = _trace(lambda x, w1, w2: F.conv2d(F.conv2d(x, w1).relu(), w2), X, (128, 3, 1, 1), (64, 128, 1, 1))
    assert decide_channels_last(one_by_one, True)
    weights = [torch.randn(128, 3, 3, 3).to(memory_format=torch.channels_last),
               torch.randn(128, 128, 3, 3).to(memory_format=torch.channels_last)]
    given_channels_last = make_fx(two_convs, tracing_mode="fake")(torch.randn(X), *weights)
    assert decide_channels_last(given_channels_last, True)
    # the weight cache keeps the parameters' copies, not those of a weight computed in the graph
    assert decide_channels_last(gm, True, weights_kept=True)
    computed = _trace(lambda x, w1, w2: two_convs(x, w1 * 2, w2 * 2), X, (128, 3, 3, 3), (128, 128, 3, 3))
    assert not decide_channels_last(computed, True, weights_kept=True)


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu_rules", "gpu_rules"])
def test_training_graphs_take_channels_last_by_the_same_rules(gpu):
    """Training was switched off while issue 11 (a wrong-looking second SGD step) was open; it was float32
    rounding (tests/ops/test_channels_last.py: exact in float64), so training follows Inductor's rules again."""
    gm = _trace(two_convs, X, (128, 3, 3, 3), (128, 128, 3, 3))
    with _gpu_rules() if gpu else contextlib.nullcontext():
        decision = decide_channels_last(gm, is_inference=False)
        assert decision.apply, decision
        assert decision.reason.startswith("training with 2 convolutions" if gpu else "2 CPU convolutions"), decision
        assert _inductor(gm, False) is True

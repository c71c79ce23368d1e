"""Graphs with convolutions on CPU run their activations channels-last (`fuse_all_ir.layout`): results and
output strides as eager's, whatever the graph returns."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fuse_all
import fuse_all_ir
from fuse_all_ir import layout


@pytest.fixture
def applied(monkeypatch):
    """What `prefer_channels_last` answered for each graph of the test."""
    answers = []
    original = layout.prefer_channels_last

    def spy(gm, example_inputs, **kwargs):
        decision = original(gm, example_inputs, **kwargs)
        answers.append(bool(decision))
        return decision
    monkeypatch.setattr(fuse_all_ir, "prefer_channels_last", spy)
    return answers


def _block(w1, w2, dw):
    def fn(x):
        y = F.relu6(F.conv2d(x, w1))                         # 1x1 expand
        z = F.hardswish(F.conv2d(y, dw, padding=1, groups=dw.shape[0]))   # 3x3 depthwise
        return F.conv2d(z, w2) + x, z                        # project + residual; z: a 4-D intermediate out
    return fn


def _weights():
    torch.manual_seed(0)
    return torch.randn(24, 8, 1, 1) * 0.3, torch.randn(8, 24, 1, 1) * 0.3, torch.randn(24, 1, 3, 3) * 0.3


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_convolutions_see_channels_last_outputs_keep_eager_strides(applied, memory_format):
    fn = _block(*_weights())
    x = torch.randn(2, 8, 13, 11).to(memory_format=memory_format)
    compiled = torch.compile(fn, backend="fuse_all", options={"fallback": False})
    with torch.no_grad():
        expected, got = fn(x), compiled(x)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)
        assert g.stride() == e.stride()
    assert applied == [memory_format is torch.contiguous_format]   # channels-last input: nothing to do
    graph = fuse_all.compiled_graphs()[-1]
    assert graph.fallback_reason is None


def test_dynamic_shapes_and_training_graphs(applied):
    fn = _block(*_weights())
    compiled = torch.compile(fn, backend="fuse_all", dynamic=True, options={"fallback": False})
    for size in (9, 12):
        x = torch.randn(2, 8, size, size + 1)
        with torch.no_grad():
            for e, g in zip(fn(x), compiled(x)):
                torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)
                assert g.stride() == e.stride()
    assert applied == [True]       # symbolic sizes: the rewrite holds (strides re-derived symbolically)
    # a training forward is rewritten too (its saved activations stay channels-last for the backward)
    torch.manual_seed(1)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    w_ref = w.detach().clone().requires_grad_()
    train = torch.compile(lambda x: F.conv2d(x, w).relu().sum(), backend="fuse_all", options={"fallback": False})
    applied.clear()
    x = torch.randn(1, 3, 8, 8)
    train(x).backward()
    F.conv2d(x, w_ref).relu().sum().backward()
    assert applied == [True]
    torch.testing.assert_close(w.grad, w_ref.grad, rtol=1e-5, atol=1e-5)
    assert w.grad.stride() == w_ref.grad.stride()

"""Graphs with convolutions on CPU run their activations channels-last (`fuse_all_ir.layout`): results and
output strides as eager's, whatever the graph returns."""
from __future__ import annotations

import copy
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import fuse_all
import fuse_all.emit
import fuse_all.logs
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


# ---- whole conv nets: inference and training steps against float64, layout decisions recorded -------------
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import layout_checks  # noqa: E402


def _compile(model):
    return torch.compile(model, backend="fuse_all", options={"fallback": False})


def _compile_keeping_weights(model):
    """Inference with `weight_layout_cache`: no per-call weight copy, so dense convolutions go channels-last."""
    return torch.compile(model, backend="fuse_all", options={"fallback": False, "weight_layout_cache": True})


def test_conv_bn_relu_inference_runs_channels_last_and_matches_eager():
    torch.manual_seed(0)
    model = layout_checks.ConvBNReLU()
    layout_checks.mt.randomize_norms(model)
    layout_checks.check_inference(model, torch.randn(2, 3, 16, 16), _compile_keeping_weights)
    (record,) = fuse_all.compiled_graphs()
    assert record.layout.startswith("channels-last applied: 3 CPU convolutions"), record.layout
    assert f"layout: {record.layout}" in record.report.to_text()
    assert record.report.to_json()["layout"] == record.layout
    summary = fuse_all.emit.summary(SimpleNamespace(graph=SimpleNamespace(graph_id=record.graph_id, kind="inference",
                                                                          device="cpu"),
                                                    compile_id=None, aot_name=None, phases={}), record)
    assert summary["layout"] == record.layout
    assert fuse_all.logs.summary_line(summary).endswith("; convolutions run channels-last")
    assert layout_checks.convolution_layouts(record) == ["NHWC"] * 3


def test_dense_inference_without_kept_weights_stays_nchw_and_matches_eager():
    """Channels-last would copy every k x k weight to NHWC on each call (layout_decision.py); dense
    convolutions of a CPU inference graph keep NCHW then, and a depthwise one still goes channels-last."""
    torch.manual_seed(0)
    model = layout_checks.ConvBNReLU()
    layout_checks.mt.randomize_norms(model)
    layout_checks.check_inference(model, torch.randn(2, 3, 16, 16), _compile)
    (record,) = fuse_all.compiled_graphs()
    assert record.layout.startswith("channels-last not applied: 3 CPU convolutions, none depthwise: NHWC would "
                                    "copy "), record.layout
    assert layout_checks.convolution_layouts(record) == ["NCHW"] * 3
    fuse_all.reset()
    torch._dynamo.reset()
    depthwise = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3, groups=8))
    layout_checks.check_inference(depthwise, torch.randn(2, 3, 16, 16), _compile)
    (record,) = fuse_all.compiled_graphs()
    assert record.layout.startswith("channels-last applied: 2 CPU convolutions"), record.layout
    assert layout_checks.convolution_layouts(record) == ["NHWC"] * 2


def test_conv_bn_relu_training_keeps_saved_activations_channels_last():
    torch.manual_seed(0)
    model = layout_checks.ConvBNReLU()
    layout_checks.mt.randomize_norms(model)
    layout_checks.check_training(model, torch.randn(2, 3, 16, 16), torch.randint(0, 10, (2,)), _compile)
    lines = layout_checks.layout_lines(fuse_all.compiled_graphs())
    assert lines["forward"] == ["channels-last applied: 3 CPU convolutions: oneDNN runs channels-last faster; "
                                "1 layout copy of convolution inputs"]
    # the backward saw the saved activations' real (channels-last) strides, not the traced NCHW ones
    assert lines["backward"] == ["strides re-derived from the saved activations' layout (channels-last forward)"]
    (backward,) = [r for r in fuse_all.compiled_graphs() if r.kind == "backward"]
    conv_backward = [e for e in backward.externs if "convolution_backward" in e.target]
    assert conv_backward


def test_conv_bn_relu_training_channels_last_is_exact_in_float64():
    """Issue 11: channels-last training looked wrong at the second SGD step in float32 (ResNet-50's loss on
    CPU, Conv-BN-ReLU's first-stage gradients on the H200). In float64 rounding cannot hide anything: three
    steps (saved activations channels-last, BatchNorm buffers written back, momentum) match eager float64 to
    1e-9, while a backward that misreads its channels-last saved activations is off by O(1)."""
    torch.manual_seed(0)
    model = layout_checks.ConvBNReLU()
    layout_checks.mt.randomize_norms(model)
    layout_checks.check_training_float64(model, torch.randn(2, 3, 16, 16), torch.randint(0, 10, (2,)), _compile)
    lines = layout_checks.layout_lines(fuse_all.compiled_graphs())
    assert lines["forward"][0].startswith("channels-last applied"), lines
    assert lines["backward"] == ["strides re-derived from the saved activations' layout (channels-last forward)"]


def test_float64_check_catches_a_backward_that_misreads_saved_activations(monkeypatch):
    """The check above can fail: with the forward's real output strides kept from AOTAutograd, the backward
    is compiled for NCHW saved activations and gets channels-last ones."""
    import fuse_all_capture.compat as capture_compat
    monkeypatch.setattr(capture_compat, "report_output_strides", lambda strides: True)
    torch.manual_seed(0)
    model = layout_checks.ConvBNReLU()
    layout_checks.mt.randomize_norms(model)
    with pytest.raises(AssertionError, match="float64 step 1 grads"):
        layout_checks.check_training_float64(model, torch.randn(2, 3, 16, 16), torch.randint(0, 10, (2,)),
                                             _compile, steps=1)


def test_layout_opt_off_by_environment(monkeypatch):
    monkeypatch.setenv("FUSE_ALL_LAYOUT_OPT", "0")
    torch.manual_seed(0)
    model = layout_checks.ConvBNReLU()
    layout_checks.check_training(model, torch.randn(2, 3, 16, 16), torch.randint(0, 10, (2,)), _compile, steps=1)
    lines = layout_checks.layout_lines(fuse_all.compiled_graphs())
    assert lines["forward"] == ["channels-last not applied: turned off (FUSE_ALL_LAYOUT_OPT=0 or options "
                                "layout_opt=False)"]
    assert lines["backward"] == [""]      # nothing to adopt: the forward kept its layout
    (forward,) = [r for r in fuse_all.compiled_graphs() if r.kind == "forward"]
    assert layout_checks.convolution_layouts(forward) == ["NCHW"] * 3
    torch._dynamo.reset()
    fuse_all.reset()
    compiled = torch.compile(model.eval(), backend="fuse_all", options={"layout_opt": True,
                                                                         "weight_layout_cache": True})
    with torch.no_grad():
        compiled(torch.randn(2, 3, 16, 16))
    (record,) = fuse_all.compiled_graphs()
    assert record.layout.startswith("channels-last applied"), record.layout    # the option overrides the variable


def test_dynamic_training_forward_keeps_its_layout():
    """Saved activations with symbolic strides cannot be reported to AOTAutograd as numbers; the backward
    would read channels-last data as NCHW, so such a forward keeps its traced layout."""
    torch.manual_seed(0)
    model = layout_checks.ConvBNReLU()
    compiled = torch.compile(model, backend="fuse_all", dynamic=True, options={"fallback": False})
    reference = copy.deepcopy(model)
    for size in (12, 16):
        x = torch.randn(2, 3, size, size)
        compiled(x)[0].sum().backward()
        reference(x)[0].sum().backward()
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, msg=name)
        model.zero_grad(), reference.zero_grad()
    forwards = [r.layout for r in fuse_all.compiled_graphs() if r.kind == "forward"]
    assert forwards and all(line.startswith("channels-last not applied") and "symbolic strides" in line
                            for line in forwards), forwards

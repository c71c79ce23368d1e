"""`fold_conv_batchnorm`: which inference conv -> BatchNorm [-> + residual] -> ReLU blocks become one cuDNN
call with folded weights, and that the rewritten graph computes the same (run here with a CPU stand-in for
the cuDNN ops; tests/cuda/test_conv_epilogue_cuda.py runs the real ones)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from fuse_all_ir import conv_epilogue
from fuse_all_ir.conv_epilogue import fold_conv_batchnorm

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def small_blocks_fold(monkeypatch):
    """These graphs are small: fold from any output size (MIN_OUTPUT_PER_WEIGHT still applies)."""
    monkeypatch.setattr(conv_epilogue, "MIN_OUTPUT", 0)


def _conv(x, w, b=None, stride=1, padding=1, groups=1):
    return aten.convolution(x, w, b, [stride, stride], [padding, padding], [1, 1], False, [0, 0], groups)


def _bn(y, g, b, m, v):
    return aten._native_batch_norm_legit_no_training(y, g, b, m, v, 0.1, 1e-5)[0]


def _cpu_conv_relu(x, w, b, stride, padding, dilation, groups):
    return torch.relu(torch.convolution(x, w, b, stride, padding, dilation, False, [0, 0], groups))


def _cpu_conv_add_relu(x, w, z, alpha, b, stride, padding, dilation, groups):
    return torch.relu(torch.convolution(x, w, b, stride, padding, dilation, False, [0, 0], groups) + alpha * z)


def _on_cpu(gm):
    """The rewritten graph with the cuDNN calls swapped for their definitions."""
    for node in gm.graph.nodes:
        if node.target is aten.cudnn_convolution_relu.default:
            node.target = _cpu_conv_relu
        elif node.target is aten.cudnn_convolution_add_relu.default:
            node.target = _cpu_conv_add_relu
    gm.recompile()
    return gm


def _params(c, affine=True):
    g, b = (torch.rand(c, dtype=torch.float64) + 0.5, torch.randn(c, dtype=torch.float64)) if affine else (None, None)
    return g, b, torch.randn(c, dtype=torch.float64) * 0.1, torch.rand(c, dtype=torch.float64) + 0.5


def _inputs(cin=8, cout=16, size=12, k=3, channels_last=False, conv_bias=False, affine=True):
    x, w = torch.randn(2, cin, size, size), torch.randn(cout, cin, k, k) / (cin * k * k) ** 0.5
    if channels_last:
        x, w = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
    g, b, m, v = (p.float() if p is not None else None for p in _params(cout, affine))
    cb = torch.randn(cout) if conv_bias else None
    return x, w, cb, g, b, m, v


def _targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def _check(fn, args, fused_ops: int):
    gm = make_fx(fn, tracing_mode="fake")(*args)
    assert fold_conv_batchnorm(gm, require_cudnn=False) == fused_ops
    targets = _targets(gm)
    fused = [t for t in targets if t in (aten.cudnn_convolution_relu.default, aten.cudnn_convolution_add_relu.default)]
    assert len(fused) == fused_ops
    gm.graph.lint()
    expected = fn(*[a.double() if isinstance(a, torch.Tensor) else a for a in args])
    got = _on_cpu(gm)(*args)
    torch.testing.assert_close(torch.utils._pytree.tree_map(lambda t: t.double(), got), expected,
                               rtol=1e-5, atol=1e-5)
    return targets


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("conv_bias", [False, True])
@pytest.mark.parametrize("affine", [True, False])
def test_conv_batchnorm_relu_becomes_one_call(channels_last, conv_bias, affine):
    args = _inputs(channels_last=channels_last, conv_bias=conv_bias, affine=affine)
    targets = _check(lambda x, w, cb, g, b, m, v: torch.relu(_bn(_conv(x, w, cb), g, b, m, v)), args, 1)
    # the old block is gone
    assert not {aten.convolution.default, aten._native_batch_norm_legit_no_training.default,
                aten.relu.default} & set(targets)


@pytest.mark.parametrize("residual_first", [False, True])
def test_a_residual_add_goes_into_the_epilogue(residual_first):
    x, w, cb, g, b, m, v = _inputs(cin=8, cout=8, k=1, channels_last=True)
    z = torch.randn(2, 8, 12, 12).to(memory_format=torch.channels_last)

    def block(x, w, g, b, m, v, z):
        y = _bn(_conv(x, w, padding=0), g, b, m, v)
        return torch.relu(z + y if residual_first else y + z)
    assert aten.cudnn_convolution_add_relu.default in _check(block, (x, w, g, b, m, v, z), 1)


def test_a_bottleneck_folds_every_block_and_keeps_the_shortcut():
    """ResNet's bottleneck: three conv-bn blocks, the last with the residual; the downsample shortcut's
    conv-bn has no ReLU of its own and stays."""
    x = torch.randn(2, 8, 10, 10)
    ws = [torch.randn(4, 8, 1, 1) / 3, torch.randn(4, 4, 3, 3) / 6, torch.randn(16, 4, 1, 1) / 2,
          torch.randn(16, 8, 1, 1) / 3]
    ps = [[p.float() for p in _params(c)] for c in (4, 4, 16, 16)]

    def bottleneck(x, w0, w1, w2, w3, *p):
        p = [p[i:i + 4] for i in range(0, 16, 4)]
        y = torch.relu(_bn(_conv(x, w0, padding=0), *p[0]))
        y = torch.relu(_bn(_conv(y, w1), *p[1]))
        y = _bn(_conv(y, w2, padding=0), *p[2])
        return torch.relu(y + _bn(_conv(x, w3, padding=0), *p[3]))
    targets = _check(bottleneck, (x, *ws, *[t for p in ps for t in p]), 3)
    assert targets.count(aten.convolution.default) == 1
    assert targets.count(aten._native_batch_norm_legit_no_training.default) == 1


@pytest.mark.parametrize("case", ["conv_returned", "bn_read_twice", "no_relu", "transposed", "small_output",
                                  "float64", "relu_of_other"])
def test_blocks_that_stay(case):
    x, w, cb, g, b, m, v = _inputs()
    fns = {
        "conv_returned": lambda x, w, g, b, m, v: (lambda y: (y, torch.relu(_bn(y, g, b, m, v))))(_conv(x, w)),
        "bn_read_twice": lambda x, w, g, b, m, v: (lambda y: (torch.relu(y), y.sum()))(_bn(_conv(x, w), g, b, m, v)),
        "no_relu": lambda x, w, g, b, m, v: _bn(_conv(x, w), g, b, m, v) + 1,
        "transposed": lambda x, w, g, b, m, v: torch.relu(_bn(aten.convolution(
            x, w, None, [1, 1], [1, 1], [1, 1], True, [0, 0], 1), g, b, m, v)),
        "relu_of_other": lambda x, w, g, b, m, v: torch.relu(_bn(_conv(x, w), g, b, m, v) * 2),
    }
    if case == "small_output":     # 2 x 16 x 1 x 1 outputs against a 16 x 8 x 3 x 3 weight
        x = torch.randn(2, 8, 1, 1)
        fn = lambda x, w, g, b, m, v: torch.relu(_bn(_conv(x, w), g, b, m, v))  # noqa: E731
    elif case == "float64":
        x, w, g, b, m, v = (t.double() for t in (x, w, g, b, m, v))
        fn = lambda x, w, g, b, m, v: torch.relu(_bn(_conv(x, w), g, b, m, v))  # noqa: E731
    elif case == "transposed":
        w = torch.randn(8, 16, 3, 3)
        fn = fns[case]
    else:
        fn = fns[case]
    _check(fn, (x, w, g, b, m, v), 0)


def test_an_output_cudnn_would_lay_out_otherwise_stays():
    """The traced result is NCHW but the weight's strides look channels-last (a 1x1 weight converted to
    channels-last is also NCHW-contiguous: size-1 dims): ATen's cuDNN calls would write channels-last, and
    the host program passes ATen results on unchecked, so the block must stay."""
    x, w, cb, g, b, m, v = _inputs(k=1)
    conv = lambda x, w: aten.convolution(x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)  # noqa: E731
    gm = make_fx(lambda x, w, g, b, m, v: torch.relu(_bn(conv(x, w), g, b, m, v)), tracing_mode="fake")(
        x, w, g, b, m, v)
    weight = [n for n in gm.graph.nodes if n.op == "placeholder"][1]
    traced = weight.meta["val"]
    with traced.fake_mode:
        weight.meta["val"] = torch.empty_strided(traced.shape, (8, 1, 8, 8), dtype=traced.dtype)
    assert weight.meta["val"].is_contiguous()    # ambiguous: both layouts at once
    assert fold_conv_batchnorm(gm, require_cudnn=False) == 0
    weight.meta["val"] = traced
    assert fold_conv_batchnorm(gm, require_cudnn=False) == 1

"""Grouped convolutions of 1 x 1 inputs as batched products on the GPU (marker `cuda`;
fuse_all_ir/conv_as_matmul.py): ResNeXt bottlenecks at a 1 x 1 activation in eval mode, channels-last and
NCHW, judged against float64 relative to eager's own error (float32 convolutions: TF32 off), the blocks
that must stay convolutions, the switch, and training graphs left alone.

    source bench/gpu_env.sh && python -m pytest tests/cuda/test_conv_as_matmul_cuda.py -m cuda -q
"""
from __future__ import annotations

import copy

import pytest
import torch

import fuse_all
from fuse_all_optest import TOL, assert_near_float64, compile_fn, extern_targets, judged_inference, vary_batchnorms

pytestmark = pytest.mark.cuda
DEVICE = "cuda"
PRODUCTS = {"aten.bmm.default"}
CONVOLUTIONS = {"aten.convolution.default"}


class ResNeXtBlock(torch.nn.Module):
    def __init__(self, channels=256, groups=32, width=256, stride=1):
        super().__init__()
        self.conv1, self.bn1 = torch.nn.Conv2d(channels, width, 1, bias=False), torch.nn.BatchNorm2d(width)
        self.conv2 = torch.nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(width)
        self.conv3, self.bn3 = torch.nn.Conv2d(width, channels, 1, bias=False), torch.nn.BatchNorm2d(channels)
        vary_batchnorms(self)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        return torch.relu(self.bn3(self.conv3(y)) + x)


def judged(model, x):
    # a 1 x 1 result's strides along its size-1 dims are arbitrary (channels-last and NCHW are one layout)
    judged_inference(model, x, same_strides=False)


@pytest.mark.parametrize("channels_last", [True, False], ids=["channels_last", "nchw"])
@pytest.mark.parametrize("stride", [1, 2])
def test_grouped_convolution_of_one_pixel_is_a_product(channels_last, stride):
    model = ResNeXtBlock(stride=stride).to(DEVICE).eval()
    x = torch.randn(64, 256, 1, 1, device=DEVICE)
    if channels_last:
        model, x = model.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)
    judged(model, x)
    assert extern_targets(PRODUCTS) == ["aten.bmm.default"]
    assert len(extern_targets(CONVOLUTIONS)) == 2          # the two 1 x 1 convolutions stay


def test_larger_activations_stay_convolutions():
    judged(ResNeXtBlock().to(DEVICE).eval(), torch.randn(8, 256, 2, 2, device=DEVICE))
    assert extern_targets(PRODUCTS) == [] and len(extern_targets(CONVOLUTIONS)) == 3


def test_the_switch_keeps_the_convolution(monkeypatch):
    monkeypatch.setenv("FUSE_ALL_GROUPED_CONV_MATMUL", "0")
    judged(ResNeXtBlock().to(DEVICE).eval(), torch.randn(16, 256, 1, 1, device=DEVICE))
    assert extern_targets(PRODUCTS) == [] and len(extern_targets(CONVOLUTIONS)) == 3


def test_training_graphs_keep_the_convolution():
    model = ResNeXtBlock(channels=64, groups=8, width=64).to(DEVICE).train()
    x = torch.randn(16, 64, 1, 1, device=DEVICE, requires_grad=True)
    fuse_all.reset()
    torch._dynamo.reset()
    compile_fn(model, "triton")(x).sum().backward()
    assert extern_targets(PRODUCTS) == []


def test_a_changing_batch_stays_a_product():
    """Dynamo's automatic dynamic shapes: the second batch size recompiles with a symbolic batch, which the
    rewrite keeps; the third reuses that graph."""
    model = ResNeXtBlock().to(DEVICE).eval()
    fuse_all.reset()
    torch._dynamo.reset()
    fn = compile_fn(model, "triton")
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        for batch in (16, 24, 8):
            x = torch.randn(batch, 256, 1, 1, device=DEVICE)
            reference = copy.deepcopy(model).double()(x.double())
            assert_near_float64(fn(x), model(x), reference, f"batch {batch}", atol=TOL[torch.float32][0])
    graphs = fuse_all.compiled_graphs()
    assert len(graphs) == 2
    assert all("aten.bmm.default" in [e.target for e in g.externs] for g in graphs)

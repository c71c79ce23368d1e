"""Inference conv + BatchNorm [+ residual] + ReLU as one cuDNN call on the GPU (marker `cuda`;
fuse_all_ir/conv_epilogue.py): ResNet blocks in eval mode, channels-last and NCHW, judged against float64
relative to eager's own error, with float32 convolutions (TF32 off) so that the fold's one extra rounding
per weight is what is measured; and the switch that keeps the old path.

    source bench/gpu_env.sh && python -m pytest tests/cuda/test_conv_epilogue_cuda.py -m cuda -q
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import fuse_all
from fuse_all_optest import compile_fn, extern_targets, judged_inference, vary_batchnorms

pytestmark = pytest.mark.cuda
DEVICE = "cuda"
FUSED = {"aten.cudnn_convolution_relu.default", "aten.cudnn_convolution_add_relu.default"}


class Bottleneck(torch.nn.Module):
    def __init__(self, cin, width, stride=1):
        super().__init__()
        cout = width * 4
        self.conv1, self.bn1 = torch.nn.Conv2d(cin, width, 1, bias=False), torch.nn.BatchNorm2d(width)
        self.conv2 = torch.nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(width)
        self.conv3, self.bn3 = torch.nn.Conv2d(width, cout, 1, bias=False), torch.nn.BatchNorm2d(cout)
        self.down = (torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 1, stride, bias=False), torch.nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else torch.nn.Identity())
        vary_batchnorms(self)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        return torch.relu(self.bn3(self.conv3(y)) + self.down(x))


def judged(model, x):
    judged_inference(model, x)


@pytest.mark.parametrize("channels_last", [True, False], ids=["channels_last", "nchw"])
@pytest.mark.parametrize("stride", [1, 2])
def test_bottleneck_blocks_fold(channels_last, stride):
    model = Bottleneck(64, 64, stride).to(DEVICE).eval()
    x = torch.randn(32, 64, 56, 56, device=DEVICE)
    if channels_last:
        model, x = model.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)
    judged(model, x)
    calls = extern_targets(FUSED)
    assert "aten.cudnn_convolution_relu.default" in calls
    assert "aten.cudnn_convolution_add_relu.default" in calls
    # blocks under MIN_OUTPUT (2M elements) keep their generated kernel: the strided 3x3's 1.6M
    assert len(calls) == (3 if stride == 1 else 2)
    # called through torch's Python bindings (host.BOUND_FUNCTIONS), not the slower OpOverloads
    source = Path(fuse_all.compiled_graphs()[-1].output_code).read_text()
    assert "= torch._C._VariableFunctions.cudnn_convolution_relu   #" in source
    assert "= torch._C._VariableFunctions.cudnn_convolution_add_relu   #" in source
    assert "torch.ops.aten.cudnn_convolution" not in source


def test_the_switch_keeps_the_generated_epilogue(monkeypatch):
    monkeypatch.setenv("FUSE_ALL_CONV_EPILOGUE", "0")
    judged(Bottleneck(64, 64).to(DEVICE).eval(), torch.randn(32, 64, 56, 56, device=DEVICE))
    assert extern_targets(FUSED) == []


def test_training_mode_and_gradients_do_not_fold():
    model = Bottleneck(64, 32).to(DEVICE).train()
    x = torch.randn(4, 64, 16, 16, device=DEVICE, requires_grad=True)
    fuse_all.reset()
    torch._dynamo.reset()
    compile_fn(model, "triton")(x).sum().backward()
    assert extern_targets(FUSED) == []

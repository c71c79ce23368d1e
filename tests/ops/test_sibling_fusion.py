"""Fusion coverage end to end: BatchNorm and LayerNorm backward (their sums over one range read the same
gradient: sibling fusion; the pointwise work around BatchNorm's statistics walks (N, C, H, W) while they
loop C x (N, H, W): full_space.py) and a small conv net's training step, on both codegens (Triton in the
interpreter on CPU). Values and gradients against eager, gradients judged against float64 relative to
eager's own error; each test also checks the kernels the graphs became, so it fails if the fusion is lost."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fuse_all
from fuse_all_optest import BOTH, check, make


def rg(shape, layout="contiguous"):
    return make(shape, torch.float32, layout, requires_grad=True)


def graph(kind):
    (found,) = [g for g in fuse_all.compiled_graphs() if g.kind == kind]
    assert found.fallback_reason is None
    return found


def merge_notes(kind="backward") -> list[str]:
    """The report's reasons of kernels merged as siblings or whole kernels read directly (siblings.py)."""
    return [g["why"] for g in graph(kind).report.groups if "siblings" in g["why"] or "directly" in g["why"]]


def reduces(kernel) -> int:
    return sum(type(s).__name__ == "Reduce" for s in kernel.statements())


def batch_norm_train(x, w, b):
    return F.batch_norm(x, None, None, w, b, training=True).sin()


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b).tanh()


@pytest.mark.parametrize("codegen", BOTH)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_batch_norm_backward(codegen, layout):
    fuse_all.reset()
    check(batch_norm_train, rg((4, 6, 5, 7), layout), rg((6,)), rg((6,)), codegen=codegen, grad=True,
          atol=1e-4, rtol=1e-4, grad_vs_float64=True)
    # statistics and normalisation in one kernel; the backward's sums (weight grad sum(g * xhat), bias grad
    # sum(g)) with the pointwise work before and after them in one kernel, which reads g once
    assert len(graph("forward").kernels) == 1
    (backward,) = graph("backward").kernels
    assert reduces(backward) >= 2 and len(backward.outputs) == 3     # grad of x, of the weight, of the bias


@pytest.mark.parametrize("codegen", BOTH)
def test_layer_norm_backward(codegen):
    fuse_all.reset()
    check(layer_norm, rg((3, 5, 24)), rg((24,)), rg((24,)), codegen=codegen, grad=True, atol=1e-4, rtol=1e-4,
          grad_vs_float64=True)
    # the weight and bias grads: column sums over the 15 rows per feature, siblings reading the same grad
    notes = merge_notes()
    assert any("2 reduction(s) over (3, 5) per point of (24); siblings" in n and "both read" in n
               for n in notes), notes
    assert len(graph("backward").kernels) == 2


class ResidualNet(nn.Module):
    """conv-bn-relu-conv-bn + shortcut conv-bn, relu, pooling, linear: BatchNorm backward sums, and the
    gradient of the block's input flowing into both branches."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.short, self.bn3 = nn.Conv2d(3, 8, 1, bias=False), nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)) + self.bn3(self.short(x)))
        return self.fc(h.mean((2, 3))).log_softmax(-1)


@pytest.mark.parametrize("codegen", BOTH)
def test_conv_net_training_step(codegen, monkeypatch):
    # NCHW as traced: channels-last training graphs add a gradient copy back to the traced strides
    monkeypatch.setenv("FUSE_ALL_LAYOUT_OPT", "0")
    monkeypatch.setenv("FUSE_ALL_SMALL_MATMUL_ROWS", "0")   # the kernel count below is the BatchNorms' (fc in ATen)
    fuse_all.reset()
    net = ResidualNet().train()
    check(net, rg((2, 3, 6, 6)), codegen=codegen, grad=True, atol=1e-4, rtol=1e-4, grad_vs_float64=True)
    # three BatchNorms: each backward's sums, with the where() of the ReLU and `x - mean`, one kernel
    assert len(graph("backward").kernels) <= 6 and len(merge_notes()) >= 2, merge_notes()

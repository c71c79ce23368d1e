"""Training: requires_grad inputs through composite ops; forward outputs and gradients (of inputs and module
parameters) must match eager. The same backend compiles AOTAutograd's forward and backward graphs."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fuse_all_optest import check, make, params

G = dict(atol=1e-4, rtol=1e-5)


def rg(shape, layout="contiguous", **kw):
    return make(shape, torch.float32, layout, requires_grad=True, **kw)


def pointwise_broadcast(x, y, z):
    return (x * y).sin() + z.exp() * x.tanh()          # y, z broadcast: their grads are reduced


def masks(x, y, z):
    return torch.where(x > 0, x * y, -x).clamp(-1, 2).relu() + x.abs() + F.leaky_relu(y * z, 0.1)


def softmax_logsoftmax(x, y, z):
    return torch.softmax(x * 2, -1) * y + torch.log_softmax(x + z, 1).sum(1, keepdim=True)


def reductions(x, y, z):
    return x.mean(0) + x.var(1, keepdim=True).sum() + x.amax(-1, keepdim=True) * y + (x * z).sum(-1, keepdim=True)


def views_cat(x, y, z):
    a = x.permute(2, 0, 1).reshape(13, -1)[:, ::2]
    b = torch.cat([x[:, :2], x[:, 3:] * y], 1)
    return a.sin(), torch.stack([b, b.exp()], 0).flatten(0, 1), x.unbind(1)[2] * z[:, 0]


def norm_layers(x, y, z):
    return (F.layer_norm(x, (13,), y, y.cos()) + F.gelu(x, approximate="tanh") + F.rms_norm(x, (13,), y)
            + F.group_norm(x, 5) * z)


def activations(x, y, z):
    return F.silu(x) + F.mish(y * x) + F.softplus(x, beta=2) + F.elu(x) + F.hardswish(x) + torch.sigmoid(z) * x


FUNCS = {
    "pointwise_broadcast": pointwise_broadcast,
    "masks": masks,
    "softmax_logsoftmax": softmax_logsoftmax,
    "reductions": reductions,
    "views_cat": views_cat,
    "norm_layers": norm_layers,
    "activations": activations,
}


@pytest.mark.parametrize("name,layout,codegen", params(
    [(n, "contiguous") for n in FUNCS] + [("pointwise_broadcast", "transposed"), ("softmax_logsoftmax", "sliced"),
                                        ("views_cat", "transposed")],
    triton=lambda n, lay: lay == "contiguous" and n in ("pointwise_broadcast", "softmax_logsoftmax",
                                                         "reductions")))
def test_grad_composites(name, layout, codegen):
    x = rg((4, 5, 13), layout)
    y = rg((13,))
    z = rg((4, 5, 1))
    check(FUNCS[name], x, y, z, codegen=codegen, grad=True, **G)


def test_grad_with_int_and_bool_inputs():
    """Non-differentiable inputs (indices, masks) mixed with differentiable ones."""
    def fn(w, idx, m, x):
        e = F.embedding(idx, w)
        return (e * x).masked_fill(m, 0.0).sum(-1), w.gather(0, idx[:, :1].expand(-1, 4))

    check(fn, rg((10, 4)), make((3, 5), torch.int64, low=0, high=10), make((3, 5, 4), torch.bool), rg((3, 5, 4)),
          grad=True, **G)


def test_grad_amax_ties():
    """amax/max split the gradient evenly among tied maxima (eager semantics)."""
    def fn(x):
        return x.amax(-1) * 2 + x.max(0).values.sum()

    x = make((4, 6), torch.float32, low=-2, high=3).round().requires_grad_()
    check(fn, x, grad=True, **G)


def test_grad_matmul_epilogue():
    def fn(x, w, b):
        return F.gelu(F.linear(x, w, b)).softmax(-1)

    check(fn, rg((3, 4, 9)), rg((7, 9), "transposed"), rg((7,)), grad=True, **G)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.ln = nn.LayerNorm(6)
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        h = F.relu(self.bn(self.conv(x)))          # train-mode batch norm: running stats updated too
        h = h.mean((2, 3))
        return self.fc(F.gelu(self.ln(h))).log_softmax(-1)


@pytest.mark.parametrize("layout,codegen", params(["contiguous", "channels_last"], triton=(0,)))
def test_grad_module(layout, codegen):
    """Parameter gradients and the batch norm's running stats of a small conv/bn/ln/linear block. The conv's
    weight gradient sums over batch and space in an order that depends on the layout and the CPU's vector
    width: gradients are judged against float64, relative to eager's own error."""
    m = Block().train()
    x = make((4, 3, 6, 7), torch.float32, layout, requires_grad=True)
    check(m, x, codegen=codegen, grad=True, atol=1e-4, rtol=1e-4, grad_vs_float64=True)


def test_grad_inplace_on_intermediate():
    def fn(x, y):
        h = x * y
        h.add_(1).mul_(2)     # (relu_ here would break eager's own backward: it saves its output)
        h[:, 0] = 1.0
        return h.sum(0) + x.sigmoid().mean()

    check(fn, rg((5, 6)), rg((5, 6), "transposed"), grad=True, **G)

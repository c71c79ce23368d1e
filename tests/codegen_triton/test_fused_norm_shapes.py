"""The kernels fusion now makes around BatchNorm (statistics, or the backward's two sums, with the pointwise
work over (N, C, H, W) that walks their C x (N, H, W) space in another order, and per-element stores in the
reduction phases) rendered in every Triton shape: persistent, looped with a tiny RBLOCK (many loop steps),
and the column plan of channels-last inputs; run in the interpreter against eager (float64 reference for
the sums)."""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import fuse_all_ir as ir

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def batchnorm_forward(x, w, b):
    mean = x.mean((0, 2, 3), keepdim=True)
    var = (x - mean).square().mean((0, 2, 3), keepdim=True)
    return ((x - mean) * torch.rsqrt(var + 1e-5) * w[None, :, None, None] + b[None, :, None, None],)


def batchnorm_relu_backward(g, x, y, mean, rstd, w):
    gr = torch.where(y > 0, g, 0.0)
    xc = x - mean[None, :, None, None]
    s1, s2 = gr.sum((0, 2, 3)), (gr * xc).sum((0, 2, 3))
    n = x.numel() // x.shape[1]
    scale = (w * rstd)[None, :, None, None]
    gx = scale * (gr - s1[None, :, None, None] / n - xc * (s2 * rstd * rstd)[None, :, None, None] / n)
    return gx, s2 * rstd, s1


def inputs(fn, layout):
    torch.manual_seed(0)
    shape = (3, 5, 6, 7)

    def t(*size):
        v = torch.randn(*size)
        return v.to(memory_format=torch.channels_last) if layout == "channels_last" and v.dim() == 4 else v
    if fn is batchnorm_forward:
        return [t(*shape), t(5), t(5)]
    return [t(*shape), t(*shape), t(*shape), t(5), t(5).abs() + 0.5, t(5)]


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("shape", ["persistent", "looped"])
@pytest.mark.parametrize("fn", [batchnorm_forward, batchnorm_relu_backward], ids=["forward", "backward"])
def test_fused_batchnorm_kernels(fn, shape, layout, tmp_path):
    from fuse_all_codegen_triton import TritonTarget
    args = inputs(fn, layout)
    compiled = ir.lower(make_fx(fn)(*args), list(args), "g", validate=True)
    program = compiled.program
    (kernel,) = program.kernels.values()          # the whole normalisation is one kernel
    assert kernel.reduction and len(kernel.outputs) == len(fn(*args))
    target = TritonTarget(force_looped=True, rblock=4) if shape == "looped" else TritonTarget()
    got = ir.load_host_program(ir.render_host_program(program, target), str(tmp_path)).call(list(args))   # the boxed call empties its list
    expected = fn(*args)
    reference = fn(*[a.double() for a in args])
    for a, e, r in zip(got, expected, reference):
        assert a.shape == e.shape
        error, eager_error = (a.double() - r).abs().max().item(), (e.double() - r).abs().max().item()
        assert error <= max(10 * eager_error, 1e-5 * r.abs().max().item()), (error, eager_error)

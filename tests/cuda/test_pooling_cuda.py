"""Pooling on the GPU (marker `cuda`): max_pool2d (values and indices) and avg_pool2d with their backwards as
Triton kernels at ResNet's stem size, contiguous and channels-last, float32 and bfloat16, against eager
(whose kernels scan windows alike on both devices: ties to the first maximum, the last NaN wins); no ATen
pooling call is left in the forward or the backward graph, and the max_pool backward shares a kernel with
the add that follows it.

Gradients through avg_pool2d are held to CPU eager: torch's CUDA channels-last avg_pool2d backward maps an
input pixel to its windows without the padding (`avg_pool2d_backward_out_cuda_frame_nhwc`, pytorch#188344,
in torch 2.11 at least), so with padding > 0 CUDA eager itself is wrong on channels-last inputs (that, not
our kernels, failed the channels-last stem here). The max-pool gradient alone is still held to CUDA eager.
Indices are held to CPU eager too: CUDA's channels-last max-pool kernel starts each window's index at 0, not
at the window's first element, so a window with no element above -inf (all -inf or all padding) gets index 0
there and the first element's index on CPU and in CUDA's NCHW kernel, which is what we return.
Gradients with a reduction over the batch and the plane (the `w` of the stem: 25088 terms) are judged
against float64 relative to eager's own error (`grad_vs_float64`): a fixed 1e-5 is below float32's
rounding of such a sum in another order."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import fuse_all
import fuse_all_optest as ot

pytestmark = pytest.mark.cuda

POOLING_OPS = {"aten.max_pool2d_with_indices.default", "aten.max_pool2d_with_indices_backward.default",
               "aten.avg_pool2d.default", "aten.avg_pool2d_backward.default"}


def _stem(x, w):
    """ResNet's stem after its convolution: relu, max pool 3x3/2 pad 1, and a residual-like second branch."""
    y = x.relu()
    return F.max_pool2d(y, 3, 2, 1) * w + F.avg_pool2d(y, 3, 2, 1, count_include_pad=False)


def _externs():
    graphs = fuse_all.compiled_graphs()
    assert graphs and all(g.fallback_reason is None and g.language == "triton" for g in graphs)
    return ot.extern_targets()


def _input(shape, dtype, channels_last, special=()):
    x = ot.make(shape, dtype, low=-3, high=3, special=special)
    with torch.no_grad():
        x.copy_(x.round())                                      # ties in every window
    x = x.to("cuda")
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return x.detach().requires_grad_()


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=ot.dtype_id)
def test_resnet_stem_pooling_forward_and_backward(dtype, channels_last):
    x = _input((8, 64, 112, 112), dtype, channels_last)
    w = ot.make((56,), dtype).to("cuda").requires_grad_()
    ot.check(_stem, x, w, codegen="triton", grad=True, grad_vs_float64=True, reference_device="cpu")
    assert not POOLING_OPS & set(_externs())
    backward = fuse_all.compiled_graphs()[-1]
    (gather,) = [k for k in backward.kernels
                 if any(o.aten_op == "aten.max_pool2d_with_indices_backward.default" for o in k.origins)]
    assert "aten.add.Tensor" in {o.aten_op for o in gather.origins}


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_indices_nan_and_odd_windows(channels_last):
    x = _input((4, 16, 33, 30), torch.float32, channels_last, special=(math.nan, -math.inf))

    def fn(x):
        a = F.max_pool2d(x, 3, 2, 1, return_indices=True)
        b = F.max_pool2d(x, (2, 3), 2, (1, 0), (3, 1), ceil_mode=True, return_indices=True)
        return a, b, F.avg_pool2d(x, 3, 3, 1, ceil_mode=True)
    ot.check(fn, x.detach(), codegen="triton", reference_device="cpu")
    assert not POOLING_OPS & set(_externs())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=ot.dtype_id)
def test_max_pool_backward_channels_last_against_cuda_eager(dtype):
    """The max-pool half of the stem alone, channels-last, against CUDA eager (whose channels-last max-pool
    backward is right): the gather of max_pool2d_with_indices_backward on the GPU."""
    x = _input((8, 64, 112, 112), dtype, True)
    w = ot.make((56,), dtype).to("cuda").requires_grad_()
    ot.check(lambda x, w: F.max_pool2d(x.relu(), 3, 2, 1) * w, x, w, codegen="triton", grad=True,
             grad_vs_float64=True)
    assert not POOLING_OPS & set(_externs())


@pytest.mark.parametrize("count_include_pad", [True, False], ids=["include_pad", "exclude_pad"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_avg_pool2d_backward_with_padding(channels_last, count_include_pad):
    """avg_pool2d's gradient with padding (the case CUDA eager gets wrong on channels-last inputs), odd
    planes and ceil_mode, against CPU eager."""
    x = _input((4, 32, 57, 30), torch.float32, channels_last)

    def pool(x):
        return (F.avg_pool2d(x, 3, 2, 1, count_include_pad=count_include_pad),
                F.avg_pool2d(x, (3, 2), (2, 1), (1, 1), ceil_mode=True, count_include_pad=count_include_pad))
    ot.check(pool, x, codegen="triton", grad=True, reference_device="cpu")
    assert not POOLING_OPS & set(_externs())


"""Inference convolution -> BatchNorm [-> + residual] -> ReLU as one cuDNN call (a CUDA target's choice).

With running statistics a BatchNorm is a per-channel affine map, so the block is
``relu(conv(x, w * a) + (beta - mean * a) [+ z])`` with ``a = gamma / sqrt(var + eps)``: cuDNN's fused
epilogue (``aten.cudnn_convolution_relu`` / ``aten.cudnn_convolution_add_relu``) applies the bias, the
residual and the ReLU while it writes the convolution's result, where otherwise a generated kernel reads
that result back and writes it again (ResNet-50 at 64x224: 615M activations, ~1.2 ms of the H200's
bandwidth per call; bench/gpu_conv_epilogue_probe.py measures it per shape).

The weights are graph inputs (a parameter can change between calls), so the fold is computed in the graph
at every call: small pointwise kernels over the weights, which the IR fuses like any other. It pays where
the activation is large, and larger than the weight (`MIN_OUTPUT`, `MIN_OUTPUT_PER_WEIGHT`); smaller blocks
keep their generated kernel. Only static float32 shapes, 2-D convolutions that are not transposed, a convolution
whose result feeds nothing but the BatchNorm (a training graph that saves it keeps it), and results whose
strides are the ones cuDNN writes (its suggested memory format): the host program passes ATen results on
without a layout check.

Numerics: cuDNN multiplies by ``w * a`` rounded to float32 instead of scaling the convolution's result;
the difference is one float32 rounding of each weight, far inside the TF32 convolutions' own error (the
CUDA tests compare with float32 convolutions too).
"""
from __future__ import annotations

import logging
import operator

import torch
from torch._prims_common import make_channels_last_strides_for, make_contiguous_strides_for, suggest_memory_format

from .fx_values import call_function, keep_source, tensor_of

aten = torch.ops.aten
log = logging.getLogger("fuse_all.ir")

BATCH_NORM = aten._native_batch_norm_legit_no_training.default
# the saved traffic (the generated kernel's read and write of the activation) against the fold's (a read and
# a write of the weight, plus two small kernels of ~2 us each): folding pays where the activation is at least
# this many times the weight and at least MIN_OUTPUT elements (8 MB of float32 saves ~4 us of an H200's
# bandwidth); ResNet-50 at batch 1 folds nothing, at batch 64 every block but layer4's 3x3 ones
MIN_OUTPUT_PER_WEIGHT = 4
MIN_OUTPUT = 1 << 21


def cudnn_usable() -> bool:
    return bool(torch.backends.cudnn.enabled and torch.backends.cudnn.is_available())


def _static(t) -> bool:
    return isinstance(t, torch.Tensor) and all(isinstance(d, int) for d in (*t.shape, *t.stride()))


def _cudnn_output_strides(x, w, shape) -> tuple:
    """The strides of the result ATen's cuDNN convolutions allocate (`cudnn_conv_suggest_memory_format`:
    channels-last when the input's or the weight's strides look channels-last, judged as ATen judges them,
    size-1 dims included)."""
    if channels_last_like(x) or channels_last_like(w):
        return tuple(make_channels_last_strides_for(shape))
    return tuple(make_contiguous_strides_for(shape))


def channels_last_like(t) -> bool:
    return suggest_memory_format(t) == torch.channels_last


def _single_user(node):
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _match(bn: torch.fx.Node):
    """(conv, relu, residual or None) when `bn` is the middle of a foldable block, else None."""
    conv = bn.args[0]
    if not (isinstance(conv, torch.fx.Node) and conv.op == "call_function"
            and conv.target is aten.convolution.default and _single_user(conv) is bn):
        return None
    x, w, _bias, _stride, _padding, _dilation, transposed, _output_padding, _groups = conv.args
    out, xv, wv = tensor_of(conv), tensor_of(x), tensor_of(w)
    if transposed or not all(_static(t) and t.dim() == 4 and t.dtype == torch.float32 for t in (out, xv, wv)):
        return None
    if out.numel() < max(MIN_OUTPUT, MIN_OUTPUT_PER_WEIGHT * wv.numel()):
        return None
    getitems = list(bn.users)
    if not all(u.target is operator.getitem for u in getitems):
        return None
    firsts = [u for u in getitems if u.args[1] == 0]
    if len(firsts) != 1 or any(u.users for u in getitems if u.args[1] != 0):
        return None
    user = _single_user(firsts[0])
    residual = None
    if user is not None and user.target is aten.add.Tensor and not user.kwargs and len(user.args) == 2:
        residual = user.args[1] if user.args[0] is firsts[0] else user.args[0]
        zv = tensor_of(residual)
        if (residual is firsts[0] or not _static(zv) or zv.shape != out.shape or zv.dtype != out.dtype
                or zv.device != out.device):
            return None
        user = _single_user(user)
    if user is None or user.target is not aten.relu.default:
        return None
    relu_val = tensor_of(user)
    if not _static(relu_val) or relu_val.stride() != out.stride():
        return None
    return conv, user, residual


def _rewrite(gm, conv, bn, relu, residual) -> bool:
    graph = gm.graph
    x, w, conv_bias, stride, padding, dilation, _t, _op, groups = conv.args
    _input, gamma, beta, mean, var, _momentum, eps = bn.args
    out = tensor_of(relu)
    fake_mode = out.fake_mode
    with fake_mode:   # the folded weight's layout decides cuDNN's output format: check it first
        folded_w_val = tensor_of(w) * torch.empty(out.shape[1], 1, 1, 1, dtype=out.dtype, device=out.device)
    if tuple(out.stride()) != _cudnn_output_strides(tensor_of(x), folded_w_val, tuple(out.shape)):
        return False
    with graph.inserting_before(relu):
        var_eps = call_function(graph, aten.add.Tensor, (var, eps), fake_mode)
        inv = call_function(graph, aten.rsqrt.default, (var_eps,), fake_mode)
        scale = inv if gamma is None else call_function(graph, aten.mul.Tensor, (inv, gamma), fake_mode)
        column = call_function(graph, aten.view.default, (scale, [-1, 1, 1, 1]), fake_mode)
        folded_w = call_function(graph, aten.mul.Tensor, (w, column), fake_mode)
        centre = mean if conv_bias is None else call_function(graph, aten.sub.Tensor, (mean, conv_bias), fake_mode)
        shift = call_function(graph, aten.mul.Tensor, (centre, scale), fake_mode)
        folded_b = (call_function(graph, aten.neg.default, (shift,), fake_mode) if beta is None
                    else call_function(graph, aten.sub.Tensor, (beta, shift), fake_mode))
        with fake_mode:
            result_val = torch.empty_strided(out.shape, out.stride(), dtype=out.dtype, device=out.device)
        common = (stride, padding, dilation, groups)
        if residual is None:
            fused = call_function(graph, aten.cudnn_convolution_relu.default, (x, folded_w, folded_b, *common),
                                  fake_mode, result_val)
        else:
            fused = call_function(graph, aten.cudnn_convolution_add_relu.default,
                                  (x, folded_w, residual, 1.0, folded_b, *common), fake_mode, result_val)
    keep_source([fused], of=conv)
    relu.replace_all_uses_with(fused)
    for getitem in [u for u in bn.users if not u.users]:
        graph.erase_node(getitem)
    _erase_chain(graph, relu)
    return True


def _erase_chain(graph, node) -> None:
    """Erase `node` and, recursively, the computed inputs it leaves without users (the old block)."""
    if node.users or node.op != "call_function" or node.is_impure():
        return
    inputs = list(node.all_input_nodes)
    graph.erase_node(node)
    for a in inputs:
        _erase_chain(graph, a)


def fold_conv_batchnorm(gm: torch.fx.GraphModule, require_cudnn: bool = True) -> int:
    """Rewrite in place; returns how many blocks became one cuDNN call. `require_cudnn=False` rewrites
    without asking whether cuDNN is there (graph tests on machines without a GPU)."""
    if require_cudnn and not cudnn_usable():
        return 0
    rewritten = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is BATCH_NORM:
            match = _match(node)
            if match is not None and _rewrite(gm, match[0], node, match[1], match[2]):
                rewritten += 1
    if rewritten:
        gm.recompile()
        log.info("fuse_all: %d convolution + batch norm + relu blocks -> cuDNN's fused epilogue", rewritten)
    return rewritten

"""Grouped convolutions that are matrix products: over a 1 x 1 input with a 1 x 1 output, a k x k
convolution reads one tap of its weight (the one the padding puts on the only pixel), so it is a batched
product, one per group: out[n, g, :] = x[n, g, :] @ w[g, :, :, tap].t().

cuDNN runs such grouped convolutions in its generic direct engine (`convolve_common_engine_float_NHWC`):
ResNeXt-101 32x8d at 64x3x7x7 reaches 1 x 1 activations in layer 2, and 29 of its 33 grouped 3 x 3
convolutions then took ~60% of the model's device time on the H200 (2026-12-03), Inductor's too. As one
cuBLAS `bmm` (groups as the batch) on the weight's one tap, the product reads a ninth of the weight and
the layout pass no longer converts the whole 3 x 3 weight to channels-last first. The product is float32
(cuBLAS, `torch.backends.cuda.matmul.allow_tf32` as the user set it) where cuDNN may use TF32: never less
precise than eager.

Inference graphs only (a training forward's saved tensors and its backward were traced for the
convolution), grouped convolutions only (an ungrouped one is already a GEMM in cuDNN); for the Triton target
(`TritonChoices.grouped_convs_as_matmuls`: measured on CUDA; on CPU that target runs only in the tests, in
Triton's interpreter). Rewritten before the layout decision, so the decision sees only real convolutions.
"""
from __future__ import annotations

import logging

import torch

from .fx_values import call_function, keep_source, tensor_of

aten = torch.ops.aten
log = logging.getLogger("fuse_all")


def _ints(values) -> bool:
    return all(isinstance(v, int) for v in values)


def the_tap(conv: torch.fx.Node) -> tuple[int, int] | None:
    """(kh, kw): the one weight tap a grouped convolution of a 1 x 1 input into a 1 x 1 output reads, when
    `conv` is such a convolution that `convs_as_matmuls` can rewrite; else None."""
    if len(conv.args) != 9 or conv.kwargs:
        return None
    x, w, _bias, stride, padding, dilation, transposed, _output_padding, groups = conv.args
    x_val, w_val, out = tensor_of(x), tensor_of(w), tensor_of(conv)
    if transposed or x_val is None or w_val is None or out is None or not isinstance(groups, int) or groups < 2:
        return None
    # the batch may be symbolic (dynamic shapes); channels, taps and the one pixel must be known
    if x_val.dim() != 4 or w_val.dim() != 4 or not _ints((*x_val.shape[1:], *w_val.shape, *out.shape[1:],
                                                          *x_val.stride())):
        return None
    if tuple(x_val.shape[2:]) != (1, 1) or tuple(out.shape[2:]) != (1, 1):
        return None
    if not (_ints(padding) and _ints(dilation) and len(padding) == 2 == len(dilation)):
        return None
    taps = []
    for pad, dil, k in zip(padding, dilation, w_val.shape[2:]):
        # output pixel 0 reads input pixel 0 through the tap with 0 * stride - pad + tap * dil == 0
        if pad % dil or not 0 <= pad // dil < k:
            return None
        taps.append(pad // dil)
    n, c = x_val.shape[:2]
    one_row = isinstance(n, int) and n == 1   # a symbolic batch is >= 2 (Dynamo specialises 0 and 1)
    if x_val.stride(1) != 1 or (x_val.stride(0) != c and not one_row):   # x must view as [N, G, C / G]
        return None
    return taps[0], taps[1]


def _contiguous(graph, node, fake_mode):
    return call_function(graph, aten.clone.default, (node,), fake_mode, memory_format=torch.contiguous_format)


def _rewrite(gm: torch.fx.GraphModule, conv: torch.fx.Node, tap: tuple[int, int]) -> None:
    graph = gm.graph
    x, w, bias, *_rest, groups = conv.args
    x_val, w_val, out = tensor_of(x), tensor_of(w), tensor_of(conv)
    fake_mode = out.fake_mode
    n = x_val.shape[0] if isinstance(x_val.shape[0], int) else -1   # a symbolic batch: inferred by the views
    c_out, c_in_group = w_val.shape[:2]
    c_out_group = c_out // groups
    before = set(graph.nodes)
    with graph.inserting_before(conv):
        xs = call_function(graph, aten.view.default, (x, [n, groups, c_in_group]), fake_mode)
        xs = call_function(graph, aten.permute.default, (xs, [1, 0, 2]), fake_mode)          # [G, N, Cin/G]
        tap_w = call_function(graph, aten.select.int, (w, 3, tap[1]), fake_mode)
        tap_w = call_function(graph, aten.select.int, (tap_w, 2, tap[0]), fake_mode)          # [Cout, Cin/G]
        tap_w = _contiguous(graph, tap_w, fake_mode)   # the one tap, contiguous for cuBLAS
        ws = call_function(graph, aten.view.default, (tap_w, [groups, c_out_group, c_in_group]), fake_mode)
        ws = call_function(graph, aten.permute.default, (ws, [0, 2, 1]), fake_mode)          # [G, Cin/G, Cout/G]
        product = call_function(graph, aten.bmm.default, (xs, ws), fake_mode)                # [G, N, Cout/G]
        product = call_function(graph, aten.permute.default, (product, [1, 0, 2]), fake_mode)
        product = _contiguous(graph, product, fake_mode)                                     # [N, G, Cout/G]
        result = call_function(graph, aten.view.default, (product, [n, c_out, 1, 1]), fake_mode)
        if bias is not None:
            column = call_function(graph, aten.view.default, (bias, [1, c_out, 1, 1]), fake_mode)
            result = call_function(graph, aten.add.Tensor, (result, column), fake_mode)
    keep_source(set(graph.nodes) - before, of=conv)   # the report and the editor name the convolution's line
    conv.replace_all_uses_with(result)
    graph.erase_node(conv)


def convs_as_matmuls(gm: torch.fx.GraphModule) -> int:
    """Rewrite in place every grouped convolution of a 1 x 1 input into a 1 x 1 output as a batched matrix
    product of its one weight tap (module docstring); returns how many."""
    rewritten = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is aten.convolution.default:
            tap = the_tap(node)
            if tap is not None:
                _rewrite(gm, node, tap)
                rewritten += 1
    if rewritten:
        gm.recompile()
        log.info("fuse_all: %d grouped convolutions of 1 x 1 inputs -> batched matrix products", rewritten)
    return rewritten

"""`addmm(bias, x, w)` → `mm(x, w) + bias` where every use of the product is pointwise (a grid target's choice).

ATen's CUDA `addmm` with a 1-D bias goes to cuBLASLt's bias epilogue, and for BERT's shapes cuBLASLt picks
slower tiles than plain cuBLAS `mm` does (H200, bert 32×128: 64×64 tiles, 12.2 ms of matmul against
Inductor's 11.2 ms on 128×128 for the same GEMMs). Where the product only feeds pointwise code, the bias add
costs nothing in the kernel that already reads the product (the residual add before a LayerNorm, a GELU),
so the split GEMM is pure gain. Inductor makes the same rewrite (`should_prefer_unfused_addmm`, GPU only).
A product that is saved for the backward, returned, or read by a non-pointwise op keeps its `addmm`.
Dropout reads its input elementwise; where the target draws its random numbers in the kernels
(`random_in_kernel`), a product feeding dropout (BERT's attention output and second FFN layers in training,
then the residual add and LayerNorm) is split too: on the H200 the FFN's 1024x3072 @ 3072x768 addmm took
177 us on cuBLASLt's 128x64 tiles, the plain mm 106 us on 128x128 (train_bert_8x128, 0.85 ms per step).
"""
from __future__ import annotations

import logging

import torch
from torch._subclasses.fake_tensor import FakeTensor

aten = torch.ops.aten
log = logging.getLogger("fuse_all.ir")

_VIEWS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
          aten.squeeze.dim, aten.squeeze.default, aten.expand.default}


def only_pointwise_uses(node: torch.fx.Node, elementwise: frozenset = frozenset()) -> bool:
    if not node.users:
        return False
    for user in node.users:
        if user.op != "call_function" or not isinstance(user.target, torch._ops.OpOverload):
            return False
        if user.target in _VIEWS:
            if not only_pointwise_uses(user, elementwise):
                return False
        elif torch.Tag.pointwise not in user.target.tags and user.target not in elementwise:
            return False
    return True


def _plain(node: torch.fx.Node) -> bool:
    """The three-argument form (beta = alpha = 1) with a bias that broadcasts over the rows."""
    if len(node.args) != 3 or any(node.kwargs.get(k, 1) != 1 for k in ("beta", "alpha")):
        return False
    bias, product = node.args[0].meta.get("val"), node.meta.get("val")
    return (isinstance(bias, torch.Tensor) and isinstance(product, FakeTensor)
            and product.dim() == 2 and bias.dtype == product.dtype and bias.dim() <= 2)


def unfuse_matmul_bias(gm: torch.fx.GraphModule, random_in_kernel: bool = False) -> int:
    """Rewrite in place; returns how many `addmm`s became `mm` + `add`. With `random_in_kernel`, dropout
    counts as a pointwise reader of the product."""
    elementwise = frozenset({aten.native_dropout.default}) if random_in_kernel else frozenset()
    rewritten = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.addmm.default:
            continue
        if not (_plain(node) and only_pointwise_uses(node, elementwise)):
            continue
        bias, x, w = node.args
        traced = node.meta["val"]
        with traced.fake_mode:   # both new values are the addmm's: a fresh contiguous M x N product
            product_val, sum_val = (torch.empty_strided(traced.shape, traced.stride(), dtype=traced.dtype,
                                                        device=traced.device) for _ in range(2))
        with gm.graph.inserting_before(node):
            product = gm.graph.call_function(aten.mm.default, (x, w))
            total = gm.graph.call_function(aten.add.Tensor, (product, bias))
        for new, val in ((product, product_val), (total, sum_val)):
            new.meta.update({k: v for k, v in node.meta.items() if k != "val"})
            new.meta["val"] = val
        node.replace_all_uses_with(total)
        gm.graph.erase_node(node)
        rewritten += 1
    if rewritten:
        gm.recompile()
        log.info("fuse_all: %d addmm -> mm + bias add in the pointwise consumer", rewritten)
    return rewritten

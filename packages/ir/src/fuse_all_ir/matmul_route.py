"""Large float32 `mm` / `bmm` / `addmm` handed to the target's own product op (`FusionChoices.fp32_matmul`).

The Triton target's op (`fuse_all_codegen_triton.matmul`) multiplies float32 on tensor cores with three TF32
products per multiply, which on the H200 beats cuBLAS's float32 SGEMM on BERT's forward products at an
error no larger than cuBLAS's; it benchmarks itself against cuBLAS per call signature on the first call and
keeps whichever is faster. The IR only decides where the op may be used: float32 products with at least
`MIN_MULTIPLY_ADDS` (below that cuBLAS wins and the op's dispatch costs host time), in any layout (the op
copies an operand strided along the contraction dim, as the backward's dX = dY @ W and dW = dY.t() @ X have
them, K-major first, and its benchmark counts the copy), `addmm` only with beta = alpha = 1.
The op is an ATen-like call in the program (an ExternCall), as the product it replaces was.
"""
from __future__ import annotations

import logging

import sympy
import torch

from .fx_values import value_of
from .lowering import EXTERN_REASON

aten = torch.ops.aten
log = logging.getLogger("fuse_all.ir")

REASON = "float32 product: the target's tensor-core kernel or cuBLAS, whichever its first call measures faster"
PRODUCTS = (aten.mm.default, aten.bmm.default, aten.addmm.default)
SKINNY = 64   # rows or columns: tensor-core tiles would be mostly empty (and lowerings_matmul takes <= 16)
# 2**28 multiply-adds: 1024 x 512 x 512. The smallest product the H200 probe saw the tf32x3 kernel win at
# was 1024 x 768 x 768 (6e8), and not at every run; below, the op would only add its dispatch
MIN_MULTIPLY_ADDS = 2 ** 28


def _size(d) -> int | None:
    """A static size, or None for a symbolic one (the op decides per call at run time)."""
    if isinstance(d, torch.SymInt):
        expr = d.node.expr
        return int(expr) if isinstance(expr, sympy.Integer) else None
    return int(d)


def _multiply_adds(a: torch.Tensor, b: torch.Tensor) -> int | None:
    sizes = [_size(d) for d in (*a.shape, b.shape[-1])]
    if any(s is None for s in sizes):
        return None
    total = 1
    for s in sizes:
        total *= s
    return total


def refusal(node: torch.fx.Node) -> str | None:
    """Why the product `node` keeps its ATen op, or None when the target's op may take it."""
    if node.target not in PRODUCTS:
        return "not a matrix product"
    bias = None
    if node.target is aten.addmm.default:
        if len(node.args) != 3 or any(node.kwargs.get(k, 1) != 1 for k in ("beta", "alpha")):
            return "addmm with beta or alpha other than 1"
        bias = value_of(node.args[0])
    a, b = (value_of(arg) for arg in node.args[-2:])
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return "operands are not tensors"
    if a.dtype != torch.float32 or b.dtype != torch.float32:
        return f"operands of dtype {a.dtype} x {b.dtype} (float32 only)"
    if a.device.type != "cuda" or b.device.type != "cuda":
        return "operands not on a CUDA device"
    if bias is not None and (not isinstance(bias, torch.Tensor) or bias.dtype != torch.float32 or bias.dim() > 2):
        return "addmm's bias is not a float32 tensor of at most 2 dims"
    rows, columns = _size(a.shape[-2]), _size(b.shape[-1])
    if any(d is not None and d <= SKINNY for d in (rows, columns)):
        return f"a skinny product ({a.shape[-2]} x {b.shape[-1]}; <= {SKINNY} rows or columns)"
    work = _multiply_adds(a, b)
    if work is not None and work < MIN_MULTIPLY_ADDS:
        return f"{work} multiply-adds < {MIN_MULTIPLY_ADDS} (cuBLAS is as fast)"
    return None


def route_matmuls(gm: torch.fx.GraphModule, op) -> int:
    """Rewrite in place: each product `refusal` lets through becomes `op(a, b[, bias])` with the product's
    traced value. Returns how many."""
    routed = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in PRODUCTS or refusal(node) is not None:
            continue
        args = node.args[1:] + node.args[:1] if node.target is aten.addmm.default else node.args
        with gm.graph.inserting_before(node):
            product = gm.graph.call_function(op, tuple(args))
        product.meta.update(node.meta)
        product.meta[EXTERN_REASON] = REASON
        node.replace_all_uses_with(product)
        gm.graph.erase_node(node)
        routed += 1
    if routed:
        gm.recompile()
        log.info("fuse_all: %d float32 matrix products -> %s", routed, op)
    return routed

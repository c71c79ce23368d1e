"""Skinny matrix products as generated reductions: `mm` / `addmm` whose result has few rows or few columns.

A product with a handful of rows (small-batch inference: bert 1x12 has 12) is latency-bound in a vendor
GEMM: cuBLAS runs BERT's 12 x 768 @ 768 x 768 on a 64 x 64 tile in 9 us on the H200 (0.26 TB/s of weight
reads; the weight is 2.4 MB), with a second kernel for its split-K reduction. As a reduction over K for each
of the M x N outputs, the weight is read along its contiguous dim by hundreds of programs at once (the few
re-reads for the other rows hit L2), and the bias add, activation or residual add that follows fuses into
the same kernel instead of being a launch of its own.

Only where the target's choices say so (`FusionChoices.small_matmul_rows`, Triton) and only for a static
number of rows or columns at most that, in floating point. Half operands accumulate in float32 as cuBLAS
does. Other products stay ATen calls (the report says why).
"""
from __future__ import annotations

import sympy
import torch

from . import dtypes
from .lowering import LOWERING_GATES, Unsupported, lowers
from .lowerings_pointwise import cast, pointwise
from .matmul_bias import only_pointwise_uses
from .nodes import Value, op
from .vocabulary import is_float

aten = torch.ops.aten

MATMUL_OPS = (aten.mm.default, aten.addmm.default)


# Past this many outputs (and one side > 1) cuBLAS is faster. H200, gelu(linear) with 12 rows, CUDA-graph
# replay (bench/gpu_product_order_probe.py, RESULTS.md): 12 x 768 @ 768 x 3072 (36864 outputs) 10.7 us
# against cuBLAS's 13.5, 12 x 3072 @ 3072 x 768 10.6 against 19.0, 4 x 4096 @ 4096 x 4096 (16384) 22.4 against
# 27.8; walked in row order without sharing the weight row, 36864 outputs took 1.19x cuBLAS's time. A
# matrix-vector product (one side 1): 0.47-0.63x cuBLAS's at every size measured.
SMALL_MATMUL_OUTPUTS = 36864


def _refusal(limit: int, dtype_a: str, dtype_b: str, m, k, n) -> str | None:
    """Why a product of an m x k and a k x n matrix stays an ATen call, or None."""
    if not limit:
        return "the target keeps matrix products in ATen (choices.small_matmul_rows)"
    if not (is_float(dtype_a) and dtype_a == dtype_b) or dtype_a == "float64":
        return f"operands of dtype {dtype_a} x {dtype_b} (float32/float16/bfloat16 only)"
    m, k, n = (sympy.sympify(d) for d in (m, k, n))
    if any(d == 0 for d in (m, k, n)):
        return "an empty product"
    small = min((int(d) for d in (m, n) if d.is_number), default=None)
    if small is None or small > limit:
        return f"{m} x {n} product: neither side has <= {limit} (static) rows/columns"
    outputs = m * n
    if small > 1 and not (outputs.is_number and int(outputs) <= SMALL_MATMUL_OUTPUTS):
        return f"{m} x {n} product: more than {SMALL_MATMUL_OUTPUTS} outputs (cuBLAS is faster)"
    return None


def _skinny(g, a: Value, b: Value) -> None:
    if a.ndim != 2 or b.ndim != 2:
        raise Unsupported("operands are not matrices")
    reason = _refusal(g.small_matmul_rows, a.dtype, b.dtype, a.size[0], a.size[1], b.size[1])
    if reason is not None:
        raise Unsupported(reason)


def _gate(g, node: torch.fx.Node) -> bool:
    """Whether the traced product will be lowered (lowering.LOWERING_GATES)."""
    a, b = (arg.meta.get("val") for arg in node.args[-2:])
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.dim() != 2 or b.dim() != 2:
        return False
    sizes = [s.node.expr if isinstance(s, torch.SymInt) else s for s in (a.shape[0], a.shape[1], b.shape[1])]
    return _refusal(g.small_matmul_rows, dtypes.dtype_name(a.dtype), dtypes.dtype_name(b.dtype), *sizes) is None


def _in_memory(g, x: Value) -> Value:
    """`x` as a load of memory: an expression (a GELU before the product) would be recomputed for every
    output that reads it, N or M times over."""
    if x.view is None:
        g.realize(x)
    return x


def _k_contiguous(x: Value, k_dim: int) -> bool:
    return x.view is not None and sympy.sympify(x.view.stride[k_dim]) == 1


_VIEW_OPS = frozenset({aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.t.default,
                       aten.transpose.int, aten.permute.default, aten.unsqueeze.default, aten.squeeze.dim,
                       aten.expand.default})


def _epilogue_is_separate(node: torch.fx.Node) -> bool:
    """Whether everything the product's pointwise consumers compute ends in kernels or calls of their own (a
    LayerNorm's reduction, attention, the next product): then the product's loop order is free. A pointwise
    chain that ends as a graph output or at a value read twice is realized in storage order, and fuses into
    the product's kernel only when that kernel walks storage order too."""
    for user in node.users:
        if user.op != "call_function" or not isinstance(user.target, torch._ops.OpOverload):
            return False
        if user.target in MATMUL_OPS:   # it realizes its operands (in storage order) before reading them
            continue
        if user.target in _VIEW_OPS or torch.Tag.pointwise in user.target.tags:
            if len(user.users) > 1 and user.target not in _VIEW_OPS or not _epilogue_is_separate(user):
                return False
    return True


def _loop_order(g, a: Value, b: Value) -> tuple[tuple, bool]:
    """(outer loop order of the (M, N) result, whether it is a skinny product for the target's kernel shape).
    The outputs that read one row of the large operand go innermost, side by side in a block, so that row
    comes from L2 once and from L1 for the others: with few rows (M), the N dim goes outermost ((1, 0);
    H200, 12 x 3072 @ 3072 x 768: 10.6 us against 15.0 us in row order and cuBLAS's 19.0,
    bench/gpu_product_order_probe.py); with few columns, row order already does. Only where the large
    operand is contiguous along K (else its reads would not coalesce; the plain reduction's column tiling
    handles that), the small side is more than 1 (a matrix-vector product shares nothing), and the pointwise
    code after the product runs in another kernel anyway (`_epilogue_is_separate`), or else it fuses only
    in row order."""
    m, n = (sympy.sympify(d) for d in (a.size[0], b.size[1]))
    few_rows = m.is_number and (not n.is_number or int(m) <= int(n))
    if few_rows:
        node = g.current
        free = node is None or _epilogue_is_separate(node) or (
            node.target is aten.addmm.default and not only_pointwise_uses(node))   # _addmm realizes it in order
        return ((1, 0), True) if int(m) > 1 and free and _k_contiguous(b, 0) else ((0, 1), False)
    return (0, 1), int(n) > 1 and _k_contiguous(a, 1)


def _product(g, a: Value, b: Value, result: str) -> tuple[Value, tuple]:
    """(a @ b as a float32 sum over K of a[m, k] * b[k, n] rounded once to `result`, its loop order)."""
    acc = "float32"
    a, b = _in_memory(g, a), _in_memory(g, b)
    m, k = a.size
    n = b.size[1]
    order, skinny = _loop_order(g, a, b)

    def term(i):
        x = cast(a.loader([i[0], i[2]]), acc)
        y = cast(b.loader([i[2], i[1]]), acc)
        return op("mul", (x, y), acc)
    if sympy.sympify(k) == 1:   # an outer product: one term per output, no sum
        order, skinny = (0, 1), False
        product = Value((m, n), acc, lambda i: term([i[0], i[1], sympy.Integer(0)]), origin=a.origin)
    else:
        terms = Value((m, n, k), acc, term, origin=a.origin)
        product = g.reduction(terms, [2], "sum", acc, order=order, skinny_product=skinny)
    if result != acc:
        product = Value(product.size, result, lambda i: cast(product.loader(i), result), origin=a.origin)
    return product, order


@lowers(aten.mm)
def _mm(g, a, b):
    _skinny(g, a, b)
    return _product(g, a, b, a.dtype)[0]


@lowers(aten.addmm)
def _addmm(g, bias, a, b, beta=1, alpha=1):
    _skinny(g, a, b)
    if not isinstance(bias, Value) or bias.dtype != a.dtype:
        raise Unsupported("a bias of another dtype")
    if beta != 1 or alpha != 1:
        raise Unsupported(f"beta={beta}, alpha={alpha} (only the plain bias add)")
    product, order = _product(g, a, b, "float32")   # the bias is added before the one rounding, as cuBLASLt does
    total = pointwise(g, lambda p, c: op("add", (p, c), "float32"), product, bias, compute="float32", result=a.dtype)
    if g.current is not None and not only_pointwise_uses(g.current):
        # in the reduction's kernel, walked in its order: a view's consumer (attention's heads) would
        # otherwise copy it apart
        g.realize(total, order=order)
    return total


LOWERING_GATES.update({op: _gate for op in MATMUL_OPS})

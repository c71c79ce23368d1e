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
from .lowerings_reduce import reduce
from .matmul_bias import only_pointwise_uses
from .nodes import Value, op
from .vocabulary import is_float

aten = torch.ops.aten

MATMUL_OPS = (aten.mm.default, aten.addmm.default)


# Past this many outputs (and one side > 1) the reduction re-reads the large operand from L2 more than cuBLAS
# takes for the whole product: H200, 12 x 768 @ 768 x 3072 (36864 outputs) 1.19x cuBLAS's time, 16 x 3072 @
# 3072 x 768 (12288) 1.03x, 12 x 768 @ 768 x 768 0.59x; a matrix-vector product (one side 1) 0.47-0.63x at
# every size measured (bench/gpu_small_matmul_probe.py, bench/RESULTS.md)
SMALL_MATMUL_OUTPUTS = 12288


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


def _product(g, a: Value, b: Value, result: str) -> Value:
    """a @ b as a float32 sum over K of a[m, k] * b[k, n], rounded once to `result`."""
    acc = "float32"
    a, b = _in_memory(g, a), _in_memory(g, b)
    m, k = a.size
    n = b.size[1]

    def term(i):
        x = cast(a.loader([i[0], i[2]]), acc)
        y = cast(b.loader([i[2], i[1]]), acc)
        return op("mul", (x, y), acc)
    terms = Value((m, n, k), acc, term, origin=a.origin)
    return reduce(g, terms, [2], "sum", False, result)


@lowers(aten.mm)
def _mm(g, a, b):
    _skinny(g, a, b)
    return _product(g, a, b, a.dtype)


@lowers(aten.addmm)
def _addmm(g, bias, a, b, beta=1, alpha=1):
    _skinny(g, a, b)
    if not isinstance(bias, Value) or bias.dtype != a.dtype:
        raise Unsupported("a bias of another dtype")
    if beta != 1 or alpha != 1:
        raise Unsupported(f"beta={beta}, alpha={alpha} (only the plain bias add)")
    product = _product(g, a, b, "float32")   # the bias is added before the one rounding, as cuBLASLt does
    total = pointwise(g, lambda p, c: op("add", (p, c), "float32"), product, bias, compute="float32", result=a.dtype)
    if g.current is not None and not only_pointwise_uses(g.current):
        g.realize(total)   # in the reduction's kernel: a view's consumer (attention's heads) would copy it apart
    return total


LOWERING_GATES.update({op: _gate for op in MATMUL_OPS})

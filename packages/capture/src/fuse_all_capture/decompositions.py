"""The decomposition table fuse-all hands to AOTAutograd.

What the captured graph should contain is decided by what fuses:

* Decomposed (so the IR sees pointwise ops and plain reductions it lowers and fuses itself): softmax and
  log_softmax (-> amax/sub/exp/sum/div), layer/group/batch norm in all their ATen spellings and their
  backwards, gelu/silu/hardswish/elu/leaky_relu/hardtanh and their backwards, mean, var, std, var_mean,
  std_mean, addcmul/addcdiv/lerp, plus torch's whole core-ATen table (t/transpose -> permute, sum ->
  sum.dim_IntList, ...). mean and the variance family use our own decompositions below: torch's go through
  `torch._refs` and leave `prims.*` ops (prims.var, prims.sum, prims.broadcast_in_dim) in the graph, and
  prims.var is a Welford reduction in torch's prims. Ours use aten.sum (mean, then the deviations' sum
  and squares: the corrected two-pass algorithm); std/std_mean go through aten.var_mean. fuse-all's
  backend drops var/var_mean from the table (its IR lowers them to a one-pass Welford reduction), so
  there they stay var_mean.
* Kept as one ATen op (an extern call to a vendor library beats anything we would generate):
  convolution (+backward), mm/addmm/bmm/baddbmm, embedding (+dense backward: a scatter-add), random ops
  (native_dropout, bernoulli: kept whole, so that the IR decides per target -- Triton lowers them to pointwise
  code on random numbers made in its kernels, `fuse_all_ir/lowerings_random.py`; C++ keeps ATen's generator,
  eager's CPU values; torch's decomposition would put ATen's rand_like in every graph), im2col/col2im,
  and scaled-dot-product attention.
  Inference batch norm (`_native_batch_norm_legit_no_training`) stays one op too, but for the IR, which
  lowers it as one pointwise map with the decomposition's arithmetic. (fuse-all's backend also drops from
  this table every op the IR lowers itself; this keeps the table used on its own, e.g. by `capture()`, the
  same for this op: decomposed, each batch norm is ~14 nodes, ResNet-50's inference graph 1242 instead of 500.)
  For attention we drop the decompositions of `scaled_dot_product_attention` and of the CPU flash kernel,
  so ATen's dispatcher picks the fused flash / memory-efficient kernel (CUDA) or the CPU flash kernel:
  for BERT that is one memory-bound-free kernel instead of matmul + softmax + matmul with an S x S
  intermediate. The surrounding projections, bias adds, dropout-free residuals and norms still fuse.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable, Sequence

import torch

from . import compat

# Ops whose core-ATen decomposition we do not want; packets cover every overload.
_KEEP_IN_ATEN = (
    "convolution", "convolution_backward", "mm", "addmm", "bmm", "baddbmm",
    "embedding", "embedding_dense_backward", "native_dropout", "bernoulli",
    "im2col", "col2im",
    "scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu",
    "_native_batch_norm_legit_no_training",   # lowered as one pointwise map (fuse_all_ir.lowerings_reduce)
)

# Core ATen ops that torch's core table leaves alone but the IR would rather see decomposed.
_EXTRA_DECOMPOSED = (
    "_softmax", "_log_softmax", "gelu", "elu", "leaky_relu", "hardtanh",
    "native_layer_norm", "native_group_norm",
    "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
    "_batch_norm_with_update", "_batch_norm_with_update_functional",
    "_batch_norm_no_update", "batch_norm_backward", "split_with_sizes",
)

_LOW_PRECISION = (torch.float16, torch.bfloat16)


@functools.lru_cache(None)
def _cached_table() -> dict[Any, Callable[..., Any]]:
    table = compat.core_aten_decompositions()
    table.update(compat.get_decompositions(op for op in map(compat.aten_op, _EXTRA_DECOMPOSED) if op is not None))
    table.update(_own_decompositions())
    keep = {op for op in map(compat.aten_op, _KEEP_IN_ATEN) if op is not None}
    return {op: fn for op, fn in table.items() if getattr(op, "overloadpacket", op) not in keep}


def decomposition_table() -> dict[Any, Callable[..., Any]]:
    """fuse-all's decomposition table (a fresh dict each call; the module docstring says what and why)."""
    return dict(_cached_table())


# ---- our own decompositions -------------------------------------------------------------------------
# They run under AOTAutograd's tracer, so every torch call below becomes an ATen node in the graph.
# Returning NotImplemented makes the tracer keep the original op.

def _reduction_dims(x: torch.Tensor, dim: Any) -> list[int]:
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.dim()))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted({d % max(x.dim(), 1) for d in dims})


def _count(x: torch.Tensor, dims: Sequence[int]) -> Any:
    """Number of reduced elements; a SymInt when the sizes are symbolic."""
    return math.prod([x.shape[d] for d in dims]) if x.dim() else 1


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    # Eager accumulates half-precision reductions in float32; summing in fp16/bf16 would lose digits.
    return torch.float32 if dtype in _LOW_PRECISION else dtype


def _mean(x: torch.Tensor, dim: Any = None, keepdim: bool = False, *, dtype: torch.dtype | None = None) -> Any:
    out_dtype = dtype or x.dtype
    if not (out_dtype.is_floating_point or out_dtype.is_complex) or x.dim() == 0:
        return NotImplemented  # eager raises for integer means; 0-d means are a copy
    dims = _reduction_dims(x, dim)
    acc = _accumulation_dtype(out_dtype)
    total = torch.ops.aten.sum.dim_IntList(x, dims, keepdim, dtype=acc)
    return (total / _count(x, dims)).to(out_dtype)


def _var_mean(x: torch.Tensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Any:
    if not x.dtype.is_floating_point or x.dim() == 0:
        return NotImplemented  # complex variance needs |x - mean|^2; 0-d inputs are an edge case: leave to ATen
    dims = _reduction_dims(x, dim)
    n = _count(x, dims)
    acc = _accumulation_dtype(x.dtype)
    wide = x.to(acc)
    # The corrected two-pass algorithm (Chan, Golub, LeVeque), as the IR's own var lowering: the first
    # mean's rounding error d makes every deviation off by d, which the plain two-pass variance keeps
    # (a constant row of 216.0 got std 3e-5, eager's Welford 0); S = sum(x - m) measures it and removes it.
    first_mean = torch.ops.aten.sum.dim_IntList(wide, dims, True) / n
    deviation = wide - first_mean
    deviation_sum = torch.ops.aten.sum.dim_IntList(deviation, dims, True)
    squares = torch.ops.aten.sum.dim_IntList(deviation * deviation, dims, True)
    mean_correction = deviation_sum / n
    # Q >= S^2 / n in exact arithmetic; rounding can leave -tiny for a constant row
    corrected = torch.abs(squares - deviation_sum * mean_correction)
    # Eager divides by max(0, N - correction): 0/0 gives nan, x/0 gives inf, exactly like ATen.
    var = corrected / torch.sym_max(n - (1 if correction is None else correction), 0)
    mean = first_mean + mean_correction
    if not keepdim:
        var, mean = torch.ops.aten.squeeze.dims(var, dims), torch.ops.aten.squeeze.dims(mean, dims)
    return var.to(x.dtype), mean.to(x.dtype)


def _var(x: torch.Tensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Any:
    result = _var_mean(x, dim, correction=correction, keepdim=keepdim)
    return result if result is NotImplemented else result[0]


# std and std_mean go through aten.var_mean: a backend that lowers var_mean itself (fuse-all's IR: a
# one-pass Welford variance) drops it from the table and gets it, others get `_var_mean` above
def _std_mean(x: torch.Tensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Any:
    if not x.dtype.is_floating_point or x.dim() == 0:
        return NotImplemented
    var, mean = torch.ops.aten.var_mean.correction(x, dim, correction=correction, keepdim=keepdim)
    return torch.sqrt(var), mean


def _std(x: torch.Tensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Any:
    result = _std_mean(x, dim, correction=correction, keepdim=keepdim)
    return result if result is NotImplemented else result[0]


def _own_decompositions() -> dict[Any, Callable[..., Any]]:
    aten = torch.ops.aten
    table: dict[Any, Callable[..., Any]] = {}

    def register(packet_name: str, overloads: Sequence[str], fn: Callable[..., Any]) -> None:
        packet = compat.aten_op(packet_name)
        for overload in overloads:
            op = getattr(packet, overload, None) if packet is not None else None
            if op is not None:
                table[op] = fn

    register("mean", ["dim"], _mean)
    table[aten.mean.default] = lambda x, *, dtype=None: _mean(x, None, False, dtype=dtype)
    register("var_mean", ["correction"], _var_mean)
    register("var", ["correction"], _var)
    register("std_mean", ["correction"], _std_mean)
    register("std", ["correction"], _std)
    return table

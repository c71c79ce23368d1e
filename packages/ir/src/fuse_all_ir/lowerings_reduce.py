"""Lowerings of reductions, and of the normalisations built from them (softmax, var/mean)."""
from __future__ import annotations

import sympy
import torch

from . import dtypes
from .lowering import Unsupported, lowers, sym
from .lowerings_pointwise import cast, operand_loader, out_dtype, pointwise
from .nodes import Value, const, index_value, mask_loads, op
from .vocabulary import compute_dtype as _acc_dtype
from .vocabulary import is_float, is_positional, reduction_identity, reduction_info

aten = torch.ops.aten


def _dims(x: Value, dim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.ndim))
    if isinstance(dim, int):
        dim = [dim]
    return [d % max(x.ndim, 1) for d in dim]


def _as(x: Value, dtype: str) -> Value:
    if x.dtype == dtype:
        return x
    return Value(x.size, dtype, lambda i: cast(x.loader(i), dtype), origin=x.origin)


def reduce(g, x: Value, dim, op_name: str, keepdim=False, result: str | None = None) -> Value:
    result = result or x.dtype
    acc = reduction_info(op_name).result or _acc_dtype(result)
    src = x if is_positional(op_name) or op_name in ("max", "min") else _as(x, acc)
    if op_name in ("any", "all"):
        src, acc = _as(x, "bool"), "bool"
    if op_name in ("max", "min") and x.dtype != acc:
        src = _as(x, acc)
    dims = _dims(x, dim)
    if x.ndim == 0 or all(x.size[d] == 1 for d in dims):
        return _trivial_reduction(src, dims, op_name, keepdim, result)
    if reduction_info(op_name).empty_is_identity and any(x.size[d] == 0 for d in dims):
        return _empty_reduction(x, dims, op_name, keepdim, result)
    if op_name == "sum" and is_float(acc):
        summand = _as(_computed(g, x), acc)
        fixed = _invariant_dims(summand, dims)
        if fixed:
            return _as(_sum_of_invariant(g, summand, dims, fixed, keepdim), result)
    reduced = g.reduction(src, dims, op_name, acc, keepdim)
    return _as(reduced, result)


def _computed(g, x: Value) -> Value:
    """`x` as computed, where it is a whole pointwise buffer (a value also returned or used elsewhere is
    stored first): the broadcast-sum rule looks through the store. Recomputing the summand at the points
    the rule reads costs no more than loading it there (fuzz seed 164 index 949: `v = a.sin() * 2 + a` of
    an input expanded along every dim, returned and summed, was summed element by element)."""
    node = getattr(g, "nodes", {}).get(g.whole_buffer(x)) if hasattr(g, "whole_buffer") else None
    if node is None or node.kind != "pointwise" or node.scatter is not None or not callable(node.body):
        return x
    return Value(x.size, x.dtype, node.body, origin=x.origin)


def _invariant_dims(x: Value, dims) -> list:
    """The dims of `dims` that `x`'s expression does not read along (stride-0 reads of an expanded value)."""
    index = [sympy.Symbol(f"_r{d}", integer=True, nonnegative=True) for d in range(x.ndim)]
    try:
        expr = x.loader(index)
    except Exception:  # noqa: BLE001 - a loader that can't be probed keeps its reduction
        return []
    used, seen, stack = set(), set(), [expr]
    while stack:
        e = stack.pop()
        if id(e) in seen or e is None:
            continue
        seen.add(id(e))
        if e.index is not None:
            used |= sympy.sympify(e.index).free_symbols
        stack.extend(e.args)
    return [d for d in dims if index[d] not in used and x.size[d] != 1]


def _sum_of_invariant(g, x: Value, dims, fixed, keepdim: bool) -> Value:
    """A float sum over dims along which the summand does not move: the sum over the other dims times the
    count of the fixed ones (one rounding). Added up, the same value went through long chains of additions
    that all round alike: a float32 scalar expanded to (70001, 1) summed 1.2e-5 off in C++, eager 3.5e-7
    (fuzz seed 125 index 93); (3, 1) expanded to (3, 20001) 6e-5 (seed 3 index 332). The backward of a
    broadcast sums an expanded gradient so."""
    from .lowerings_view import squeeze_dims
    first = Value(tuple(sympy.Integer(1) if d in fixed else n for d, n in enumerate(x.size)), x.dtype,
                  lambda i: x.loader([sympy.Integer(0) if d in fixed else v for d, v in enumerate(i)]), origin=x.origin)
    rest = [d for d in dims if d not in fixed]
    partial = reduce(g, first, rest, "sum", True, x.dtype) if rest else first
    count = sympy.Mul(*[x.size[d] for d in fixed])
    acc = x.dtype

    def loader(i):
        n = const(float(count), acc) if count.is_number else cast(index_value(count), acc)
        scaled = op("mul", (partial.loader(i), n), acc)
        positive = sympy.Gt(count, 0)
        if positive is sympy.true:     # sizes are positive symbols; an unbacked one may still be 0:
            return scaled              # an empty sum is 0, not 0 x inf
        return op("where", (index_value(positive, "bool"), scaled, const(0.0, acc)), acc)
    scaled = Value(partial.size, acc, loader, origin=x.origin)
    return scaled if keepdim else squeeze_dims(scaled, dims)


def _trivial_reduction(src: Value, dims, op_name: str, keepdim: bool, result: str) -> Value:
    """A reduction over one element per output is the element itself (its position, for argmax)."""
    from .lowerings_view import squeeze_dims
    value = src if keepdim or src.ndim == 0 else squeeze_dims(src, dims)
    if is_positional(op_name):
        return Value(value.size, "int64", lambda i: const(0, "int64"))
    return _as(value, result)


def _empty_reduction(x: Value, dims, op_name: str, keepdim: bool, result: str) -> Value:
    """No element to read: the identity, and no kernel loads from the empty input."""
    size = tuple(sympy.Integer(1) if d in dims else n for d, n in enumerate(x.size) if keepdim or d not in dims)
    value = reduction_identity(op_name, result)
    return Value(size, result, lambda i: const(value, result))


@lowers(aten.sum.dim_IntList, aten.sum.default)
def _sum(g, x, dim=None, keepdim=False, dtype=None):
    return reduce(g, x, dim, "sum", keepdim, out_dtype(g, x.dtype))


@lowers(aten.prod.dim_int, aten.prod.default)
def _prod(g, x, dim=None, keepdim=False, dtype=None):
    return reduce(g, x, dim, "prod", keepdim, out_dtype(g, x.dtype))


@lowers(aten.mean.dim, aten.mean.default)
def _mean(g, x, dim=None, keepdim=False, dtype=None):
    result = out_dtype(g, x.dtype)
    acc = _acc_dtype(result)
    total = reduce(g, _as(x, acc), dim, "sum", keepdim, acc)
    count = sympy.Mul(*[x.size[d] for d in _dims(x, dim)]) if x.ndim else sympy.Integer(1)
    return _divide(total, count, result)


def _divide(total: Value, count, result: str) -> Value:
    acc = total.dtype
    from .nodes import index_value

    def loader(i):
        n = const(float(count), acc) if count.is_number else cast(index_value(count), acc)
        return cast(op("truediv", (total.loader(i), n), acc), result)
    return Value(total.size, result, loader)


@lowers(aten.amax.default, aten.amin.default)
def _amax(g, x, dim=(), keepdim=False):
    name = "max" if g.current.target is aten.amax.default else "min"
    return reduce(g, x, dim, name, keepdim)


@lowers(aten.max.default, aten.min.default)
def _max_all(g, x):
    name = "max" if g.current.target is aten.max.default else "min"
    return reduce(g, x, None, name)


@lowers(aten.max.dim, aten.min.dim)
def _max_dim(g, x, dim, keepdim=False):
    name = "max" if g.current.target is aten.max.dim else "min"
    values = reduce(g, x, dim, name, keepdim)
    indices = reduce(g, x, dim, "arg" + name, keepdim, "int64")
    return values, indices


@lowers(aten.argmax.default, aten.argmin.default)
def _argmax(g, x, dim=None, keepdim=False):
    name = "argmax" if g.current.target is aten.argmax.default else "argmin"
    if dim is None:
        from .lowerings_view import reshape
        flat = reshape(x, [sympy.Mul(*x.size)]) if x.ndim != 1 else x
        out = reduce(g, flat, [0], name, False, "int64")
        if keepdim:
            from .lowerings_view import unsqueeze_dims
            return unsqueeze_dims(out, list(range(x.ndim)))
        return out
    return reduce(g, x, dim, name, keepdim, "int64")


@lowers(aten.any.default, aten.any.dim, aten.any.dims, aten.all.default, aten.all.dim, aten.all.dims)
def _any_all(g, x, dim=None, keepdim=False):
    name = "any" if g.current.target in (aten.any.default, aten.any.dim, aten.any.dims) else "all"
    return reduce(g, x, dim, name, keepdim, "bool")


def _variance_accumulation(g, result: str) -> str:
    """The type a variance of `result` dtype is computed in: eager's CPU kernels (var, std, var_mean and
    std_mean: ATen's WelfordOps<scalar_t, double>; batch norm's statistics, which reach the IR as
    var_mean: acc_type<float, false> = double) compute a float32 one in double and round once, CUDA's in
    float32. A float32 two-pass over 2108 values was ~20x eager's error (fuzz seed 88 index 1974).
    layer_norm stays in float32, as eager's CPU RowwiseMoments does."""
    acc = _acc_dtype(result)
    if acc == "float32" and torch.device(g.device).type == "cpu":
        return "float64"
    return acc


def _var_mean(g, x: Value, dim, correction, keepdim):
    val = g.current.meta.get("val")
    result = dtypes.dtype_name(val[0].dtype if isinstance(val, tuple) else val.dtype)
    acc = _variance_accumulation(g, result)
    if not dtypes.is_float(acc):
        raise Unsupported("var of a non-float tensor")
    dims = _dims(x, dim)
    var, mean = _var_mean_values(g, _as(x, acc), dims, acc, 1 if correction is None else correction)
    if not keepdim:
        from .lowerings_view import squeeze_dims
        var, mean = squeeze_dims(var, dims), squeeze_dims(mean, dims)
    return _as(var, result), _as(mean, result)


@lowers(aten.var_mean.correction)
def _var_mean_lowering(g, x, dim=None, *, correction=None, keepdim=False):
    return _var_mean(g, x, dim, correction, keepdim)


@lowers(aten.var.correction)
def _var(g, x, dim=None, *, correction=None, keepdim=False):
    return _var_mean(g, x, dim, correction, keepdim)[0]


@lowers(aten._softmax.default, aten._log_softmax.default)
def _softmax(g, x, dim, half_to_float=False):
    log = g.current.target is aten._log_softmax.default
    result = out_dtype(g, x.dtype)
    acc = _acc_dtype(result)
    xf = _as(x, acc)
    dim = dim % max(x.ndim, 1)
    row_max = reduce(g, xf, [dim], "max", True, acc)
    max_load = operand_loader(row_max, x.size, acc)

    def shifted(i):
        m = max_load(i)
        # rows that are all -inf give nan in torch too; keep the subtraction as eager does
        return op("sub", (xf.loader(i), m), acc)
    exp = Value(x.size, acc, lambda i: op("exp", (shifted(i),), acc))
    total = reduce(g, exp, [dim], "sum", True, acc)
    total_load = operand_loader(total, x.size, acc)
    if log:
        return Value(x.size, result, lambda i: cast(op("sub", (shifted(i), op("log", (total_load(i),), acc)), acc),
                                                    result))
    return Value(x.size, result, lambda i: cast(op("truediv", (exp.loader(i), total_load(i)), acc), result))


@lowers(aten.native_layer_norm.default)
def _layer_norm(g, x, normalized_shape, weight, bias, eps):
    result = x.dtype
    acc = _acc_dtype(result)
    xf = _as(x, acc)
    dims = list(range(x.ndim - len(normalized_shape), x.ndim))
    var, mean = _var_mean_values(g, xf, dims, acc)
    mean_load, var_load = operand_loader(mean, x.size, acc), operand_loader(var, x.size, acc)
    w_load = operand_loader(weight, x.size, acc) if weight is not None else None
    b_load = operand_loader(bias, x.size, acc) if bias is not None else None

    def rstd_of(v):
        return op("rsqrt", (op("add", (v, const(float(eps), acc)), acc),), acc)

    def normalized(i):
        y = op("mul", (op("sub", (xf.loader(i), mean_load(i)), acc), rstd_of(var_load(i))), acc)
        if w_load is not None:
            y = op("mul", (y, w_load(i)), acc)
        if b_load is not None:
            y = op("add", (y, b_load(i)), acc)
        return cast(y, result)
    out = Value(x.size, result, normalized)
    rstd = Value(var.size, acc, lambda i: rstd_of(var.loader(i)))
    return out, mean, rstd


def _var_mean_values(g, xf: Value, dims, acc, correction=0):
    """Variance and mean over `dims`, both with the reduced dims kept (size 1), from the one-pass
    reductions ``welford_mean`` and ``welford_m2`` (M2 = sum of squared deviations from the mean):
    var = M2 / max(n - correction, 0). Both reduce the same values, so they fuse into one reduction phase
    that reads `xf` once; each codegen computes them by Welford with Chan's combine where it streams the
    row, or by the corrected two-pass algorithm where the row is held (`welford.two_pass_form`). Like
    eager's Welford, a constant row gets exactly its value as mean (layer_norm multiplies a mean's error by
    1/sqrt(eps))."""
    count = sympy.Mul(*[xf.size[d] for d in dims]) if xf.ndim else sympy.Integer(1)
    if xf.ndim == 0 or all(xf.size[d] == 1 for d in dims):
        # one element: the mean is it, M2 is (x - x)^2 (0, NaN for inf and NaN as eager)
        def deviation(i):
            x = xf.loader(i)
            return op("mul", (op("sub", (x, x), acc), op("sub", (x, x), acc)), acc)
        mean, squares = xf, Value(xf.size, acc, deviation)
    elif any(xf.size[d] == 0 for d in dims):
        size = tuple(sympy.Integer(1) if d in dims else n for d, n in enumerate(xf.size))
        mean = Value(size, acc, lambda i: const(float("nan"), acc))
        squares = Value(size, acc, lambda i: const(0.0, acc))
    else:
        # the statistics of x - x[first point of the row]: a float32 running mean of values around 1e4
        # rounds every step to 1e-3 (Welford's error would grow 100x past the two-pass algorithm's); the
        # shifted values stay near 0, and so does every partial mean a split stores
        def first_of_row(i):
            e = xf.loader([sympy.Integer(0) if d in dims else i[d] for d in range(xf.ndim)])
            if not count.is_number:   # a row of symbolic length may be empty: no read then
                e = mask_loads(e, index_value(sympy.StrictGreaterThan(count, 0), "bool"))
            return e
        shifted = Value(xf.size, acc, lambda i: op("sub", (xf.loader(i), first_of_row(i)), acc))
        shifted_mean = g.reduction(shifted, dims, "welford_mean", acc, True)
        mean_node = next(reversed(g.nodes))
        squares = g.reduction(shifted, dims, "welford_m2", acc, True)
        g.nodes[next(reversed(g.nodes))].fuse_with = (mean_node,)
        mean = Value(shifted_mean.size, acc,
                     lambda i: op("add", (shifted_mean.loader(i), first_of_row(i)), acc))
    var = _divide(squares, sympy.Max(count - sym(correction), 0), acc)
    return var, mean


@lowers(aten._native_batch_norm_legit_no_training.default)
def _batch_norm_inference(g, x, weight, bias, running_mean, running_var, momentum, eps):
    """Inference batch norm as one pointwise map, computed as torch's decomposition computes it (the same
    bits as the decomposed graph): (x - mean) * rsqrt(var + eps) * weight + bias in the accumulation dtype
    (torch 2.11's decomposition divides by sqrt instead; both round to within an ulp). It reaches the IR as
    one op: the backend drops the ops lowered here from the decomposition table, and fuse_all_capture's own
    table keeps this one too.
    The second and third results are what ATen returns for the device: empty on CPU, the running mean and
    the inverse standard deviation elsewhere."""
    acc = _acc_dtype(x.dtype)
    from .lowerings_view import unsqueeze_dims

    def inverse_std(var):
        return op("rsqrt", (op("add", (var, const(float(eps), acc)), acc),), acc)

    def per_channel(v):
        return unsqueeze_dims(v, [0] + list(range(2, x.ndim))) if v is not None else None
    params = [per_channel(v) for v in (running_mean, running_var, weight, bias)]

    def bn(xv, mean, var, *wb):
        y = op("mul", (op("sub", (xv, mean), acc), inverse_std(var)), acc)
        wb = list(wb)
        if weight is not None:
            y = op("mul", (y, wb.pop(0)), acc)
        if bias is not None:
            y = op("add", (y, wb.pop(0)), acc)
        return y
    operands = [x] + [p for p in params if p is not None]
    out = pointwise(g, bn, *operands, compute=acc, result=x.dtype)
    vals = g.current.meta.get("val") if g.current is not None else None
    if isinstance(vals, (tuple, list)) and len(vals) == 3 and vals[1].numel() != 0:
        saved_dtype = dtypes.dtype_name(vals[1].dtype)
        mean = Value(running_mean.size, saved_dtype, lambda i: cast(running_mean.loader(i), saved_dtype))
        rstd = Value(running_var.size, saved_dtype,
                     lambda i: cast(inverse_std(cast(running_var.loader(i), acc)), saved_dtype))
        return out, mean, rstd
    empty = Value((sympy.Integer(0),), x.dtype, lambda i: const(0, x.dtype))
    return out, empty, empty

"""2-D pooling as pointwise kernels with the window unrolled: max_pool2d_with_indices (values and ATen's
indices), its backward, avg_pool2d and its backward.

Each output element reads its window (forward), each input element the output windows that can contain it
(backward: a gather, where ATen's CPU kernel scatters), so the results are plain pointwise values that fuse
with their producers and consumers (ResNet's stem: relu -> max pool; the backward with the residual add).
torch's own decomposition of max_pool2d_with_indices_backward scatters (scatter_add), which the IR has no
primitive for; its forward decomposition gathers through an index tensor: neither is used.

Semantics follow ATen's kernels (CPU and CUDA agree):
* max: the window is visited row by row; an element replaces the running maximum when it is greater or NaN
  (so the last NaN of a window wins), and the index starts at the window's first in-bounds element (a
  window of -inf reports that one). The index is h * W + w within the input's plane. Padding is never read.
* max backward: every output window whose saved index is this element adds its gradient, windows in
  row-major order (the order of ATen's scatter), accumulated in the compute dtype.
* avg: sum of the in-bounds elements over a divisor: `divisor_override`, else the window clipped to the
  padded input (count_include_pad) or to the input; backward adds grad / divisor of each covering window.

Sizes may be symbolic; kernel size, stride, padding and dilation must be Python ints (else ATen).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

import sympy
import torch

from . import dtypes
from .lowering import Unsupported, lowers, sym
from .lowerings_pointwise import cast
from .nodes import E, Value, const, index_value, mask_loads, op
from .symbolic import FloorDiv, ModularIndexing
from .vocabulary import compute_dtype, dtype_info, is_float

aten = torch.ops.aten

# Window elements (forward) or covering windows (backward) per output element, unrolled in the kernel.
MAX_WINDOW = 25


@dataclass(frozen=True)
class Axis:
    """One spatial dimension of a pooling: window element k of output o is input o*stride - pad + k*dilation."""
    kernel: int
    stride: int
    pad: int
    dilation: int
    size: sympy.Expr        # input extent
    out: sympy.Expr         # output extent

    def tap(self, o, k):
        return o * self.stride - self.pad + k * self.dilation


def _ints(values, name: str, count: int = 2) -> tuple:
    values = [values] if isinstance(values, int) else list(values)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise Unsupported(f"symbolic {name} {values}")
    if len(values) == 1:
        values = values * count
    if len(values) != count:
        raise Unsupported(f"{name} {values}")
    return tuple(values)


def _axes(x: Value, out_size, kernel_size, stride, padding, dilation=(1,)) -> tuple[Axis, Axis]:
    if x.ndim not in (3, 4):
        raise Unsupported(f"{x.ndim}-D input")
    kernel = _ints(kernel_size, "kernel_size")
    stride = _ints(stride, "stride") if stride else kernel
    padding, dilation = _ints(padding, "padding"), _ints(dilation, "dilation")
    return tuple(Axis(kernel[d], stride[d], padding[d], dilation[d], x.size[x.ndim - 2 + d],
                      out_size[len(out_size) - 2 + d]) for d in range(2))


# ---- static knowledge: a condition that holds for every index in range needs no code ----------------

def _less(a, b) -> bool:
    """a < b for certain (sizes are positive integers)."""
    return sympy.expand(b - a).is_positive is True


def _at_most(a, b) -> bool:
    """a <= b for certain."""
    return sympy.expand(b - a).is_nonnegative is True


def _all(conds):
    """The conjunction of bool expressions (None: no condition, always true)."""
    conds = [c for c in conds if c is not None]
    if not conds:
        return None
    out = conds[0]
    for c in conds[1:]:
        out = op("logical_and", (out, c), "bool")
    return out


def _compare(name: str, a, b) -> E:
    return op(name, (index_value(a), index_value(b)), "bool")


def _inside(axis: Axis, o, k):
    """Whether window element k of output o is inside the input (None: always, for every o in range)."""
    i = axis.tap(o, k)
    conds = []
    if k * axis.dilation - axis.pad < 0:
        conds.append(_compare("ge", i, 0))
    if not _less(axis.tap(axis.out - 1, k), axis.size):
        conds.append(_compare("lt", i, axis.size))
    return _all(conds)


def _masked(e: E, mask, fill=None):
    """`e` read only where `mask` holds; `fill` elsewhere when given (else the value there is unspecified)."""
    if mask is None:
        return e
    e = mask_loads(e, mask)
    return e if fill is None else op("where", (mask, e, fill), e.dtype)


def _checked_window(count: int, what: str):
    if count > MAX_WINDOW:
        raise Unsupported(f"{what} of {count} elements (unrolled up to {MAX_WINDOW})")


# ---- max_pool2d -------------------------------------------------------------------------------------

def _window(x: Value, hw: tuple[Axis, Axis], index, acc: str) -> list:
    """[(element in `acc`, its plane index h*W + w, in-bounds condition or None)] of the window of output
    `index`, row by row."""
    *lead, oh, ow = index
    ah, aw = hw
    cols = [(aw.tap(ow, kw), _inside(aw, ow, kw)) for kw in range(aw.kernel)]
    out = []
    for kh in range(ah.kernel):
        ih, inside_h = ah.tap(oh, kh), _inside(ah, oh, kh)
        for iw, inside_w in cols:
            inside = _all([inside_h, inside_w])
            v = _masked(cast(x.loader(lead + [ih, iw]), acc), inside)
            out.append((v, index_value(ih * aw.size + iw), inside))
    return out


def _first_inside(axis: Axis, o):
    """The window's first in-bounds element: ATen's maximum index starts there."""
    start = axis.tap(o, 0)
    if axis.pad == 0:
        return start
    if axis.dilation == 1:
        return sympy.Max(start, 0)
    return start + axis.dilation * FloorDiv(sympy.Max(-start, 0) + axis.dilation - 1, axis.dilation)


def _window_max(x: Value, hw, index, acc: str) -> E:
    """ATen's scan: an element replaces the maximum when greater or NaN."""
    best = const(dtype_info(acc).lowest, acc)
    for v, _flat, inside in _window(x, hw, index, acc):
        better = op("gt", (v, best), "bool")
        if is_float(acc):
            better = op("logical_or", (better, op("isnan", (v,), "bool")), "bool")
        best = op("where", (_all([inside, better]), v, best), acc)
    return best


def _window_argmax(x: Value, hw, index, acc: str, best: E) -> E:
    """The plane index ATen's scan ends on, from the window's maximum `best`: the first element equal to
    it, or when it is NaN the last NaN; a window equal to the lowest value everywhere gives its first
    element (ATen's starting index), which is also the first one equal to the maximum."""
    *_lead, oh, ow = index
    elements = _window(x, hw, index, acc)
    first = index_value(_first_inside(hw[0], oh) * hw[1].size + _first_inside(hw[1], ow))
    position = first
    for v, flat, inside in reversed(elements):           # backwards: the first match is written last
        position = op("where", (_all([inside, op("eq", (v, best), "bool")]), flat, position), "int64")
    if not is_float(acc):
        return position
    last_nan = first
    for v, flat, inside in elements:
        last_nan = op("where", (_all([inside, op("isnan", (v,), "bool")]), flat, last_nan), "int64")
    return op("where", (op("isnan", (best,), "bool"), last_nan, position), "int64")


@lowers(aten.max_pool2d_with_indices.default)
def _max_pool2d_with_indices(g, x, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    if x.dtype == "bool":
        raise Unsupported("max_pool2d of bool")
    values_val, _ = g.current.meta["val"]
    size = tuple(sym(s) for s in values_val.shape)
    hw = _axes(x, size, kernel_size, stride, padding, dilation)
    _checked_window(hw[0].kernel * hw[1].kernel, "a window")
    out, acc = x.dtype, compute_dtype(x.dtype)
    values = Value(size, out, lambda index: cast(_window_max(x, hw, index, acc), out))
    if any(user.target is operator.getitem and user.args[1] == 1 for user in g.current.users):
        # the indices read the values buffer, so the fusion pass puts both into one kernel (one read of
        # the input; the window's loads are shared)
        g.realize(values, [sym(s) for s in values_val.stride()])
    indices = Value(size, "int64", lambda index: _window_argmax(x, hw, index, acc, cast(values.loader(index), acc)))
    return values, indices


# ---- windows covering an input element (the backwards) ------------------------------------------------

_PROBE = sympy.Symbol("pool_input_index", integer=True, nonnegative=True)


def _covering(axis: Axis, i, exact: bool) -> list:
    """[(output o, condition or None)] for the output windows that can contain input element i, ascending
    in o.

    When the windows' reach ((kernel-1)*dilation) spans few strides: the run of outputs from the first whose
    window reaches i, ceil((i + pad - reach) / stride); `exact` adds that o's window starts at or before i
    (max_pool's index test makes it redundant there). When the dilation exceeds the stride, the kernel's
    positions instead: o = (i + pad - k*dilation) / stride where that divides. The bounds 0 <= o < out are
    tested where some i in [0, size) needs them (o grows with i: its values at both ends decide)."""
    out = []
    for (o, conds), (probe, _) in zip(_candidates(axis, i, exact), _candidates(axis, _PROBE, exact)):
        if not _at_most(0, probe.subs(_PROBE, 0)):
            conds.append(_compare("ge", o, 0))
        if not _less(probe.subs(_PROBE, axis.size - 1), axis.out):
            conds.append(_compare("lt", o, axis.out))
        out.append((o, _all(conds)))
    return out


def _candidates(axis: Axis, i, exact: bool) -> list:
    k, s, p, d = axis.kernel, axis.stride, axis.pad, axis.dilation
    reach = (k - 1) * d
    run = reach // s + 1
    candidates = []
    if run <= k:
        shift = -(-reach // s)                        # keeps FloorDiv's argument non-negative
        first = FloorDiv(i + p - reach + s - 1 + s * shift, s) - shift
        for j in range(run):
            o = first + j
            conds = [_compare("le", o * s, i + p)] if exact and (j > 0 or s > reach + 1) else []
            candidates.append((o, conds))
        return candidates
    for kk in reversed(range(k)):                      # descending k: ascending o
        offset = p - kk * d
        shift = -(-max(-offset, 0) // s)
        numerator = i + offset + s * shift
        conds = [_compare("ge", i + offset, 0)] if offset < 0 else []
        if s > 1:
            conds.append(_compare("eq", ModularIndexing(numerator, 1, s), 0))
        candidates.append((FloorDiv(numerator, s) - shift, conds))
    return candidates


@lowers(aten.max_pool2d_with_indices_backward.default)
def _max_pool2d_backward(g, grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    hw = _axes(x, grad.size, kernel_size, stride, padding, dilation)
    out = dtypes.dtype_name(g.current.meta["val"].dtype)
    if not is_float(out):
        raise Unsupported(f"max_pool2d backward in {out}")
    acc = compute_dtype(out)
    plane_w = hw[1].size

    def loader(index):
        *lead, ih, iw = index
        rows, cols = _covering(hw[0], ih, exact=False), _covering(hw[1], iw, exact=False)
        flat = index_value(ih * plane_w + iw)
        total = None
        for oh, cond_h in rows:
            for ow, cond_w in cols:
                cond = _all([cond_h, cond_w])
                chosen = op("eq", (_masked(indices.loader(lead + [oh, ow]), cond), flat), "bool")
                hit = _all([cond, chosen])
                term = op("where", (hit, _masked(cast(grad.loader(lead + [oh, ow]), acc), cond), const(0.0, acc)),
                          acc)
                total = term if total is None else op("add", (total, term), acc)
        return cast(total, out)

    _checked_window(len(_candidates(hw[0], _PROBE, False)) * len(_candidates(hw[1], _PROBE, False)),
                    "a backward gather")
    return Value(x.size, out, loader)


# ---- avg_pool2d ---------------------------------------------------------------------------------------

def _divisor(hw: tuple[Axis, Axis], oh, ow, count_include_pad: bool, divisor_override):
    """ATen's divide factor of window (oh, ow) as an index expression: `divisor_override`, else the window
    clipped to the padded input (count_include_pad) or to the input."""
    if divisor_override:
        return sympy.Integer(int(divisor_override))
    extent = sympy.Integer(1)
    for axis, o in zip(hw, (oh, ow)):
        start, end = axis.tap(o, 0), axis.tap(o, axis.kernel)
        limit = axis.size + axis.pad if count_include_pad else axis.size
        if not _at_most(axis.tap(axis.out - 1, axis.kernel), limit):
            end = sympy.Min(end, limit)
        if not count_include_pad and axis.pad > 0:
            start = sympy.Max(start, 0)
        extent = extent * (end - start)
    return extent


def _as_float(expr, acc: str) -> E:
    expr = sympy.sympify(expr)
    return const(float(expr), acc) if expr.is_number else cast(index_value(expr), acc)


def _avg_axes(x, out_size, kernel_size, stride, padding, divisor_override):
    hw = _axes(x, out_size, kernel_size, stride, padding)
    if divisor_override is not None and not isinstance(divisor_override, int):
        raise Unsupported(f"symbolic divisor_override {divisor_override}")
    return hw


@lowers(aten.avg_pool2d.default)
def _avg_pool2d(g, x, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True,
                divisor_override=None):
    out = x.dtype
    if not is_float(out):
        raise Unsupported(f"avg_pool2d of {out}")
    size = tuple(sym(s) for s in g.current.meta["val"].shape)
    hw = _avg_axes(x, size, kernel_size, stride, padding, divisor_override)
    _checked_window(hw[0].kernel * hw[1].kernel, "a window")
    acc = compute_dtype(out)

    def loader(index):
        *lead, oh, ow = index
        total = None
        for kh in range(hw[0].kernel):
            inside_h = _inside(hw[0], oh, kh)
            for kw in range(hw[1].kernel):
                inside = _all([inside_h, _inside(hw[1], ow, kw)])
                v = cast(x.loader(lead + [hw[0].tap(oh, kh), hw[1].tap(ow, kw)]), acc)
                v = _masked(v, inside, const(0.0, acc))
                total = v if total is None else op("add", (total, v), acc)
        divisor = _as_float(_divisor(hw, oh, ow, count_include_pad, divisor_override), acc)
        return cast(op("truediv", (total, divisor), acc), out)
    return Value(size, out, loader)


@lowers(aten.avg_pool2d_backward.default)
def _avg_pool2d_backward(g, grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                         divisor_override):
    out = dtypes.dtype_name(g.current.meta["val"].dtype)
    if not is_float(out):
        raise Unsupported(f"avg_pool2d backward in {out}")
    hw = _avg_axes(x, grad.size, kernel_size, stride, padding, divisor_override)
    acc = compute_dtype(out)
    _checked_window(len(_candidates(hw[0], _PROBE, True)) * len(_candidates(hw[1], _PROBE, True)),
                    "a backward gather")

    def loader(index):
        *lead, ih, iw = index
        total = None
        for oh, cond_h in _covering(hw[0], ih, exact=True):
            for ow, cond_w in _covering(hw[1], iw, exact=True):
                cond = _all([cond_h, cond_w])
                divisor = _as_float(_divisor(hw, oh, ow, count_include_pad, divisor_override), acc)
                share = op("truediv", (cast(grad.loader(lead + [oh, ow]), acc), divisor), acc)
                term = _masked(share, cond, const(0.0, acc))
                total = term if total is None else op("add", (total, term), acc)
        return cast(total, out)
    return Value(x.size, out, loader)


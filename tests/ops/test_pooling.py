"""2-D pooling as fused kernels (fuse_all_ir/lowerings_pool.py): max_pool2d's values and int64 indices,
avg_pool2d, and both backwards, against eager: padding, stride > kernel, dilation, ceil_mode, ties (the first
maximum's index), NaN (the last NaN's index), -inf windows, every input layout, low precision, gradients
through the compiled forward and backward, symbolic sizes, and the ATen fallback past the unroll limit."""
import math

import pytest
import torch
import torch._dynamo.testing
import torch.nn.functional as F

import fuse_all
from fuse_all_optest import BOTH, CountingBackend, assert_same, check, clone_inputs, make, params

# name: (kernel_size, stride, padding, dilation, ceil_mode)
MAX_CASES = {
    "resnet_stem_3s2p1": (3, 2, 1, 1, False),
    "k2_default_stride": (2, None, 0, 1, False),
    "rect_kernel_stride": ((3, 2), (1, 2), (1, 1), 1, False),
    "ceil_mode": (3, 2, 0, 1, True),
    "stride_gt_kernel_ceil_pad": (2, 3, 1, 1, True),
    "dilation_gt_stride": (3, 1, 1, 2, False),
    "dilation_rect_ceil": ((2, 3), 2, (1, 0), (3, 1), True),
    # 25 elements, the most that is unrolled: the running maximum is a 25-step scan (each step reads the
    # previous twice; kernel generation once walked every path of that DAG: 2^25)
    "k5_pad2_largest_unrolled": (5, 1, 2, 1, False),
}


def _max_pool(case):
    kernel, stride, padding, dilation, ceil_mode = MAX_CASES[case]

    def fn(x):
        return F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode, return_indices=True)
    return fn


def _tied(shape, dtype=torch.float32, layout="contiguous", requires_grad=False, special=()):
    """Values from a handful of integers (many ties in every window), in `layout`, with `special` values."""
    x = make(shape, dtype, layout, low=-3, high=3, special=special)
    with torch.no_grad():
        x.copy_(x.round())
    return x.detach().requires_grad_(requires_grad)


@pytest.mark.parametrize("case,layout,codegen", params(
    [(c, "contiguous") for c in MAX_CASES] + [(c, lay) for c in ("resnet_stem_3s2p1", "dilation_rect_ceil")
                                              for lay in ("channels_last", "sliced", "transposed")],
    triton=lambda c, lay: c in ("resnet_stem_3s2p1", "dilation_rect_ceil") and lay in ("contiguous", "channels_last")))
def test_max_pool2d_values_and_indices(case, layout, codegen):
    check(_max_pool(case), _tied((2, 3, 11, 10), layout=layout), codegen=codegen)


@pytest.mark.parametrize("codegen", BOTH)
def test_max_pool2d_nan_wins_and_last_nan_is_the_index(codegen):
    x = _tied((2, 3, 9, 12), special=(math.nan,))
    x[0, 0, 1, 1:3] = math.nan            # two NaNs in one window: eager reports the later one
    check(_max_pool("resnet_stem_3s2p1"), x, codegen=codegen)
    check(_max_pool("dilation_rect_ceil"), x, codegen=codegen)


@pytest.mark.parametrize("codegen", BOTH)
def test_max_pool2d_windows_of_minus_inf_report_their_first_in_bounds_element(codegen):
    x = make((1, 2, 7, 8), special=(-math.inf,), special_frac=0.7)
    x[0, 1] = -math.inf
    check(_max_pool("resnet_stem_3s2p1"), x, codegen=codegen)
    check(_max_pool("dilation_rect_ceil"), x, codegen=codegen)


@pytest.mark.parametrize("dtype,codegen", params([torch.float16, torch.bfloat16, torch.float64, torch.int64],
                                                 triton=lambda d: d in (torch.float16, torch.bfloat16)))
def test_max_pool2d_dtypes(dtype, codegen):
    x = make((2, 4, 10, 9), dtype, "channels_last", low=-50, high=50)
    check(_max_pool("resnet_stem_3s2p1"), x, codegen=codegen)
    check(_max_pool("stride_gt_kernel_ceil_pad"), x, codegen=codegen)


@pytest.mark.parametrize("codegen", BOTH)
def test_max_pool2d_unbatched_and_inside_a_chain(codegen):
    def fn(x, y):
        values, indices = F.max_pool2d((x * 2).relu(), 3, 2, 1, return_indices=True)
        return values + y, indices, F.max_pool2d(x[0], 2, ceil_mode=True)
    check(fn, make((2, 3, 9, 8), layout="channels_last", requires_grad=True), make((5, 4), requires_grad=True),
          codegen=codegen, grad=True)


@pytest.mark.parametrize("case,layout,codegen", params(
    [(c, "contiguous") for c in MAX_CASES] + [("resnet_stem_3s2p1", "channels_last"),
                                              ("dilation_rect_ceil", "channels_last")],
    triton=lambda c, lay: c == "resnet_stem_3s2p1" or (c == "dilation_gt_stride")))
def test_max_pool2d_gradients(case, layout, codegen):
    """Ties go to the first maximum in both; overlapping windows add into one input element."""
    pool = _max_pool(case)

    def fn(x, r):
        values, _ = pool(x.relu() * r)
        return values * 3
    check(fn, _tied((2, 3, 11, 10), layout=layout, requires_grad=True), make((10,), requires_grad=True),
          codegen=codegen, grad=True, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype,codegen", params([torch.float16, torch.bfloat16], triton=(0,)))
def test_max_pool2d_gradients_low_precision(dtype, codegen):
    def fn(x):
        return F.max_pool2d(x, 3, 1, 1).sum(1)
    check(fn, make((2, 3, 8, 9), dtype, "channels_last", requires_grad=True), codegen=codegen, grad=True)


@pytest.mark.parametrize("codegen", BOTH)
def test_gradients_through_views_around_pooling(codegen):
    """The backwards read through index arithmetic of their consumers (slice_backward's shifted, masked
    reads; a transpose) and their grad_output through an expand (a sum's gradient)."""
    def fn(x):
        y = x[:, :, 1:, ::2].transpose(2, 3)
        return (F.max_pool2d(y, 3, 2, 1).sum() + (F.avg_pool2d(y * 2, (2, 3), 1, (1, 0), True, False) ** 2).sum()
                + F.max_pool2d(x, 2, 3, 1, 2, True).transpose(1, 3))
    check(fn, _tied((2, 3, 13, 12), requires_grad=True), codegen=codegen, grad=True, atol=1e-5, rtol=1e-5)


def test_training_graphs_run_no_aten_pooling_and_fuse_the_backward_with_the_residual_add():
    """The forward computes values and indices in one kernel (one read of the input); the backward's gather
    fuses with the add of another branch's gradient (ResNet's stem) and with relu's backward."""
    torch._dynamo.reset()
    fuse_all.reset()

    def fn(x, w):
        y = x.relu()
        return F.max_pool2d(y, 3, 2, 1) * w + F.avg_pool2d(y, 3, 2, 1)
    x, w = make((2, 4, 12, 12), requires_grad=True), make((6,), requires_grad=True)
    check(fn, x, w, grad=True)
    forward, backward = fuse_all.compiled_graphs()
    for graph in (forward, backward):
        assert not [e.target for e in graph.externs], [(e.target, e.reason) for e in graph.externs]
    pooling = [k for k in forward.kernels
               if any(o.aten_op == "aten.max_pool2d_with_indices.default" for o in k.origins)]
    assert len(pooling) == 1, [k.name for k in pooling]
    assert len(pooling[0].outputs) >= 2                      # values (or their product) and indices
    (gather,) = [k for k in backward.kernels if any(
        o.aten_op == "aten.max_pool2d_with_indices_backward.default" for o in k.origins)]
    fused = {o.aten_op for o in gather.origins}
    assert {"aten.avg_pool2d_backward.default", "aten.add.Tensor"} <= fused, fused


# name: (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
AVG_CASES = {
    "3s2p1": (3, 2, 1, False, True, None),
    "3s2p1_exclude_pad": (3, 2, 1, False, False, None),
    "ceil_include_pad": (3, 2, 1, True, True, None),
    "ceil_exclude_pad_rect": ((2, 3), (2, 1), (1, 1), True, False, None),
    "divisor_override": (2, 1, 1, False, True, 3),
    "stride_gt_kernel": (2, 3, 0, True, True, None),
    "k2_default_stride": (2, None, 0, False, True, None),
}


def _avg_pool(case):
    kernel, stride, padding, ceil_mode, include_pad, divisor = AVG_CASES[case]
    return lambda x: F.avg_pool2d(x, kernel, stride, padding, ceil_mode, include_pad, divisor)


@pytest.mark.parametrize("case,layout,codegen", params(
    [(c, "contiguous") for c in AVG_CASES] + [("ceil_exclude_pad_rect", lay)
                                              for lay in ("channels_last", "sliced", "transposed")],
    triton=lambda c, lay: c in ("3s2p1", "ceil_exclude_pad_rect") and lay in ("contiguous", "channels_last")))
def test_avg_pool2d_and_gradients(case, layout, codegen):
    pool = _avg_pool(case)
    check(lambda x: pool(x) * 2, make((2, 3, 11, 10), layout=layout, requires_grad=True), codegen=codegen,
          grad=True, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype,codegen", params([torch.float16, torch.bfloat16, torch.float64],
                                                 triton=lambda d: d is torch.bfloat16))
def test_avg_pool2d_dtypes(dtype, codegen):
    """Sums of up to 6 elements or gradients: the gradients are judged against float64 relative to eager's
    own rounding error."""
    pool = _avg_pool("ceil_exclude_pad_rect")
    check(pool, make((2, 4, 10, 9), dtype, "channels_last", requires_grad=True), codegen=codegen, grad=True,
          grad_vs_float64=True)


@pytest.mark.parametrize("codegen", BOTH)
def test_adaptive_avg_pool_to_one_is_a_fused_mean(codegen):
    """ResNet's head: adaptive_avg_pool2d(x, 1) reaches the IR as a mean, not an ATen call."""
    torch._dynamo.reset()
    fuse_all.reset()
    check(lambda x: F.adaptive_avg_pool2d(x.relu(), 1).flatten(1), make((2, 5, 7, 6), requires_grad=True),
          codegen=codegen, grad=True)
    assert not [e.target for g in fuse_all.compiled_graphs() for e in g.externs]


def _pool_everything(x):
    values, indices = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    return values, indices, F.avg_pool2d(x, 3, 2, 1), F.max_pool2d(x, 2, 3, 1, 2)


@pytest.mark.parametrize("codegen", BOTH)
def test_symbolic_sizes_compile_once(codegen):
    """dynamic=True: one graph for every size, batch and plane sizes symbolic (fallback off: no ATen).
    (ceil_mode makes Dynamo guard on the sizes' remainders, so it is checked on one size below.)"""
    shapes = ((2, 3, 9, 10), (3, 3, 12, 15), (4, 3, 17, 13))
    torch._dynamo.reset()
    backend = CountingBackend(codegen)
    compiled = torch.compile(_pool_everything, backend=backend, fullgraph=True, dynamic=True)
    for shape in shapes:
        x = _tied(shape, layout="channels_last", special=(math.nan,))
        e_in, c_in = clone_inputs([x], {}), clone_inputs([x], {})
        assert_same(compiled(*c_in), _pool_everything(*e_in))
    # The capture floor: torch 2.11's max_pool2d meta guards on the sizes' parity (div_rtn), so Dynamo
    # itself compiles once per parity there (3 frames); newer torch compiles once. We add no guard.
    torch._dynamo.reset()
    floor = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    floor_fn = torch.compile(_pool_everything, backend=floor, fullgraph=True, dynamic=True)
    for shape in shapes:
        floor_fn(_tied(shape, layout="channels_last", special=(math.nan,)))
    assert backend.frame_count == floor.frame_count
    if tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 14):
        assert backend.frame_count == 1


@pytest.mark.parametrize("codegen", BOTH)
def test_symbolic_sizes_training(codegen):
    def fn(x):
        return (F.max_pool2d(x, 3, 2, 1) + F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
                F.max_pool2d(x, 2, 3, 1, 2, ceil_mode=True) * F.avg_pool2d(x, 2, 3, 1, ceil_mode=True))
    check(fn, make((2, 3, 11, 9), layout="channels_last", requires_grad=True), codegen=codegen, grad=True,
          dynamic=True, atol=1e-5, rtol=1e-5)


def test_windows_past_the_unroll_limit_run_in_aten_with_a_reason():
    torch._dynamo.reset()
    fuse_all.reset()

    def fn(x):
        return F.max_pool2d(x, 7, 1, 3) + F.avg_pool2d(x, 6, 1, 3)[..., :-1, :-1] + F.max_pool2d(x, 3).sum()
    check(fn, make((1, 2, 9, 9), requires_grad=True), grad=True, allow_fallback=True)
    reasons = {e.target: e.reason for g in fuse_all.compiled_graphs() for e in g.externs}
    assert "a window of 49 elements (unrolled up to 25)" in reasons["aten.max_pool2d_with_indices.default"]
    assert "a window of 36 elements" in reasons["aten.avg_pool2d.default"]
    assert "aten.max_pool2d_with_indices_backward.default" in reasons
    assert all(g.fallback_reason is None for g in fuse_all.compiled_graphs())


EDGES = {
    # dilation 3, padding 1 on a plane of 2: windows with no element inside (eager: -inf at ATen's start index,
    # which lies outside the plane: eager's backward writes there, out of bounds, so no gradient is compared)
    "window_without_inside_element": (lambda x: F.max_pool2d(x, 2, 1, 1, 3, return_indices=True), (1, 2, 2, 5)),
    "plane_smaller_than_kernel_ceil": (lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True),
                                       (2, 2, 2, 2)),
    "empty_batch": (lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), (0, 2, 7, 7)),
    "kernel_1": (lambda x: F.max_pool2d(x, 1, 1, return_indices=True), (2, 2, 3, 3)),
    "row_window": (lambda x: F.max_pool2d(x, (1, 5), (1, 2), (0, 2), return_indices=True), (2, 2, 3, 7)),
    "avg_plane_smaller_than_kernel": (lambda x: F.avg_pool2d(x, 3, 2, 1, True, False), (2, 2, 2, 3)),
    "avg_row_window_divisor": (lambda x: F.avg_pool2d(x, (1, 5), (1, 2), (0, 2), divisor_override=2), (2, 2, 3, 7)),
}


@pytest.mark.parametrize("case,codegen", params(list(EDGES), triton=lambda c: c == "window_without_inside_element"))
def test_edge_shapes(case, codegen):
    fn, shape = EDGES[case]
    grad = shape[0] > 0 and case != "window_without_inside_element"

    def summed(x):      # values (and indices): the gradient flows through the values
        out = fn(x)
        return (out[0] * 2, out[1]) if isinstance(out, tuple) else out * 2
    check(summed, make(shape, requires_grad=grad), codegen=codegen, grad=grad)

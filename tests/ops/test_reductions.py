"""Reduction lowerings against eager: sum/mean/prod/amax/amin, max/min/argmax/argmin (ties, NaN, inf),
var/std/var_mean, softmax/log_softmax, layer_norm, batch_norm (train: running stats), group_norm, norms,
any/all, long rows, and a few that may fall back (cumsum, logsumexp)."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fuse_all_optest import check, check_ops, make, params

R4 = (3, 6, 7, 11)   # N, C, H, W
NAN, INF = math.nan, math.inf


def _red_tol(dtype):
    # reassociating a float32 sum of ~1000 terms moves the last bits; float64 stays at the defaults
    return dict(atol=1e-4, rtol=1e-5) if dtype == torch.float32 else {}


SUM_MEAN = {
    "sum_all": lambda x, q: x.sum(),
    "sum_d0": lambda x, q: x.sum(0),
    "sum_d1": lambda x, q: x.sum(1),
    "sum_dlast": lambda x, q: x.sum(-1),
    "sum_d02_keepdim": lambda x, q: x.sum((0, 2), keepdim=True),
    "sum_d23": lambda x, q: torch.sum(x, dim=(2, 3)),
    "sum_to_f64": lambda x, q: x.sum(1, dtype=torch.float64),
    "mean_all": lambda x, q: x.mean(),
    "mean_d1": lambda x, q: x.mean(1),
    "mean_d23_keepdim": lambda x, q: x.mean((2, 3), keepdim=True),
    "mean_neg_dims": lambda x, q: x.mean((-1, -3)),
    "prod_dlast": lambda x, q: q.prod(-1),
    "prod_d1_keepdim": lambda x, q: q.prod(1, keepdim=True),
    "amax_d1": lambda x, q: x.amax(1),
    "amax_d23": lambda x, q: x.amax((2, 3)),
    "amax_all": lambda x, q: x.amax(),
    "amin_d0_keepdim": lambda x, q: x.amin(0, keepdim=True),
    "amin_dlast": lambda x, q: torch.amin(x, -1),
    "max_all": lambda x, q: x.max(),
    "min_all": lambda x, q: torch.min(x),
    "sum_then_pointwise": lambda x, q: (x / x.exp().sum(1, keepdim=True)).tanh() + x,
}


@pytest.mark.parametrize("dtype,layout,codegen", params(
    [(torch.float32, lay) for lay in ("contiguous", "transposed", "channels_last", "sliced", "expanded")]
    + [(torch.float64, "contiguous"), (torch.float64, "channels_last"), (torch.float16, "contiguous"),
       (torch.bfloat16, "transposed")],
    triton=lambda d, lay: d == torch.float32 and lay in ("contiguous", "channels_last")))
def test_sum_mean_prod_amax(dtype, layout, codegen):
    x = make(R4, dtype, layout)
    q = make(R4, dtype, layout, low=0.8, high=1.25)  # products of 11 / 6 factors stay O(1)
    tol = _red_tol(dtype)
    if dtype in (torch.float16, torch.bfloat16):
        tol = dict(atol=0.1, rtol=2e-2)  # eager accumulates in float32 too, but rounds the inputs of exp etc.
    check_ops(SUM_MEAN, x, q, codegen=codegen, **tol)


INT_RED = {
    "sum_all": lambda i, b: i.sum(),                 # int32 -> int64
    "sum_d1": lambda i, b: i.sum(1),
    "sum_keep_dtype": lambda i, b: i.sum(-1, dtype=i.dtype),
    "prod_dlast": lambda i, b: i.prod(-1),
    "amax_d23": lambda i, b: i.amax((2, 3)),
    "amin_d0": lambda i, b: i.amin(0),
    "max_all": lambda i, b: i.max(),
    "bool_sum": lambda i, b: b.sum(),                # bool -> int64
    "bool_sum_d1": lambda i, b: b.sum(1),
    "bool_amax": lambda i, b: b.amax(-1),
    "mean_of_cast": lambda i, b: i.float().mean(1),
}


@pytest.mark.parametrize("dtype,layout,codegen", params(
    [(torch.int32, "contiguous"), (torch.int64, "channels_last"), (torch.int32, "transposed")], triton=(0,)))
def test_int_bool_reductions(dtype, layout, codegen):
    i = make(R4, dtype, layout, low=-3, high=4)
    b = make(R4, torch.bool, layout)
    check_ops(INT_RED, i, b, codegen=codegen)


ARG = {
    "max_d1": lambda x: torch.max(x, 1),
    "min_dlast": lambda x: torch.min(x, -1),
    "max_d0_keepdim": lambda x: x.max(0, keepdim=True),
    "min_d2_keepdim": lambda x: torch.min(x, dim=2, keepdim=True),
    "argmax": lambda x: torch.argmax(x),
    "argmin": lambda x: x.argmin(),
    "argmax_d1": lambda x: x.argmax(1),
    "argmax_dlast_keepdim": lambda x: x.argmax(-1, keepdim=True),
    "argmin_d0": lambda x: torch.argmin(x, 0),
    "argmin_d3_keepdim": lambda x: x.argmin(3, keepdim=True),
    "max_values_plus_one": lambda x: x.max(1).values + 1,
}


@pytest.mark.parametrize("kind,layout,codegen", params(
    [("float_nan_inf", "contiguous"), ("float_nan_inf", "transposed"), ("float_inf_rows", "channels_last"),
     ("int_ties", "contiguous"), ("int_ties", "sliced"), ("float64_ties", "contiguous")],
    triton=(0, 3)))
def test_max_min_argmax(kind, layout, codegen):
    """Ties return the first index; NaN wins max/min and argmax/argmin (first NaN's index); rows of -inf."""
    if kind == "float_nan_inf":
        x = make(R4, torch.float32, layout, special=(NAN, INF, -INF), special_frac=0.02)
    elif kind == "float_inf_rows":
        x = make(R4, torch.float32, layout)
        x[0, 1] = -INF
        x[1, :, 2] = INF
        x[2, 3, 4, 5] = NAN
    elif kind == "int_ties":
        x = make(R4, torch.int64 if layout == "sliced" else torch.int32, layout, low=-2, high=3)
    else:
        x = make(R4, torch.float64, layout).round()
    check_ops(ARG, x, codegen=codegen)


VAR = {
    "var_all": lambda x: x.var(),
    "var_d1": lambda x: x.var(1),
    "var_d23_corr0": lambda x: torch.var(x, dim=(2, 3), correction=0),
    "var_dlast_corr2_keepdim": lambda x: x.var(-1, correction=2, keepdim=True),
    "var_unbiased_false": lambda x: x.var(0, unbiased=False),
    "std_all": lambda x: x.std(),
    "std_dlast_keepdim": lambda x: x.std(-1, keepdim=True),
    "std_d02_corr0": lambda x: torch.std(x, (0, 2), correction=0),
    "var_mean_d1": lambda x: torch.var_mean(x, 1),
    "var_mean_all_corr0": lambda x: torch.var_mean(x, correction=0),
    "std_mean_d23": lambda x: torch.std_mean(x, (2, 3), keepdim=True),
    "var_of_shifted": lambda x: (x + 1000).var(1),   # catastrophic cancellation for a naive sum(x^2)-n*m^2
}


@pytest.mark.parametrize("dtype,layout,codegen", params(
    [(torch.float32, "contiguous"), (torch.float32, "transposed"), (torch.float32, "channels_last"),
     (torch.float64, "sliced")], triton=(0,)))
def test_var_std(dtype, layout, codegen):
    x = make(R4, dtype, layout)
    tol = dict(atol=2e-4, rtol=1e-4) if dtype == torch.float32 else {}
    check_ops(VAR, x, codegen=codegen, **tol)


SOFTMAX = {f"{name}_d{d}": (lambda x, m, d=d, f=f: f(x, d)) for d in range(4)
           for name, f in (("softmax", torch.softmax), ("log_softmax", F.log_softmax))}
SOFTMAX.update({
    "softmax_masked": lambda x, m: torch.softmax(x.masked_fill(m, -INF), -1),  # one row fully masked -> nan
    "log_softmax_masked": lambda x, m: torch.log_softmax(x.masked_fill(m, -INF), -1),
    "softmax_dtype_f64": lambda x, m: F.softmax(x, 1, dtype=torch.float64),
    "softmax_scaled_temp": lambda x, m: F.softmax(x / 0.1, -1),
    "nn.Softmax": lambda x, m: nn.Softmax(dim=2)(x),
    "softmax_then_matmulish": lambda x, m: (torch.softmax(x, -1) * x).sum(-1),
})


@pytest.mark.parametrize("dtype,layout,scale,codegen", params(
    [(torch.float32, "contiguous", 1.0), (torch.float32, "transposed", 1.0), (torch.float32, "channels_last", 1.0),
     (torch.float32, "contiguous", 100.0), (torch.float64, "sliced", 1.0), (torch.float16, "contiguous", 1.0),
     (torch.bfloat16, "contiguous", 1.0)],
    triton=(0, 3)))
def test_softmax(dtype, layout, scale, codegen):
    """scale=100: exp overflows float32 unless the max is subtracted first."""
    x = make(R4, dtype, layout) * scale
    m = torch.rand(R4) < 0.3
    m[0, 0, 0, :] = True
    check_ops(SOFTMAX, x, m, codegen=codegen, **({"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {}))


LAYER_NORM = {
    "ln_last": lambda x, w, b, w2, b2: F.layer_norm(x, (11,)),
    "ln_last_affine": lambda x, w, b, w2, b2: F.layer_norm(x, (11,), w, b),
    "ln_last_weight_only": lambda x, w, b, w2, b2: F.layer_norm(x, (11,), weight=w, eps=1e-3),
    "ln_last2_affine": lambda x, w, b, w2, b2: F.layer_norm(x, (7, 11), w2, b2),
    "ln_last3": lambda x, w, b, w2, b2: F.layer_norm(x, (6, 7, 11), eps=0.1),
    "ln_then_gelu": lambda x, w, b, w2, b2: F.gelu(F.layer_norm(x * 3 + 1, (11,), w, b)),
    "rms_norm": lambda x, w, b, w2, b2: F.rms_norm(x, (11,), w, eps=1e-6),
}


@pytest.mark.parametrize("dtype,layout,codegen", params(
    [(torch.float32, "contiguous"), (torch.float32, "transposed"), (torch.float32, "channels_last"),
     (torch.float64, "sliced"), (torch.bfloat16, "contiguous")], triton=(0, 1)))
def test_layer_norm(dtype, layout, codegen):
    x = make(R4, dtype, layout)
    w, b = make((11,), dtype), make((11,), dtype)
    w2, b2 = make((7, 11), dtype, "transposed"), make((7, 11), dtype)
    check_ops(LAYER_NORM, x, w, b, w2, b2, codegen=codegen,
              **({"atol": 1e-4, "rtol": 1e-5} if dtype == torch.float32 else {}))


@pytest.mark.parametrize("affine,codegen", params([True, False], triton=(0,)))
def test_layer_norm_module(affine, codegen):
    m = nn.LayerNorm(11, elementwise_affine=affine)
    if affine:
        with torch.no_grad():
            m.weight.normal_()
            m.bias.normal_()
    check(m, make(R4, torch.float32, "transposed"), codegen=codegen, atol=1e-4, rtol=1e-5)


# ---------------------------------------------------------------------------------------------- batch norm
def _bn2d(affine=True, momentum=0.1, track=True):
    # (momentum=None, the cumulative average, reads num_batches_tracked.item(): Dynamo cannot trace it fullgraph)
    m = nn.BatchNorm2d(6, affine=affine, momentum=momentum, track_running_stats=track)
    with torch.no_grad():
        if affine:
            m.weight.uniform_(0.5, 1.5)
            m.bias.normal_()
        if track:
            m.running_mean.normal_()
            m.running_var.uniform_(0.5, 2.0)
    return m


@pytest.mark.parametrize("mode,layout,variant,codegen", params(
    [("train", "contiguous", "default"), ("train", "channels_last", "default"), ("eval", "contiguous", "default"),
     ("eval", "channels_last", "default"), ("train", "contiguous", "momentum_0.5"),
     ("train", "sliced", "no_affine"), ("train", "contiguous", "no_running_stats")],
    triton=(0, 2)))
def test_batch_norm2d_module(mode, layout, variant, codegen):
    """Train mode normalizes with the batch's biased variance and updates running_mean/var (unbiased) and
    num_batches_tracked exactly like eager; eval mode uses the running stats. Compared after two calls."""
    m = _bn2d(affine=variant != "no_affine", momentum=0.5 if variant == "momentum_0.5" else 0.1,
              track=variant != "no_running_stats")
    m.train(mode == "train")
    x = make(R4, torch.float32, layout) * 2 + 0.5
    check(m, x, codegen=codegen, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("shape", [(8, 6), (4, 6, 9)], ids=["NC", "NCL"])
def test_batch_norm1d_module(shape):
    m = nn.BatchNorm1d(6)
    check(m.train(), make(shape, torch.float32), atol=1e-4, rtol=1e-5)


def test_batch_norm_functional_mutates_running_stats(codegen="cpp"):
    """F.batch_norm(training=True) with running stats passed as inputs mutates those inputs in place."""
    def fn(x, rm, rv, w, b):
        return F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3, eps=1e-3).relu()
    check(fn, make(R4), make((6,)), make((6,), low=0.5, high=2), make((6,)), make((6,)),
          codegen=codegen, atol=1e-4, rtol=1e-5)


# ---------------------------------------------------------------------------------------------- group norm
GROUP_NORM = {
    "gn3_affine": lambda x, w, b: F.group_norm(x, 3, w, b),
    "gn2": lambda x, w, b: F.group_norm(x, 2, eps=1e-3),
    "gn6_instance_like": lambda x, w, b: F.group_norm(x, 6, w, b),
    "gn1": lambda x, w, b: F.group_norm(x, 1),
    "gn_then_silu": lambda x, w, b: F.silu(F.group_norm(x, 3, w, b)),
}


@pytest.mark.parametrize("layout,codegen", params(["contiguous", "channels_last", "transposed"], triton=(0,)))
def test_group_norm(layout, codegen):
    check_ops(GROUP_NORM, make(R4, torch.float32, layout), make((6,)), make((6,)), codegen=codegen,
              atol=1e-4, rtol=1e-5)


def test_group_norm_module():
    m = nn.GroupNorm(3, 6)
    with torch.no_grad():
        m.weight.normal_()
        m.bias.normal_()
    check(m, make(R4, torch.float32, "channels_last"), atol=1e-4, rtol=1e-5)


# ---------------------------------------------------------------------------------------------- norms
NORMS = {
    "norm": lambda x: torch.norm(x),
    "norm_p1_d1": lambda x: x.norm(p=1, dim=1),
    "norm_fro_d23": lambda x: torch.norm(x, dim=(2, 3)),
    "vn_2": lambda x: torch.linalg.vector_norm(x),
    "vn_2_dlast_keepdim": lambda x: torch.linalg.vector_norm(x, 2, dim=-1, keepdim=True),
    "vn_inf": lambda x: torch.linalg.vector_norm(x, math.inf, dim=1),
    "vn_neginf": lambda x: torch.linalg.vector_norm(x, -math.inf, dim=(0, 1)),
    "vn_0": lambda x: torch.linalg.vector_norm(x, 0, dim=2),
    "vn_3": lambda x: torch.linalg.vector_norm(x, 3, dim=-1),
    "vn_1": lambda x: torch.linalg.vector_norm(x, 1),
    "normalize": lambda x: F.normalize(x, dim=1),
}


@pytest.mark.parametrize("dtype,layout,codegen", params(
    [(torch.float32, "contiguous"), (torch.float64, "transposed"), (torch.float32, "channels_last")], triton=(0,)))
def test_norms(dtype, layout, codegen):
    x = make(R4, dtype, layout)
    x[0, 0, 0, :3] = 0.0  # vector_norm(ord=0) counts non-zeros
    check_ops(NORMS, x, codegen=codegen, **_red_tol(dtype))


ANY_ALL = {
    "any": lambda b, x: b.any(),
    "all": lambda b, x: torch.all(b),
    "any_d1": lambda b, x: b.any(1),
    "all_dlast": lambda b, x: b.all(-1),
    "all_d23": lambda b, x: b.all((2, 3)),
    "any_dlast_keepdim": lambda b, x: b.any(-1, keepdim=True),
    "any_float": lambda b, x: x.any(1),           # non-zero is true
    "all_float": lambda b, x: torch.all(x, -1),
    "any_of_cmp": lambda b, x: (x > 3.5).any(),
    "all_of_cmp": lambda b, x: (x > -3.9).all(0),
}


@pytest.mark.parametrize("layout,codegen", params(["contiguous", "transposed"], triton=(0,)))
def test_any_all(layout, codegen):
    b = make(R4, torch.bool, layout)
    b[0] = True                 # all-true and all-false slices
    b[1, 0] = False
    b[2, :, :, 0] = True
    x = make(R4, torch.float32, layout)
    x[0, :, 0] = 0.0            # zeros are false
    check_ops(ANY_ALL, b, x, codegen=codegen)


LONG = {
    "sum_row": lambda x, y: x.sum(1),
    "mean_row": lambda x, y: x.mean(-1),
    "amax_row": lambda x, y: x.amax(1),
    "softmax_row": lambda x, y: torch.softmax(x, -1),
    "log_softmax_row": lambda x, y: torch.log_softmax(x, -1),
    "argmax_row": lambda x, y: x.argmax(1),
    "var_row": lambda x, y: x.var(1),
    "sum_col": lambda x, y: y.sum(0),
    "amin_col": lambda x, y: y.amin(0),
    "sum_all": lambda x, y: x.sum(),
    "layer_norm_row": lambda x, y: F.layer_norm(x, (x.shape[-1],)),
}


@pytest.mark.parametrize("layout,codegen", params(["contiguous", "transposed"], triton=(0,)))
def test_long_reductions(layout, codegen):
    """Rows of 6000 elements (split / multi-stage reductions) and columns of 6000."""
    check_ops(LONG, make((5, 6000), torch.float32, layout), make((6000, 5), torch.float32, layout),
              codegen=codegen, atol=2e-3, rtol=1e-4)


MISC = {
    "logsumexp_d1": lambda x: torch.logsumexp(x, 1),
    "logsumexp_all_big": lambda x: torch.logsumexp(x * 50, (0, 1, 2, 3)),
    "cumsum_d1": lambda x: torch.cumsum(x, 1),
    "cumsum_then_pointwise": lambda x: (x * 2).cumsum(-1).sin() + 1,
    "cumprod": lambda x: torch.cumprod(x * 0.5, -1),
    "count_nonzero": lambda x: torch.count_nonzero(x > 0, 1),
    "mean_of_bool_cast": lambda x: (x > 0).float().mean(),
    "sum_of_squares": lambda x: (x * x).sum(-1).sqrt(),
}


@pytest.mark.parametrize("layout,codegen", params(["contiguous", "channels_last"], triton=(0,)))
def test_misc_reductions(layout, codegen):
    check_ops(MISC, make(R4, torch.float32, layout), codegen=codegen, atol=1e-4, rtol=1e-5)

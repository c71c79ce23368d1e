"""Random ops made in the kernels (Triton target, `TritonChoices.random_in_kernel`; TRITON_INTERPRET=1 on
CPU): dropout, rand/randn(_like), bernoulli. Their values cannot equal eager's, so they are held to what
eager promises instead: the distribution (within 6 standard errors on 2**17 elements), dropout's scale and
its mask agreeing with the output and the gradient, the edge cases p = 0 and p = 1, train vs eval, dtypes,
reproducibility under `torch.manual_seed`, fresh numbers on every call, and dynamic shapes. Where the
seeds come from is checked bit for bit: the graph draws them from torch's generator, so a NumPy Philox
given the same draw reproduces every value."""
import math
import os
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fuse_all
from fuse_all_optest import compile_fn, extern_targets

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kernel_examples.random import reference_rand  # noqa: E402

N = 1 << 17
FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def within(observed: float, expected: float, sigma: float, n: int = N, k: float = 6.0) -> bool:
    return abs(observed - expected) <= k * sigma / math.sqrt(n)


def compiled(fn, **kw):
    fuse_all.reset()
    return compile_fn(fn, "triton", **kw)


def positive(shape, dtype, requires_grad=False):
    """Values in [1, 2): never zero, so a zero in a result is a dropped element."""
    return (torch.rand(shape) + 1).to(dtype).requires_grad_(requires_grad)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_keeps_one_minus_p_and_scales_by_its_inverse(dtype, p):
    x = positive((256, N // 256), dtype)
    out, mask = compiled(lambda x: torch.native_dropout(x, p, True))(x)
    assert out.dtype == dtype and mask.dtype == torch.bool and out.shape == mask.shape == x.shape
    assert extern_targets(backward=False) == ["aten.randint.low"]   # the dropout itself runs in the kernel
    kept = mask.float().mean().item()
    assert within(kept, 1 - p, math.sqrt(p * (1 - p))), kept
    assert not bool(out[~mask].any())
    # kept: x / (1 - p), rounded once to the dtype (CUDA's eager dropout; CPU's rounds the scale to a narrow
    # dtype first, one unit in the last place away)
    scaled = (x.float() * (1.0 / (1 - p))).to(dtype)
    ulp = {torch.float32: 0.0, torch.float16: 2 ** -10, torch.bfloat16: 2 ** -7}[dtype]
    torch.testing.assert_close(out[mask], scaled[mask], atol=0, rtol=ulp)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_dropout_gradient_is_zero_exactly_where_the_output_is(dtype):
    p = 0.4
    x = positive((128, N // 128), dtype, requires_grad=True)
    grad = positive(x.shape, dtype)
    out = compiled(lambda x: F.dropout(x, p, training=True) * 3)(x)
    out.backward(grad)
    dropped = out == 0
    assert 0 < dropped.float().mean().item() < 1
    assert torch.equal(x.grad == 0, dropped)
    # what eager computes from this mask: the product rounded to the dtype, then the scaled kept gradient
    expected = torch.ops.aten.native_dropout_backward(grad * 3, ~dropped, 1 / (1 - p))
    torch.testing.assert_close(x.grad[~dropped], expected[~dropped])


def test_dropout_p_zero_keeps_everything_and_p_one_drops_everything():
    x = positive((64, 129), torch.float32, requires_grad=True)
    out0, mask0 = compiled(lambda x: torch.native_dropout(x, 0.0, True))(x)
    assert torch.equal(out0, x) and bool(mask0.all())
    out1, mask1 = compiled(lambda x: torch.native_dropout(x, 1.0, True))(x)
    assert not bool(mask1.any()) and torch.equal(out1, torch.zeros_like(x))
    compiled(lambda x: F.dropout(x, 1.0, training=True))(x).sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))


def test_native_dropout_outside_training_is_a_copy_and_an_all_true_mask():
    x = positive((16, 33), torch.float32)
    out, mask = compiled(lambda x: torch.native_dropout(x, 0.5, False))(x)
    assert torch.equal(out, x) and out.data_ptr() != x.data_ptr() and mask.dtype == torch.bool and bool(mask.all())


def test_dropout_propagates_nan_where_dropped_like_eager():
    """Eager multiplies by the mask: a NaN input stays NaN even where dropped."""
    x = torch.full((64, 64), float("nan"))
    out, mask = compiled(lambda x: torch.native_dropout(x, 0.5, True))(x)
    assert bool(out.isnan().all()) and 0 < mask.float().mean().item() < 1


def test_train_and_eval():
    model = nn.Sequential(nn.Linear(64, 64), nn.Dropout(0.5), nn.ReLU())
    x = torch.randn(256, 64)
    fn = compiled(model)
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(fn(x), model(x))
    model.train()
    with torch.no_grad():
        trained = fn(x)
        reference = torch.relu(model[0](x))
    kept = trained != 0
    # where kept, the value is eager's times 2; about half the positive activations are kept
    torch.testing.assert_close(trained[kept], 2 * reference[kept])
    assert within(kept.sum().item() / (reference > 0).sum().item(), 0.5, 0.5, n=int((reference > 0).sum()))


def test_reproducible_under_manual_seed_and_fresh_on_every_call():
    fn = compiled(lambda x: (F.dropout(x, 0.5, training=True), torch.rand_like(x), torch.randn_like(x)))
    x = positive((32, 1024), torch.float32)
    torch.manual_seed(1234)
    first = fn(x)
    second = fn(x)
    torch.manual_seed(1234)
    again = fn(x)
    for a, b, c in zip(first, second, again):
        assert torch.equal(a, c)
        assert not torch.equal(a, b)
    # the random ops of one graph draw different seeds: their numbers are unrelated
    assert not torch.equal(first[1], (first[0] != 0).float())
    assert abs(np.corrcoef(first[1].flatten().numpy(), first[2].flatten().numpy())[0, 1]) < 0.02


def test_the_seeds_come_from_torchs_generator():
    """One random op: the graph draws one seed with randint(int64 range) from the CPU generator; element i
    of rand_like is then Philox(seed, i) -- bit for bit against the NumPy reference."""
    fn = compiled(lambda x: torch.rand_like(x) * 1)
    x = torch.empty(7, 129)
    torch.manual_seed(77)
    out = fn(x)
    torch.manual_seed(77)
    info = torch.iinfo(torch.int64)
    seed = int(torch.randint(info.min, info.max, [1], dtype=torch.int64)[0])
    expected = reference_rand(seed, np.arange(x.numel(), dtype=np.int64)).reshape(x.shape)
    assert np.array_equal(out.numpy(), expected)


@pytest.mark.parametrize("dtype", FLOATS + (torch.float64,), ids=str)
def test_rand_like_is_uniform_in_zero_one(dtype):
    x = torch.empty(N, dtype=dtype)
    u = compiled(lambda x: torch.rand_like(x))(x)
    assert u.dtype == dtype and extern_targets(backward=False) == ["aten.randint.low"]
    assert 0 <= u.min().item() and u.max().item() < 1
    digits = {torch.float16: 11, torch.bfloat16: 8}.get(dtype, 24)
    assert torch.equal(u.double() * 2 ** digits, (u.double() * 2 ** digits).floor())   # the dtype's grid
    assert within(u.double().mean().item(), 0.5, math.sqrt(1 / 12))
    assert within(u.double().var().item(), 1 / 12, math.sqrt(1 / 180))
    below = (u < 0.25).double().mean().item()
    assert within(below, 0.25, math.sqrt(0.25 * 0.75))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_randn_like_is_standard_normal(dtype):
    z = compiled(lambda x: torch.randn_like(x))(torch.empty(N, dtype=dtype)).double()
    assert bool(z.isfinite().all())
    assert within(z.mean().item(), 0.0, 1.0)
    assert within(z.var().item(), 1.0, math.sqrt(2.0))
    assert within((z.abs() < 1).double().mean().item(), math.erf(1 / math.sqrt(2)), 0.47)


def test_rand_and_randn_factories():
    u, z = compiled(lambda x: (torch.rand(x.shape[0], 512) + x, torch.randn(512, x.shape[0]).t() + x))(
        torch.zeros(256, 1))
    assert extern_targets(backward=False) == ["aten.randint.low"]
    assert 0 <= u.min().item() and u.max().item() < 1
    assert within(u.double().mean().item(), 0.5, math.sqrt(1 / 12))
    assert within(z.double().mean().item(), 0.0, 1.0) and within(z.double().var().item(), 1.0, math.sqrt(2))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_bernoulli(dtype):
    probs = torch.cat([torch.zeros(N // 4), torch.ones(N // 4), torch.full((N // 2,), 0.3)]).to(dtype)
    draws, fixed = compiled(lambda q: (torch.bernoulli(q), torch.empty_like(q).bernoulli_(0.7)))(probs)
    assert draws.dtype == fixed.dtype == dtype and extern_targets(backward=False) == ["aten.randint.low"]
    assert set(draws.unique().tolist()) <= {0.0, 1.0} and set(fixed.unique().tolist()) <= {0.0, 1.0}
    assert not bool(draws[: N // 4].any()) and bool(draws[N // 4: N // 2].all())
    assert within(draws[N // 2:].double().mean().item(), 0.3, math.sqrt(0.21), n=N // 2)
    assert within(fixed.double().mean().item(), 0.7, math.sqrt(0.21))


def test_dynamic_shapes():
    fn = compiled(lambda x: (F.dropout(x, 0.25, training=True), torch.rand(x.shape[0] * 2, 64)), dynamic=True)
    for rows in (300, 517):
        x = positive((rows, 256), torch.float32)
        out, u = fn(x)
        kept = (out != 0).double().mean().item()
        assert within(kept, 0.75, math.sqrt(0.1875), n=x.numel())
        torch.testing.assert_close(out[out != 0], (x / 0.75)[out != 0])
        assert u.shape == (2 * rows, 64) and 0 <= u.min().item() and u.max().item() < 1
        assert within(u.double().mean().item(), 0.5, math.sqrt(1 / 12), n=u.numel())
    assert any(g.kernels and g.kernels[0].size_symbols for g in fuse_all.compiled_graphs())


def test_dropout_fuses_with_its_neighbours():
    """The dropout of a residual block is one kernel with the add before and after it (Inductor's shape):
    no ATen call but the seeds."""
    def block(x, y, bias):
        return F.dropout(x + bias, 0.1, training=True) + y
    x, y, bias = positive((64, 256), torch.float32), positive((64, 256), torch.float32), torch.randn(256)
    out = compiled(block)(x, y, bias)
    graphs = fuse_all.compiled_graphs()
    assert extern_targets(backward=False) == ["aten.randint.low"] and len(graphs[-1].kernels) == 1
    kept = out != y
    torch.testing.assert_close(out[kept], ((x + bias) / 0.9 + y)[kept])


def test_cpp_keeps_atens_random_numbers(caplog):
    """The C++ target draws from ATen (eager's CPU values): same seed, same numbers as eager, and no warning
    that a fusable op ran in ATen (it does by the target's choice)."""
    fuse_all.reset()
    fn = compile_fn(lambda x: (F.dropout(x, 0.3, training=True), torch.rand_like(x)), "cpp")
    x = positive((16, 33), torch.float32)
    torch.manual_seed(5)
    got = fn(x)
    torch.manual_seed(5)
    expected = (F.dropout(x, 0.3, training=True), torch.rand_like(x))
    for a, b in zip(got, expected):
        assert torch.equal(a, b)
    externs = {e.target: e.reason for e in fuse_all.compiled_graphs()[-1].externs}
    assert "random_in_kernel" in externs["aten.native_dropout.default"]
    assert "instead of fused kernels" not in caplog.text


def test_an_element_has_one_value_in_every_kernel_that_computes_it():
    """Element i of a random op is Philox(seed, i) wherever it is computed: a reduction kernel walking rows,
    a tiled transposed copy, a recomputed shared value, and the stored result agree."""
    def fn(x, y):
        d = F.dropout(x, 0.5, training=True)
        r = torch.rand_like(x)
        return d, d.sum(1), (d * 2).t().contiguous(), F.layer_norm(d + y, (x.shape[1],)), r, r.amax(0), r.t() + 1
    x, y = positive((96, 130), torch.float32), positive((96, 130), torch.float32)
    d, row_sums, transposed, normed, r, col_max, r_t = compiled(fn)(x, y)
    assert len(fuse_all.compiled_graphs()[-1].kernels) > 1
    assert 0 < (d == 0).float().mean().item() < 1
    torch.testing.assert_close(row_sums, d.sum(1))
    assert torch.equal(transposed, (d * 2).t())
    torch.testing.assert_close(normed, F.layer_norm(d + y, (x.shape[1],)), atol=1e-5, rtol=1e-5)
    assert torch.equal(col_max, r.amax(0)) and torch.equal(r_t, r.t() + 1)


def test_repeated_layers_share_one_compiled_kernel_with_their_own_seeds():
    """A seed's position is a launch argument: the dropout kernels of repeated layers are one compiled
    kernel (kernel_sharing), each launch still drawing its own numbers."""
    def fn(x, w1, w2, w3):
        outs = []
        for w in (w1, w2, w3):
            d = F.dropout(x @ w, 0.5, training=True)
            x = torch.tanh(d + x)
            outs += [d, x]
        return outs
    x, ws = torch.randn(64, 48), [torch.randn(48, 48) for _ in range(3)]
    outs = compiled(fn)(x, *ws)
    source = open(fuse_all.compiled_graphs()[-1].output_code).read()
    assert source.count("same code as kernel_0: one compile") == 2, source
    _compile_signatures_use_the_shared_functions_names(fuse_all.compiled_graphs()[-1].output_code)
    masks = [d == 0 for d in outs[0::2]]
    for mask in masks:
        assert within(mask.float().mean().item(), 0.5, 0.5, n=mask.numel())
    assert not torch.equal(masks[0], masks[1]) and not torch.equal(masks[1], masks[2])
    previous = x
    for d, out, w in zip(outs[0::2], outs[1::2], ws):
        kept = d != 0
        torch.testing.assert_close(d[kept], 2 * (previous @ w)[kept])
        torch.testing.assert_close(out, torch.tanh(d + previous))
        previous = out


def _compile_signatures_use_the_shared_functions_names(output_code: str) -> None:
    """What a GPU compiles for a launcher whose kernel shares another's function: the signature names the
    function's parameters (the sharer's own size names, `seed_index1`, are not the function's: Triton 3.6
    raised "'seed_index16' is not in list" and the fast launch fell back to Triton's slower launcher)."""
    import importlib.util

    from fuse_all_codegen_triton.compiler import signature

    spec = importlib.util.spec_from_file_location("fuse_all_random_sharing_program", output_code)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    launchers = [getattr(module, n) for n in dir(module) if n.endswith("_launcher")]
    sharers = [k for k in launchers if k.fn.__name__ != k.name]
    assert len(sharers) == 2
    for launcher in launchers:
        params = list(launcher.fn.arg_names)
        sig = signature(launcher.fn, launcher.spec, False)
        assert list(sig) == params[:len(sig)], (launcher.name, sig, params)

"""Helpers of the op correctness suite: build inputs with interesting layouts, compile, compare to eager.

    check(fn, *inputs, codegen="cpp", atol=None, rtol=None, ...)
    check_ops({"name": fn, ...}, *inputs, ...)   # one graph returning a dict; on failure, bisects by op

The backend is `FUSE_ALL_TEST_BACKEND` (default "fuse_all"); `aot_eager` validates the tests themselves.
`codegen="triton"` adds `options={"codegen": "triton"}` (only for the fuse_all backend).
"""
from __future__ import annotations

import copy
import math
import os
from typing import Callable, Sequence

import pytest
import torch
import torch.utils._pytree as pytree
from torch._dynamo.utils import counters

BACKEND = os.environ.get("FUSE_ALL_TEST_BACKEND", "fuse_all")
BISECT = os.environ.get("FUSE_ALL_TEST_BISECT", "1") != "0"
# FUSE_ALL_TEST_STRICT=0: let fuse_all fall back to ATen for graphs it cannot compile (see compile_options)
STRICT = os.environ.get("FUSE_ALL_TEST_STRICT", "1") != "0"
CODEGENS = ("cpp", "triton")

FLOAT_DTYPES = (torch.float32, torch.float64)
LOW_DTYPES = (torch.float16, torch.bfloat16)
INT_DTYPES = (torch.int32, torch.int64)
LAYOUTS = ("contiguous", "transposed", "sliced", "expanded", "channels_last")

# (atol, rtol) per dtype. float32/float64 are torch.testing.assert_close's defaults; low precision is loose
# because eager rounds after every op while a fused kernel computes in float32 and rounds once.
TOL = {
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (5e-2, 5e-2),
    torch.float32: (1e-5, 1.3e-6),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1e-5, 1.3e-6),
    torch.complex128: (1e-7, 1e-7),
}


def dtype_id(d) -> str:
    return str(d).replace("torch.", "")


# ----------------------------------------------------------------------------------------------- params
def params(argvalues: Sequence, triton: Callable[..., bool] | Sequence[int] = (), ids: Callable | None = None):
    """pytest params for `@pytest.mark.parametrize("a,b,codegen", params([(a, b), ...], triton=...))`.

    Every combination runs with codegen "cpp"; those selected by `triton` (a predicate over the values, or
    a list of indices) also run with codegen "triton" (marked `triton`)."""
    out = []
    for i, vals in enumerate(argvalues):
        vals = tuple(vals) if isinstance(vals, (tuple, list)) else (vals,)
        name = ids(*vals) if ids else "-".join(_id(v) for v in vals)
        out.append(pytest.param(*vals, "cpp", id=f"{name}-cpp"))
        pick = triton(*vals) if callable(triton) else i in triton
        if pick:
            out.append(pytest.param(*vals, "triton", id=f"{name}-triton", marks=pytest.mark.triton))
    return out


# for a single-case test that runs on both codegens: @pytest.mark.parametrize("codegen", BOTH)
BOTH = [pytest.param("cpp", id="cpp"), pytest.param("triton", id="triton", marks=pytest.mark.triton)]


def _id(v) -> str:
    if isinstance(v, torch.dtype):
        return dtype_id(v)
    if isinstance(v, (tuple, list)):
        return "x".join(_id(x) for x in v) or "scalar"
    return str(v)


# ----------------------------------------------------------------------------------------------- inputs
def make(shape, dtype=torch.float32, layout="contiguous", *, low=None, high=None, nonzero=False,
         special: Sequence = (), special_frac: float = 0.15, requires_grad=False) -> torch.Tensor:
    """A random tensor of logical `shape` laid out as `layout`:

    contiguous | transposed (last two dims swapped in memory) | permuted (all dims reversed in memory) |
    sliced (storage offset > 0, step 2 in the last dim) | expanded (stride 0 in the first dim > 1) |
    channels_last (4-D) / channels_last_3d (5-D).

    floats: uniform in [low, high] (default [-4, 4]); ints: [low, high) (default [-9, 10)); bools: 50/50.
    `nonzero` keeps values away from 0 (divisors); `special` values (nan, inf, .5s) are scattered over a
    fraction of the elements, in memory before the view, so every layout sees them.
    """
    shape = tuple(shape)
    base_shape, view = _layout_plan(shape, layout)
    base = _random(base_shape, dtype, low, high, nonzero, special, special_frac)
    x = view(base)
    assert tuple(x.shape) == shape, (x.shape, shape, layout)
    if requires_grad:
        x = x.detach().requires_grad_()
    return x


def _layout_plan(shape, layout):
    n = len(shape)
    if layout == "contiguous" or n == 0:
        return shape, lambda b: b
    if layout == "transposed":
        assert n >= 2
        return shape[:-2] + (shape[-1], shape[-2]), lambda b: b.transpose(-1, -2)
    if layout == "permuted":
        return tuple(reversed(shape)), lambda b: b.permute(*reversed(range(n)))
    if layout == "channels_last":
        assert n in (4, 5), "channels_last needs a 4-D or 5-D shape"
        fmt = torch.channels_last if n == 4 else torch.channels_last_3d
        return shape, lambda b: b.contiguous(memory_format=fmt)
    if layout == "sliced":
        if n == 1:
            return (2 * shape[0] + 3,), lambda b: b[3::2]
        base = (shape[0] + 2,) + shape[1:-1] + (2 * shape[-1] + 1,)
        return base, lambda b: b[1:1 + shape[0], ..., 1::2]
    if layout == "expanded":
        d = next((i for i, s in enumerate(shape) if s > 1), 0)
        base = shape[:d] + (1,) + shape[d + 1:]
        return base, lambda b: b.expand(shape)
    raise ValueError(layout)


def _random(shape, dtype, low, high, nonzero, special, frac):
    if dtype == torch.bool:
        return torch.rand(shape) < 0.5
    if dtype.is_complex:
        return torch.randn(shape, dtype=dtype)
    if dtype.is_floating_point:
        lo = -4.0 if low is None else low
        hi = 4.0 if high is None else high
        x = torch.empty(shape, dtype=torch.float64).uniform_(lo, hi)
        if nonzero:
            x = torch.where(x.abs() < 0.1, torch.full_like(x, 0.5 if hi > 0.5 else hi), x)
    else:
        lo = -9 if low is None else low
        hi = 10 if high is None else high
        x = torch.randint(lo, hi, shape, dtype=torch.int64)
        if nonzero:
            x = torch.where(x == 0, torch.ones_like(x), x)
    if special and x.numel() > 0:
        flat = x.view(-1)
        k = max(len(special), int(flat.numel() * frac))
        pos = torch.randperm(flat.numel())[:k]
        vals = torch.tensor([special[i % len(special)] for i in range(len(pos))], dtype=flat.dtype)
        flat[pos] = vals
    return x.to(dtype)


# ----------------------------------------------------------------------------------------------- compile
def compile_options(codegen: str, backend=None, allow_fallback=False):
    """The `options` torch.compile passes to the backend. For fuse_all: `{"codegen": "triton"}` forces the
    Triton codegen, and `{"fallback": False}` makes a graph the backend cannot compile raise instead of
    silently running in ATen (which would pass every comparison without testing any lowering)."""
    if codegen not in CODEGENS:
        raise ValueError(codegen)
    if (backend or BACKEND) != "fuse_all":
        return None
    opts = {}
    if codegen == "triton":
        opts["codegen"] = "triton"
    if STRICT and not allow_fallback:
        opts["fallback"] = False
    return opts or None


def compile_fn(fn, codegen="cpp", *, backend=None, fullgraph=True, dynamic=None, allow_fallback=False):
    backend = backend or BACKEND
    return torch.compile(fn, backend=backend, options=compile_options(codegen, backend, allow_fallback),
                         fullgraph=fullgraph, dynamic=dynamic)


def vary_batchnorms(module: torch.nn.Module) -> torch.nn.Module:
    """`module` with every BatchNorm's running statistics and affine parameters made non-trivial (a fresh
    BatchNorm normalises by mean 0 and variance 1, which hides a wrong fold or a dropped term)."""
    for bn in module.modules():
        if isinstance(bn, torch.nn.modules.batchnorm._BatchNorm):
            bn.running_mean.normal_(0, 0.2)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.data.uniform_(0.5, 1.5)
            bn.bias.data.normal_(0, 0.5)
    return module


def judged_inference(model: torch.nn.Module, x: torch.Tensor, codegen: str = "triton", same_strides: bool = True):
    """`model(x)` compiled fresh under no_grad with float32 convolutions (TF32 off: cuDNN's algorithm choice
    then moves results by float32 rounding only), judged against float64 relative to eager's own error."""
    import fuse_all
    fuse_all.reset()
    torch._dynamo.reset()
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        actual = compile_fn(model, codegen)(x)
        eager = model(x)
        reference = copy.deepcopy(model).double()(x.double())
    assert actual.shape == eager.shape
    if same_strides:
        assert actual.stride() == eager.stride()
    assert_near_float64(actual, eager, reference, "output", atol=TOL[actual.dtype][0])


def extern_targets(only=None, *, backward: bool | None = None) -> list[str]:
    """The targets of the ATen calls (ExternCalls) in this process's compiled graphs
    (`fuse_all.compiled_graphs()`), in order. `only`: just those in this set; `backward=False`: forward and
    inference graphs only, `True`: backward graphs only."""
    import fuse_all
    return [e.target for g in fuse_all.compiled_graphs() if backward is None or (g.kind == "backward") == backward
            for e in g.externs if only is None or e.target in only]


class CountingBackend:
    """Forwards to the backend under test (with the codegen options) and records every graph it is given."""

    def __init__(self, codegen="cpp", allow_fallback=False):
        from torch._dynamo.backends.registry import lookup_backend
        self.real = lookup_backend(BACKEND)
        opts = compile_options(codegen, allow_fallback=allow_fallback)
        self.kwargs = {"options": opts} if opts else {}
        self.graphs: list[torch.fx.GraphModule] = []
        self.example_inputs: list[list] = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        self.example_inputs.append(list(example_inputs))
        return self.real(gm, example_inputs, **self.kwargs)

    @property
    def frame_count(self):
        return len(self.graphs)


# ----------------------------------------------------------------------------------------------- cloning
def _flat_storage(x: torch.Tensor) -> torch.Tensor:
    st = x.untyped_storage()
    return torch.empty(0, dtype=x.dtype, device=x.device).set_(st, 0, (st.nbytes() // x.element_size(),), (1,))


def clone_inputs(inputs, memo: dict, shuffle=False, device=None):
    """Copy tensors *with their layout* (sizes, strides, storage offset, the whole storage, aliasing between
    inputs); memo maps the original storage's address to the copy (a flat tensor over the new storage).
    `device`: the copies live there (the same layout on another device)."""
    out = []
    for x in inputs:
        if not isinstance(x, torch.Tensor):
            out.append(x)
            continue
        key = (x.untyped_storage().data_ptr(), x.dtype)
        if key not in memo:
            flat = _flat_storage(x).detach().clone()
            if shuffle and flat.numel() > 1:
                flat = flat[torch.randperm(flat.numel())].contiguous()
            memo[key] = flat if device is None else flat.to(device)
        y = memo[key].as_strided(x.shape, x.stride(), x.storage_offset()).detach()
        if x.requires_grad:
            y.requires_grad_(True)
        out.append(y)
    return out


# ----------------------------------------------------------------------------------------------- compare
class EagerError(Exception):
    """The test itself is wrong: eager PyTorch raised on these inputs."""


def _tol(dtype, atol, rtol):
    if not (dtype.is_floating_point or dtype.is_complex):
        return 0.0, 0.0
    a, r = TOL[dtype]
    return max(a, atol or 0.0), max(r, rtol or 0.0)


def _significant_strides(strides, shape):
    return [s for s, n in zip(strides, shape) if n > 1]


def assert_same_tensor(actual, expected, label, *, atol=None, rtol=None, check_strides=True, what="output",
                       traced_stride=None):
    """`traced_stride`: strides accepted besides eager's (what torch's meta functions predict): for ops whose
    eager layout this torch's meta functions get wrong, the traced graph has one or the other, depending on
    how the op decomposes."""
    where = f"{what} {label}" if label else what
    assert isinstance(actual, torch.Tensor), f"{where}: expected a Tensor, got {type(actual).__name__}"
    assert actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype}, eager {expected.dtype}"
    assert actual.shape == expected.shape, f"{where}: shape {tuple(actual.shape)}, eager {tuple(expected.shape)}"
    assert actual.device == expected.device, f"{where}: device {actual.device}, eager {expected.device}"
    if check_strides and expected.numel() > 1:
        got = _significant_strides(actual.stride(), actual.shape)
        wanted = {"eager": expected.stride()} if traced_stride is None else \
            {"eager": expected.stride(), "or as traced": tuple(traced_stride)}
        assert any(got == _significant_strides(w, expected.shape) for w in wanted.values()), (
            f"{where}: strides {actual.stride()}, " + ", ".join(f"{k} {w}" for k, w in wanted.items())
            + f" (size {tuple(expected.shape)}; dims of size 1 ignored)")
    a, r = _tol(expected.dtype, atol, rtol)
    torch.testing.assert_close(actual.detach(), expected.detach(), atol=a, rtol=r, equal_nan=True,
                               check_stride=False, msg=lambda m: f"{where}: {m}")


def assert_same(actual, expected, *, atol=None, rtol=None, check_strides=True, what="output", traced_strides=None):
    """`traced_strides`: {keystr of an output: strides} to judge those outputs' layouts by (see
    assert_same_tensor)."""
    traced_strides = traced_strides or {}
    e_leaves = pytree.tree_flatten_with_path(expected)[0]
    a_leaves = pytree.tree_flatten_with_path(actual)[0]
    e_keys = [pytree.keystr(p) for p, _ in e_leaves]
    a_keys = [pytree.keystr(p) for p, _ in a_leaves]
    assert e_keys == a_keys, f"{what} structure differs: compiled {a_keys}, eager {e_keys}"
    for (path, e), (_, a) in zip(e_leaves, a_leaves):
        label = pytree.keystr(path)
        if isinstance(e, torch.Tensor):
            assert_same_tensor(a, e, label, atol=atol, rtol=rtol, check_strides=check_strides, what=what,
                               traced_stride=traced_strides.get(label))
        elif isinstance(e, float) and math.isnan(e):
            assert isinstance(a, float) and math.isnan(a), f"{what} {label}: {a!r}, eager nan"
        else:
            assert a == e and type(a) is type(e), f"{what} {label}: {a!r}, eager {e!r}"


def on_device(tree, device):
    """`tree` with every tensor copied to `device` in its layout (strides, storage offset, the whole storage);
    tensors already there are left as they are."""
    def move(t):
        if not isinstance(t, torch.Tensor) or t.device == torch.device(device):
            return t
        flat = _flat_storage(t.detach()).to(device)
        return flat.as_strided(t.shape, t.stride(), t.storage_offset())
    return pytree.tree_map(move, tree)


def _aliasing(outputs, inputs):
    """For every output tensor: which inputs and which earlier outputs share its storage."""
    in_ptr = [x.untyped_storage().data_ptr() if isinstance(x, torch.Tensor) and x.numel() else None
              for x in inputs]
    leaves = [t for t in pytree.tree_leaves(outputs)]
    out_ptr = [t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) and t.numel() else None
               for t in leaves]
    rel = []
    for i, p in enumerate(out_ptr):
        if p is None:
            rel.append(None)
            continue
        rel.append((tuple(j for j, q in enumerate(in_ptr) if q == p),
                    tuple(j for j, q in enumerate(out_ptr[:i]) if q == p)))
    return rel


def _module_state(m: torch.nn.Module):
    st = {f"param {k}": v for k, v in m.named_parameters()}
    st.update({f"buffer {k}": v for k, v in m.named_buffers()})
    return st


def _cotangents(outputs):
    """Random upstream gradients for the differentiable outputs (same for eager and compiled)."""
    return [torch.randn_like(t) if isinstance(t, torch.Tensor) and t.requires_grad else None
            for t in pytree.tree_leaves(outputs)]


def _backward(outputs, cots):
    pairs = [(t, g) for t, g in zip(pytree.tree_leaves(outputs), cots) if g is not None]
    assert pairs, "no output requires grad"
    torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])


def traced_output_strides(fn, inputs) -> dict[str, tuple[int, ...]]:
    """{output keystr: strides} of `fn`'s tensor outputs as this torch's meta functions predict them
    (FakeTensorMode under the Python dispatcher, as Dynamo and AOTAutograd trace, see
    fuzzcheck.traced_layouts): the layout a traced graph promises."""
    from torch._dispatch.python import enable_python_dispatcher
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode, enable_python_dispatcher():
        fakes = [mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in inputs]
        outputs = fn(*fakes)
    return {pytree.keystr(path): tuple(t.stride()) for path, t in pytree.tree_flatten_with_path(outputs)[0]
            if isinstance(t, torch.Tensor)}


def check(fn, *inputs, codegen="cpp", atol=None, rtol=None, check_strides=True, check_aliasing=True,
          rerun=True, grad=False, dynamic=None, grad_atol=None, grad_rtol=None, backend=None,
          allow_fallback=False, traced_layout=False, grad_vs_float64=False, reference_device=None):
    """Compile `fn` with the backend under test and hold it to eager on `inputs`:
    outputs (values, dtype, shape, strides of dims > 1), which outputs alias which inputs/outputs, input
    mutations (whole storages are compared, so writes outside a view are caught), module parameters and
    buffers (`fn` may be an nn.Module: eager and compiled each get a deep copy), and with grad=True the
    gradients of every input/parameter that requires grad. With rerun=True the compiled function is then
    called again on inputs of the same layout whose values were shuffled (catches baked-in values and
    first-call-only paths). `backend` overrides the backend under test (the harness' own tests use it);
    `allow_fallback` lets fuse_all run a graph it cannot compile in ATen (for dtypes it must refuse).
    `traced_layout=True` accepts output strides as torch's meta functions predict them besides eager's (for
    ops whose eager layout this torch's meta functions predict wrongly; see check_ops).
    `grad_vs_float64=True` judges gradients by their error against a float64 run of `fn`, relative to
    eager's own error (assert_near_float64), instead of by a fixed tolerance against eager: for gradients
    summed over many terms, whose rounding depends on the summation order.
    `reference_device` runs eager (and the float64 reference) on copies of the inputs on that device, in the
    same layouts, for ops whose eager kernel on the compiled device is itself wrong (torch's CUDA
    channels-last avg_pool2d backward with padding, pytorch#188344)."""
    torch._dynamo.reset()
    counters.clear()
    is_mod = isinstance(fn, torch.nn.Module)
    eager_fn = copy.deepcopy(fn) if is_mod else fn
    if is_mod and reference_device is not None:
        eager_fn = eager_fn.to(reference_device)
    comp_target = copy.deepcopy(fn) if is_mod else fn
    compiled = compile_fn(comp_target, codegen, dynamic=dynamic, backend=backend, allow_fallback=allow_fallback)

    src = list(inputs)
    device = next((x.device for x in src if isinstance(x, torch.Tensor)), None)

    def here(tree):
        """eager's results, on the compiled inputs' device for the comparisons"""
        return tree if reference_device is None else on_device(tree, device)

    for run in range(2 if rerun else 1):
        e_memo, c_memo = {}, {}
        if run == 1:
            shuffled_memo = {}
            src = clone_inputs(src, shuffled_memo, shuffle=True)
        e_in = clone_inputs(src, e_memo, device=reference_device)
        c_in = clone_inputs(src, c_memo)
        try:
            expected = eager_fn(*e_in)
        except Exception as e:  # noqa: BLE001
            raise EagerError(f"eager raised (a bug in the test): {type(e).__name__}: {e}") from e
        actual = compiled(*c_in)
        if run == 0:
            assert counters["stats"]["unique_graphs"] >= 1, "the backend was never called (graph break / no graph?)"
        tag = "" if run == 0 else " (second call, shuffled inputs)"
        traced = traced_output_strides(eager_fn, clone_inputs(src, {}, device=reference_device)) if traced_layout and check_strides else None
        assert_same(actual, here(expected), atol=atol, rtol=rtol, check_strides=check_strides,
                    what="output" + tag, traced_strides=traced)
        if check_aliasing:
            ea, ca = _aliasing(expected, e_in), _aliasing(actual, c_in)
            assert ca == ea, (f"aliasing differs{tag}: per output (inputs sharing storage, earlier outputs "
                              f"sharing storage): compiled {ca}, eager {ea}")
        # input mutations: compare whole storages
        for key, e_flat in e_memo.items():
            assert_same(c_memo[key], here(e_flat), atol=atol, rtol=rtol, check_strides=False,
                        what=f"input storage (dtype {dtype_id(key[1])}) after the call{tag}")
        if is_mod:
            assert_same(_module_state(comp_target), here(_module_state(eager_fn)), atol=atol, rtol=rtol,
                        check_strides=False, what="module state" + tag)
        if grad and run == 0:
            cots = _cotangents(expected)
            _backward(expected, cots)
            _backward(actual, here(cots))
            ga, gr = grad_atol or atol, grad_rtol or rtol
            e_grads = {f"grad of input {i}": x.grad for i, x in enumerate(e_in)
                       if isinstance(x, torch.Tensor) and x.requires_grad}
            c_grads = {f"grad of input {i}": x.grad for i, x in enumerate(c_in)
                       if isinstance(x, torch.Tensor) and x.requires_grad}
            if is_mod:
                e_grads.update({f"grad of {k}": p.grad for k, p in eager_fn.named_parameters()})
                c_grads.update({f"grad of {k}": p.grad for k, p in comp_target.named_parameters()})
            assert all(g is not None for g in e_grads.values()), "test bug: eager left a grad None"
            missing = [k for k, g in c_grads.items() if g is None]
            assert not missing, f"compiled backward produced no gradient for {missing}"
            e_grads = here(e_grads)
            if grad_vs_float64:
                reference = here(_float64_gradients(fn, src, cots, device=reference_device))
                for key, e_grad in e_grads.items():
                    grad_atol_here = _tol(e_grad.dtype, ga, gr)[0]
                    assert_near_float64(c_grads[key], e_grad, reference[key], key, atol=grad_atol_here)
            else:
                assert_same(c_grads, e_grads, atol=ga, rtol=gr, check_strides=False, what="gradient")
    return compiled


# A compiled float result may be this many times further from float64 than eager's (summing in another
# order rounds differently; a wrong result is orders of magnitude off) plus an absolute root-mean-square
# error of a tenth of the test's atol: where the true value is a cancellation (a conv bias before batch
# norm has gradient 0), eager's own error is luck. torch._dynamo.utils.same(fp64_ref=...), which judges
# Inductor, has the same shape (2x eager's RMSE + tol/10).
FLOAT64_ERROR_FACTOR = 10.0


def assert_near_float64(actual, eager, reference, label, *, atol, factor=FLOAT64_ERROR_FACTOR):
    """`actual`'s root-mean-square error against the float64 `reference` is at most `factor` times eager's
    plus `atol` / 10."""
    assert actual.dtype == eager.dtype and actual.shape == eager.shape, (
        f"{label}: {actual.dtype} {tuple(actual.shape)}, eager {eager.dtype} {tuple(eager.shape)}")
    if reference.numel() == 0:
        return

    def rmse(x):
        return (x.double() - reference).square().mean().sqrt().item()

    error, eager_error = rmse(actual), rmse(eager)
    allowed = factor * eager_error + atol / 10
    assert error <= allowed, (f"{label}: RMS error against float64 {error:.3e}, eager's {eager_error:.3e}; "
                              f"allowed {allowed:.3e} ({factor:g}x eager's + {atol / 10:.0e})")


def _float64_gradients(fn, inputs, cotangents, device=None) -> dict[str, torch.Tensor]:
    """The gradients of `fn` (a function or module, untouched) computed in float64 on `inputs` (copied to
    `device` when given, as are the cotangents), keyed like check()'s gradients."""
    is_mod = isinstance(fn, torch.nn.Module)
    fn64 = copy.deepcopy(fn).double() if is_mod else fn
    if is_mod and device is not None:
        fn64 = fn64.to(device)
    cotangents = cotangents if device is None else on_device(cotangents, device)
    args = [x.detach().double().requires_grad_(x.requires_grad)
            if isinstance(x, torch.Tensor) and x.is_floating_point() else x
            for x in clone_inputs(inputs, {}, device=device)]
    outputs = fn64(*args)
    _backward(outputs, [c.double() if c is not None else None for c in cotangents])
    grads = {f"grad of input {i}": x.grad for i, x in enumerate(args)
             if isinstance(x, torch.Tensor) and x.requires_grad}
    if is_mod:
        grads.update({f"grad of {k}": p.grad for k, p in fn64.named_parameters()})
    return grads


def describe(e: BaseException, limit=400) -> str:
    """One line for an error: the backend's own exception (not Dynamo's wrapper) and, for value mismatches,
    how many elements and by how much."""
    inner = getattr(e, "inner_exception", None)
    if inner is not None:
        e = inner
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    head = lines[0] if lines else ""
    extra = [ln for ln in lines[1:] if ln.startswith(("Mismatched elements", "Greatest absolute"))]
    return " ".join([f"{type(e).__name__}: {head}"] + extra)[:limit]


# Ops whose eager output layout differs from the layout PyTorch's own meta functions predict for the
# traced graph (div/floor_divide with a tensor divisor keep the first input's layout in eager but come out
# contiguous from meta; 2 ** x and logsigmoid come out contiguous in eager but follow the input in meta).
# fuse_all, like Inductor, lays outputs out as traced. Known gap: their values are checked, strides not.
EAGER_LAYOUT_QUIRKS = {"div_floor", "floor_divide", "rpow", "logsigmoid"}


def eager_layout_differs_from_traced(fn, inputs) -> bool:
    """Whether eager lays out an output of `fn` otherwise than this torch's meta functions predict (e.g.
    reflection/replication pads of a channels-last input: channels-last in eager, contiguous from 2.11's
    meta functions, channels-last from 2.14's). False when eager or the meta functions raise: check()
    reports that."""
    try:
        traced = traced_output_strides(fn, clone_inputs(inputs, {}))
        eager = pytree.tree_flatten_with_path(fn(*clone_inputs(inputs, {})))[0]
    except Exception:  # noqa: BLE001
        return False
    return any(_significant_strides(traced.get(pytree.keystr(path), ()), t.shape)
               != _significant_strides(t.stride(), t.shape)
               for path, t in eager if isinstance(t, torch.Tensor) and t.numel() > 1)


def check_ops(ops: dict, *inputs, **kw):
    """Check one graph computing every op of `ops` (name -> fn(*inputs)) and returning them as a dict.
    If it fails, each op is checked alone to name the culprits (FUSE_ALL_TEST_BISECT=0 turns that off).
    Ops in EAGER_LAYOUT_QUIRKS are checked in a graph of their own without the stride comparison; ops whose
    eager layout this torch's meta functions predict wrongly, in one of their own where the layout may be
    eager's or the meta functions' (fuse_all, like Inductor, lays outputs out as traced; whether the traced
    graph has one or the other depends on the op's decomposition and the torch version)."""
    if kw.get("check_strides", True) and not kw.get("traced_layout"):
        mispredicted = {n: f for n, f in ops.items()
                        if n not in EAGER_LAYOUT_QUIRKS and eager_layout_differs_from_traced(f, inputs)}
        if mispredicted and len(mispredicted) < len(ops):
            check_ops(mispredicted, *inputs, **{**kw, "traced_layout": True})
            ops = {n: f for n, f in ops.items() if n not in mispredicted}
        elif mispredicted:
            kw = {**kw, "traced_layout": True}
    quirks = {n: f for n, f in ops.items() if n in EAGER_LAYOUT_QUIRKS}
    if quirks and len(quirks) < len(ops):
        check_ops(quirks, *inputs, **{**kw, "check_strides": False})
        ops = {n: f for n, f in ops.items() if n not in quirks}
    elif quirks:
        kw = {**kw, "check_strides": False}

    def fn(*args):
        return {name: f(*args) for name, f in ops.items()}

    try:
        return check(fn, *inputs, **kw)
    except Exception as err:  # noqa: BLE001 - re-raised with a diagnosis
        if not BISECT or len(ops) == 1 or isinstance(err, EagerError):
            raise
        failing, lines = [], []
        for tried, (name, f) in enumerate(ops.items(), 1):
            try:
                check(lambda *a, f=f: f(*a), *inputs, **kw)
            except Exception as e:  # noqa: BLE001
                line = describe(e)
                failing.append(f"{name}: {line}")
                lines.append(line)
            if tried == 3 == len(lines) and len(set(lines)) == 1 and len(ops) > 4:
                failing.append("... (the first 3 ops fail alone with the same error: systemic; stopped bisecting)")
                break
        summary = "\n  ".join(failing) if failing else "(every op passes alone: the failure needs the combination)"
        raise AssertionError(f"{len(ops)}-op graph failed: {describe(err, 2000)}\n"
                             f"ops failing alone:\n  {summary}") from err

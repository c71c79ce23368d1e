"""Run one generated program through eager, a float64 reference and fuse_all, and judge fuse_all.

Judgement (per output, per call, and per gradient in training programs):
  - dtype and shape equal eager's; strides (dims of size > 1) equal those of the traced graph (PyTorch's
    meta functions under FakeTensorMode and the Python dispatcher, as Dynamo traces: the contract fuse_all
    lays outputs out by) or eager's, where the
    two differ (see `_same_layout`); stride-0 (broadcast) dims included;
  - exact values (integers, bools, and floats the generator marked exact) equal eager's bit for bit;
  - other float values: error against the float64 reference, element-wise relative to |ref| plus a small
    fraction of the output's scale, no larger than max(K * eager's own error, a floor fitting the dtype).
    So rounding differences are not failures, but an error eager does not make is;
  - NaN/inf at the same places as eager (the generator avoids them, so any NaN is suspect), except where
    eager's own intermediate overflowed: the float64 result rounded to the output dtype is finite there,
    and a finite value within the dtype's floor of it is accepted as well as eager's;
  - no graph ran in ATen (a fallback on a program of supported ops is a finding, with its reason).
"""
from __future__ import annotations

import re
import time
import traceback
from dataclasses import dataclass, field

import torch
import torch.utils._pytree as pytree

import fuzzgen

K = 10.0
REL_FLOOR = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}
# The float64 reference of a float64 program *is* eager's float64 result (no wider dtype exists), so its
# own rounding error is unknown and "K x eager's error" is always 0: the floor must cover eager's error,
# which for a reduction over N elements may reach N ulps (the classical gamma_N bound). Eager's Welford
# var of 196611 elements was 1.8e-12 from the exact value, fuse_all's 1.3e-14 (fuzz seed 31 index 1787).
# A float64 result computed in float32, or by a formula that cancels, is still far above N * 2^-53.
F64_EPS = torch.finfo(torch.float64).eps
SCALE_FRACTION = 1e-2   # a sum's rounding error scales with its terms, not with a small result


@dataclass
class Finding:
    kind: str          # crash | fallback | value | exact | grad | meta | nonfinite
    detail: str
    program: fuzzgen.Program
    codegen: str
    trace: str = ""    # the full traceback of a crash (workers send it back with the finding)

    @property
    def key(self) -> str:
        text = re.sub(r"\bs\d+\b", "sN", self.detail)
        text = re.sub(r"0x[0-9a-f]+", "0xN", text)
        text = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", text)
        text = re.sub(r"\bv\d+\b|\ba\d+\b", "V", text)
        return f"{self.kind}: {text[:110]}"


@dataclass
class Result:
    findings: list = field(default_factory=list)
    invalid: str | None = None      # the program itself is wrong (eager raised): a generator bug
    seconds: float = 0.0
    kernels: int = 0
    externs: list = field(default_factory=list)


def quiet():
    """Findings carry the reasons; the backend's fallback warnings and torch's deprecations are noise here."""
    import logging
    import warnings
    logging.getLogger("fuse_all").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")


def build(source: str, reference=False, tag="") -> callable:
    ns = fuzzgen.namespace(reference)
    code = compile(source, f"<fuse_all_fuzz{tag}>", "exec")
    exec(code, ns)  # noqa: S102 - our own generated program
    return ns["program"]


def _clone(x):
    if not isinstance(x, torch.Tensor):
        return x
    st = x.untyped_storage()
    flat = torch.empty(0, dtype=x.dtype).set_(st, 0, (st.nbytes() // x.element_size(),), (1,)).clone()
    y = flat.as_strided(x.shape, x.stride(), x.storage_offset()).detach()
    return y.requires_grad_(x.requires_grad)


def _nudged(x):
    """A copy of `x` whose float elements are one ulp closer to zero (in its storage, so strides, offsets and
    stride-0 dims stay): eager on these inputs rounds differently, another sample of eager's error
    (`eager_errors`). The program's branches stay consistent: discontinuous ops see only exact values, which
    eager and the float64 reference compute alike from any inputs; magnitudes only shrink, signs stay."""
    y = _clone(x)
    if y.dtype.is_floating_point:
        st = y.untyped_storage()
        flat = torch.empty(0, dtype=y.dtype).set_(st, 0, (st.nbytes() // y.element_size(),), (1,))
        with torch.no_grad():
            flat.copy_(torch.nextafter(flat, torch.zeros((), dtype=y.dtype)))
    return y


def _to_ref(x):
    if x.dtype.is_floating_point:
        return x.detach().to(torch.float64).requires_grad_(x.requires_grad)
    return x.detach().clone()


def inputs_for(prog, call):
    gen = torch.Generator().manual_seed((prog.seed * 1_000_003 + prog.index * 7919 + call) % (2 ** 63))
    return [fuzzgen.make_input(spec, call, gen) for spec in prog.inputs]


def _strides(t):
    return [s for s, n in zip(t.stride(), t.shape) if n > 1]


def _same_layout(actual, eager, traced_strides) -> bool:
    """Strides of dims > 1 equal the traced graph's or eager's. Both are legitimate: the meta functions are
    the contract a compiled graph is laid out by, eager is what the program gives uncompiled. They differ
    where eager and the meta functions disagree on an op's layout (EAGER_LAYOUT_QUIRKS), and, beyond that
    list, through the strides of size-1 dims, which decide a broadcasting op's output order: eager's tanh of
    a (1, 3, 1, 1) tensor with strides (3, 1, 3, 3) has strides (3, 1, 1, 1), the meta function's keeps the
    input's, and `sub` of it and a (3, 1) tensor is then (9, 3, 1, 1) in eager but (9, 1, 3, 9) under
    FakeTensorMode (fuzz seed 46 index 299). Which one a graph traced also depends on static or symbolic
    shapes (that program's dynamic graph traced eager's): this check's FakeTensorMode run of the program on
    the call's real shapes is not the graph fuse_all was given."""
    got = _strides(actual)
    return got == list(traced_strides) or got == _strides(eager)


def traced_layouts(fn, inputs):
    """Output layouts as Dynamo and AOTAutograd trace them: FakeTensorMode under the Python dispatcher,
    which picks Python meta registrations for some ops. Their strides may differ from the C++ meta
    kernels' (TensorIterator's, eager's): `torch.where(a1 > 0, a1, a0)` of an (11,) a1 and a (64, 1, 3, 11)
    a0 of strides (1, 1, 0, 64) is (1, 192, 64, 192) in the graph, (3, 1, 1, 192) in eager and under a
    plain FakeTensorMode (fuzz seed 105 index 264: fuse_all and Inductor lay it out as the graph says)."""
    from torch._dispatch.python import enable_python_dispatcher
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode(allow_non_fake_inputs=False) as mode, enable_python_dispatcher():
        fakes = [mode.from_tensor(x) for x in inputs]
        out = fn(*fakes)
    return [(_strides(t), t.shape) for t in pytree.tree_leaves(out)]


def _rel_err(x, ref, scale):
    return ((x.double() - ref).abs() / (ref.abs() + scale * SCALE_FRACTION + 1e-300)).max().item()


def rel_floor(dtype, elements: int = 1) -> float:
    """The smallest error bound for a `dtype` result of a program whose values have up to `elements`."""
    floor = REL_FLOOR[dtype]
    return max(floor, elements * F64_EPS) if dtype == torch.float64 else floor


def largest_numel(*trees) -> int:
    return max((t.numel() for t in pytree.tree_leaves(trees) if isinstance(t, torch.Tensor)), default=1)


def compare_float(actual, eager, ref, what, elements: int = 1, eager_error: float = 0.0):
    """None if fuse_all's float result is acceptable, else a one-line reason. `elements`: the largest
    element count among the program's values (inputs and outputs), which bounds a reduction's length.
    `eager_error`: eager's error on this output measured elsewhere (`eager_errors`: the program's other
    calls, nudged inputs); fuse_all's is held to the largest measure of eager's."""
    a, e, r = actual.detach().double(), eager.detach().double(), ref.detach().double()
    # Eager's own overflow: eager is inf/NaN where the exact result, rounded to the output's dtype, is
    # finite. Eager's float16 logsumexp of 65537 equal rows sums the exps into a float16 tensor (65537 >
    # 65504: inf), while the graph PyTorch traces for it sums in float32 (so Inductor's result is finite
    # too; fuzz seed 114 index 83). There either eager's value or a finite one as accurate as the dtype
    # allows is right; NaN/inf where eager is finite, or a finite wrong value, still are findings.
    representable = torch.isfinite(r.to(actual.dtype).double())
    eager_overflow = ~torch.isfinite(e) & representable
    finite_instead = eager_overflow & torch.isfinite(a)
    e_judged = torch.where(finite_instead, a, e)
    # Eager's NaN where the float64 result is finite comes from rounding onto a singular point: 0/0 after a
    # cancellation (hypot's gradient at (0, 0) of `sigmoid(x) * 2 - 1` for x ~ 1e-7, fuzz seed 152 index 306,
    # where the two float32 sigmoids round the tie 0.5 + 3e-8 to different sides). Which places land on the
    # singularity differs between two correct float32 evaluations, so there NaN is also accepted where eager
    # is finite, at most K times as often as eager's own such NaNs; an output without them accepts none.
    eager_singular = int((torch.isnan(e) & representable).sum())
    nan_instead = torch.isnan(a) & torch.isfinite(e) & representable
    if eager_singular and nan_instead.any() and int(nan_instead.sum()) <= K * eager_singular:
        e_judged = torch.where(nan_instead, a, e_judged)
    nan_a, nan_e = torch.isnan(a), torch.isnan(e_judged)
    if not torch.equal(nan_a, nan_e):
        return "nonfinite", f"{what}: NaN at {int((nan_a != nan_e).sum())} places where eager has none/other"
    inf_a, inf_e = torch.isinf(a), torch.isinf(e_judged)
    if not torch.equal(inf_a, inf_e) or not torch.equal(a[inf_a], e_judged[inf_e]):
        return "nonfinite", f"{what}: inf at {int((inf_a != inf_e).sum())} places different from eager"
    ok = torch.isfinite(a) & torch.isfinite(r)
    if not ok.any():
        return None
    scale = r[ok].abs().max().item() or 1.0
    floor = rel_floor(actual.dtype, elements)
    if finite_instead.any():   # eager's error there is unbounded: the dtype's floor is the bound
        err_overflow = _rel_err(a[finite_instead], r[finite_instead], scale)
        if err_overflow > floor:
            return "value", (f"{what}: error vs float64 {err_overflow:.2e} > {floor:.1e} where eager overflowed "
                             f"({int(finite_instead.sum())} places)")
        ok &= ~finite_instead
        if not ok.any():
            return None
    a, e, r = a[ok], e[ok], r[ok]
    err_a, err_e = _rel_err(a, r, scale), _rel_err(e, r, scale)
    err_e = max(err_e, eager_error)
    if err_a <= max(K * err_e, floor):
        return None
    # absolute rounding noise on values of magnitude ~1 (a sum of O(1) terms that cancels to 0.004 has
    # no scale of its own to be relative to)
    if (a - r).abs().max().item() <= 0.1 * floor * max(1.0, scale):
        return None
    worst = int(((a - r).abs() / (r.abs() + scale * SCALE_FRACTION)).argmax())
    return "value", (f"{what}: error vs float64 {err_a:.2e} > max({K:g} x eager's {err_e:.2e}, {floor:.1e}) "
                     f"(worst: got {a[worst].item():.6g}, eager {e[worst].item():.6g}, float64 {r[worst].item():.6g};"
                     f" {actual.numel()} elements)")


def eager_error(eager, ref) -> float:
    """Eager's error on one output, on the finite places, relative to the output's scale (as `_rel_err`)."""
    e, r = eager.detach().double(), ref.detach().double()
    ok = torch.isfinite(e) & torch.isfinite(r)
    if not ok.any():
        return 0.0
    return _rel_err(e[ok], r[ok], r[ok].abs().max().item() or 1.0)


def compare_output(actual, eager, ref, exact, what, traced=None, check_values=True, elements: int = 1,
                   eager_error: float = 0.0):
    if not isinstance(actual, torch.Tensor):
        return "meta", f"{what}: got {type(actual).__name__}"
    if actual.dtype != eager.dtype:
        return "meta", f"{what}: dtype {actual.dtype}, eager {eager.dtype}"
    if actual.shape != eager.shape:
        return "meta", f"{what}: shape {tuple(actual.shape)}, eager {tuple(eager.shape)}"
    if traced is not None and actual.numel() > 1 and not _same_layout(actual, eager, traced[0]):
        return "meta", (f"{what}: strides {actual.stride()}, traced graph {traced[0]} for size-{tuple(actual.shape)}"
                        f" (eager {eager.stride()})")
    if not check_values:
        return None
    if exact or not actual.dtype.is_floating_point:
        a, e = actual.detach(), eager.detach()
        same = (a == e) | (a.isnan() & e.isnan()) if a.is_floating_point() else a == e
        if not bool(same.all()):
            diff = ~same.reshape(-1)
            i = int(diff.nonzero()[0])
            return "exact", (f"{what}: {int(diff.sum())} of {a.numel()} elements differ from eager's exact result "
                             f"(first: got {a.reshape(-1)[i].item()}, eager {e.reshape(-1)[i].item()})")
        return None
    return compare_float(actual, eager, ref, what, elements, eager_error)


def _describe(e: BaseException) -> str:
    inner = getattr(e, "inner_exception", None) or e
    lines = [ln.strip() for ln in str(inner).splitlines() if ln.strip()]
    return f"{type(inner).__name__}: {lines[0][:300] if lines else ''}"


def run_program(prog, codegen="cpp", backend="fuse_all", strict=False) -> Result:
    """Compile and check one program; returns its findings (empty if fuse_all is right)."""
    import fuse_all
    result = Result()
    start = time.perf_counter()
    src = prog.source()
    fn_eager, fn_ref, fn_comp = build(src), build(src, reference=True), build(src, tag=f"{prog.seed}_{prog.index}")
    out_exact = [prog_exact(prog, name) for name in prog.outputs]

    calls = [inputs_for(prog, c) for c in range(prog.calls)]
    try:
        eager_in = [[_clone(x) for x in ins] for ins in calls]
        eager = [fn_eager(*ins) for ins in eager_in]
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            ref_in = [[_to_ref(x) for x in ins] for ins in calls]
            refs = [fn_ref(*ins) for ins in ref_in]
        finally:
            torch.set_default_dtype(old)
        traced = [traced_layouts(fn_eager, ins) for ins in calls]
    except Exception as e:  # noqa: BLE001 - the program is invalid: a generator bug, not a compiler bug
        result.invalid = _describe(e)
        return result
    eager_errs = eager_errors(fn_eager, fn_ref, calls, eager, refs)

    torch._dynamo.reset()
    fuse_all.backend.reset()
    options = {"codegen": codegen} if backend == "fuse_all" else None
    if options is not None and strict:
        options["fallback"] = False
    dynamic = (True if prog.calls == 2 else None) if prog.dynamic else False
    compiled = torch.compile(fn_comp, backend=backend, options=options, dynamic=dynamic, fullgraph=False)

    def add(kind_detail, trace=""):
        if kind_detail is not None:
            kind, detail, *rest = kind_detail
            result.findings.append(Finding(kind, detail, prog, codegen, rest[0] if rest else trace))

    comp_inputs = []
    for c, ins in enumerate(calls):
        c_in = [_clone(x) for x in ins]
        comp_inputs.append(c_in)
        try:
            actual = compiled(*c_in)
        except Exception as e:  # noqa: BLE001 - a crash of the compiled program is a finding
            add(("crash", f"call {c}: {_describe(e)}"), traceback.format_exc())
            break
        elements = largest_numel(ins, eager[c])
        for i, (a, e, r) in enumerate(zip(actual, eager[c], refs[c])):
            what = f"call {c} output {i} ({prog.outputs[i]})"
            add(compare_output(a, e, r, out_exact[i], what, traced[c][i], elements=elements,
                               eager_error=eager_errs[i]))
        if prog.train and c == 0:
            add(check_grads(prog, actual, eager[0], refs[0], c_in, eager_in[0], ref_in[0], elements,
                            shadow=_float32_run(fn_eager, calls[0])))
    if backend == "fuse_all":
        for rec in fuse_all.compiled_graphs():
            if rec.fallback_reason:
                add(("fallback", f"{rec.kind} graph runs in ATen: {rec.fallback_reason[:300]}"),
                    getattr(rec, "fallback_traceback", None) or "")
            result.kernels += len(rec.kernels)
            result.externs += [str(getattr(x, "target", x)) for x in rec.externs]
    result.seconds = time.perf_counter() - start
    return result


def _nudged_run(fn_eager, fn_ref, inputs):
    """(eager outputs, float64 reference outputs) on `_nudged` inputs, or None where there is nothing to
    nudge or the nudged program does not run."""
    if not any(isinstance(x, torch.Tensor) and x.dtype.is_floating_point for x in inputs):
        return None
    try:
        with torch.no_grad():
            nudged = [_nudged(x) for x in inputs]
            eager = fn_eager(*nudged)
            old = torch.get_default_dtype()
            torch.set_default_dtype(torch.float64)
            try:
                ref = fn_ref(*[_to_ref(x) for x in nudged])
            finally:
                torch.set_default_dtype(old)
    except Exception:  # noqa: BLE001 - a further measure of eager's error is optional
        return None
    return pytree.tree_leaves(eager), pytree.tree_leaves(ref)


# A float32 run of a float64 program estimates eager's float64 error (which the float64 reference, being
# eager itself, cannot show): its error against float64 times the ratio of the two epsilons. It measures
# the program's conditioning. batch_norm of channels whose values are all equal is exactly 0; eager's float64
# gave 1.1e-12 (a mean rounded, then divided by sqrt(eps)), fuse_all's exact 0 was flagged as 99% off
# (fuzz seed 134 index 193, seed 133 index 421).
F64_PER_F32 = torch.finfo(torch.float64).eps / torch.finfo(torch.float32).eps


def _float32_shadow(x):
    if isinstance(x, torch.Tensor) and x.dtype == torch.float64:
        return x.detach().float().requires_grad_(x.requires_grad)
    return _clone(x)


def _float32_run(fn_eager, inputs):
    """(inputs, outputs) of the program run on `inputs` with every float64 tensor made float32, or None
    where there is none or the program does not run so."""
    if not any(isinstance(x, torch.Tensor) and x.dtype == torch.float64 for x in inputs):
        return None
    try:
        shadow = [_float32_shadow(x) for x in inputs]
        return shadow, fn_eager(*shadow)
    except Exception:  # noqa: BLE001 - a further measure of eager's error is optional
        return None


def float64_error_estimate(shadow_out, ref) -> float:
    """Eager's float64 error on an output as its float32 shadow's error times eps64 / eps32 (0 where the
    shadow output is not the float32 twin of a float64 output)."""
    if not (isinstance(shadow_out, torch.Tensor) and isinstance(ref, torch.Tensor) and ref.dtype == torch.float64
            and shadow_out.dtype == torch.float32 and shadow_out.shape == ref.shape and ref.numel()):
        return 0.0
    return eager_error(shadow_out.detach(), ref.detach()) * F64_PER_F32


# Eager splits a long reduction over its threads (one chunk each, the chunks' sums combined): run at other
# thread counts it sums in other orders, each an equally legitimate float32 evaluation. A sum of 849509
# values that cancels to ~30 was 1.5e-5 off at 1 and 2 threads, 2.6e-4 at 3 and 1.4e-4 at 4; fuse_all's
# 9.5e-4 (its own typical error: median 3.0e-4 over 16 inputs, eager's 2.3e-4) was flagged against the lucky
# samples (fuzz seed 164 index 111). Short reductions run on one thread at any count: nothing changes there.
OTHER_THREAD_COUNTS = (3, 4)


def _threads_run(fn_eager, inputs, ref, threads: int):
    """(eager outputs at `threads` threads, `ref`), or None where the program does not run so."""
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        with torch.no_grad():
            outs = fn_eager(*[_clone(x) for x in inputs])
    except Exception:  # noqa: BLE001 - a further measure of eager's error is optional
        return None
    finally:
        torch.set_num_threads(old)
    return pytree.tree_leaves(outs), pytree.tree_leaves(ref)


def eager_errors(fn_eager, fn_ref, calls, eager, refs) -> list:
    """Per output, eager's largest error over the program's calls, on the real and on nudged inputs. One
    call's error on a small output is a single sample of eager's rounding and can be 0 by luck: the
    float32 sum of an instance norm of 3584 elements, whose float64 value is 1.7e-13, was exactly 0.0 in
    eager on one call (on nudged inputs too), -1.6e-4 on the other, and fuse_all's -5.9e-5 was flagged
    as 3.4e8 x eager's error (fuzz seed 124 index 489). The calls run the same statements on other shapes
    and values, so their errors measure the same computation's rounding; so do runs at other thread counts
    (`OTHER_THREAD_COUNTS`)."""
    runs = list(zip(eager, refs)) + [run for run in (_nudged_run(fn_eager, fn_ref, ins) for ins in calls) if run]
    current = torch.get_num_threads()
    runs += [run for run in (_threads_run(fn_eager, calls[0], refs[0], t) for t in OTHER_THREAD_COUNTS
                             if t != current) if run]
    shadows = [(run[1], r) for run, r in ((_float32_run(fn_eager, ins), r) for ins, r in zip(calls, refs)) if run]
    errs = []
    for i in range(len(pytree.tree_leaves(eager[0]))):
        worst = 0.0
        for outs, rs in runs:
            e, r = pytree.tree_leaves(outs)[i], pytree.tree_leaves(rs)[i]
            if isinstance(e, torch.Tensor) and e.dtype.is_floating_point and e.numel():
                worst = max(worst, eager_error(e, r))
        for outs, rs in shadows:
            worst = max(worst, float64_error_estimate(pytree.tree_leaves(outs)[i], pytree.tree_leaves(rs)[i]))
        errs.append(worst)
    return errs


def prog_exact(prog, name) -> bool:
    return name in prog.exact_names


def _shadow_grads(shadow, eager, cots) -> list | None:
    """Gradients of the float32 shadow run (`_float32_run`) with the same cotangents, per input that requires
    grad (as eager's), or None."""
    if shadow is None:
        return None
    inputs, outputs = shadow
    outs = [o for o, e in zip(outputs, eager)
            if isinstance(e, torch.Tensor) and e.requires_grad and e.dtype.is_floating_point]
    if len(outs) != len(cots) or not all(isinstance(o, torch.Tensor) and o.requires_grad for o in outs):
        return None
    try:
        grads = torch.autograd.grad(outs, [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad],
                                    [c.to(o.dtype) for c, o in zip(cots, outs)], allow_unused=True)
    except Exception:  # noqa: BLE001 - the estimate is optional
        return None
    return list(grads)


def check_grads(prog, actual, eager, ref, comp_inputs, eager_inputs, ref_inputs, elements: int = 1, shadow=None):
    """Backward through eager, reference and compiled with the same random cotangents; judge the grads.
    `shadow`: the float32 run of a float64 program (`_float32_run`), whose gradients estimate eager's."""
    gen = torch.Generator().manual_seed(prog.index + 17)
    pairs = [(a, e, r) for a, e, r in zip(actual, eager, ref)
             if isinstance(e, torch.Tensor) and e.requires_grad and e.dtype.is_floating_point]
    if not pairs:
        return None
    cots = [torch.randn(e.shape, generator=gen, dtype=torch.float64) for _, e, _ in pairs]
    e_in = [x for x in eager_inputs if x.requires_grad]
    try:
        grads_e = torch.autograd.grad([e for _, e, _ in pairs], e_in, [c.to(e.dtype) for c, (_, e, _) in zip(cots, pairs)],
                                      allow_unused=True)
        r_in = [x for x in ref_inputs if x.requires_grad]
        grads_r = torch.autograd.grad([r for _, _, r in pairs], r_in, cots, allow_unused=True)
    except Exception:  # noqa: BLE001 - eager cannot differentiate this program: nothing to compare
        return None
    a_in = [x for x in comp_inputs if isinstance(x, torch.Tensor) and x.requires_grad]
    try:
        grads_a = torch.autograd.grad([a for a, _, _ in pairs], a_in, [c.to(a.dtype) for c, (a, _, _) in zip(cots, pairs)],
                                      allow_unused=True)
    except Exception as e:  # noqa: BLE001
        return "crash", f"backward: {_describe(e)}", traceback.format_exc()
    grads_s = _shadow_grads(shadow, eager, cots) or [None] * len(grads_r)
    for i, (ga, ge, gr, gs) in enumerate(zip(grads_a, grads_e, grads_r, grads_s)):
        if ge is None:
            continue
        if ga is None:
            ga = torch.zeros_like(ge)
        estimate = float64_error_estimate(gs, gr) if gr is not None else 0.0
        bad = compare_output(ga, ge, gr, False, f"grad of input {i}", None, elements=elements,
                             eager_error=estimate)
        if bad is not None:
            return "grad", bad[1]
    return None

"""The fuzzer's oracle must catch a wrong compiler and must not flag a right one.

Each test runs a program through a deliberately broken backend (aot_eager with its outputs damaged in
one way) and checks the finding it must produce; aot_eager itself must pass a batch of generated programs.
"""
import pytest
import torch
from torch._dynamo.backends.common import aot_autograd

import fuse_all
import fuzzcheck
import fuzzgen
from fuse_all_optest import BOTH


def _program(lines, outputs, inputs, exact=()):
    specs = [fuzzgen.InputSpec(name, [shape], dtype, tuple(range(len(shape))), (1,) * len(shape), (), 0, lo, hi)
             for name, shape, dtype, lo, hi in inputs]
    return fuzzgen.Program(0, 0, specs, [(t, e, "test") for t, e in lines], outputs, exact_names=set(exact))


def _damaging_backend(damage):
    """aot_eager whose compiled graph's outputs pass through `damage(tensor) -> tensor`."""
    def fw_compiler(gm, example_inputs):
        def run(*args):
            return tuple(damage(o) if isinstance(o, torch.Tensor) else o for o in gm(*args))
        return run
    return aot_autograd(fw_compiler=fw_compiler)


FLOAT_PROG = _program([("v0", "torch.sin(a0) * a1", ), ("v1", "v0.sum(-1)")], ["v1"],
                      [("a0", (16, 33), torch.float32, -2.0, 2.0), ("a1", (33,), torch.float32, -2.0, 2.0)])


def _kinds(prog, backend):
    res = fuzzcheck.run_program(prog, "cpp", backend)
    assert res.invalid is None, res.invalid
    return [f.kind for f in res.findings]


def test_small_relative_error_is_caught():
    """1e-4 relative error is far above float32 rounding (eager's own error is ~1e-7)."""
    assert _kinds(FLOAT_PROG, _damaging_backend(lambda t: t * (1 + 1e-4))) == ["value"]


def test_rounding_differences_are_not_findings():
    """An error of a couple of float32 ulps (what another summation order gives) is not a finding."""
    prog = _program([("v0", "torch.sin(a0) * a1"), ("v1", "v0.sum(-1)")], ["v1"],
                    [("a0", (16, 999), torch.float32, -2.0, 2.0), ("a1", (999,), torch.float32, -2.0, 2.0)])

    assert _kinds(prog, _damaging_backend(lambda t: t * (1 + 2.4e-7))) == []


# A float64 var over 65537 repeated rows: eager's own float64 result (the reference) is 1.8e-12 from the
# exact value here (fuzz seed 31 index 1787, where fuse_all's 1.3e-14 was flagged).
F64_LONG_VAR = fuzzgen.Program(
    0, 0, [fuzzgen.InputSpec("a0", [(65537, 3)], torch.float64, (0, 1), (1, 1), (0,), 0, -1.0, 1.0)],
    [("v0", "a0.var(correction=1)", "test"), ("v1", "torch.copysign(v0, a0).sum(0)", "test")], ["v1"])


def test_float64_rounding_of_a_long_reduction_is_not_a_finding():
    """A float64 result is judged against eager's float64 result, which carries its own rounding: an error
    of the size eager makes on a long reduction (~1e-11 over ~2e5 elements) is not a finding."""
    assert _kinds(F64_LONG_VAR, _damaging_backend(lambda t: t * (1 + 1e-11))) == []


@pytest.mark.parametrize("prog", [F64_LONG_VAR, _program([("v0", "torch.sin(a0) * a1"), ("v1", "v0.sum(-1)")], ["v1"],
                                  [("a0", (16, 33), torch.float64, -2.0, 2.0), ("a1", (33,), torch.float64, -2.0, 2.0)])],
                         ids=["long_var", "short_sum"])
def test_float64_computed_in_float32_is_caught(prog):
    """A float64 program run in float32 (or anything losing that much) is caught on short and long
    reductions alike."""
    assert _kinds(prog, _damaging_backend(lambda t: t.float().double() if t.dtype == torch.float64 else t)) == ["value"]


# batch_norm over channels whose values are all equal: exactly 0. Eager's float64 is rounding noise (1.1e-12
# after the division by sqrt(eps)), and so is the float64 reference, which is eager itself (seed 134 index 193).
F64_CONSTANT_CHANNELS = _program(
    [("v0", "torch.sign(a0) * torch.sign(a0) * a1"), ("v1", "F.batch_norm(v0, None, None, training=True, eps=1e-05)")],
    ["v1"], [("a0", (13, 5, 8), torch.float64, 0.5, 4.0), ("a1", (1, 5, 1), torch.float64, -2.0, 2.0)])


def test_float64_exact_result_where_eager_is_rounding_noise_is_accepted():
    """The float32 run of the program measures how ill-conditioned it is (eager's float64 error ~ its error x
    eps64/eps32): the exact 0 is accepted, a result off by more than that noise is not."""
    assert _kinds(F64_CONSTANT_CHANNELS, _damaging_backend(torch.zeros_like)) == []
    assert _kinds(F64_CONSTANT_CHANNELS, _damaging_backend(lambda t: t + 1e-3)) == ["value"]


def test_float64_precision_loss_beyond_rounding_is_caught():
    """1e-9 relative is 2e5 ulps: a lost digit group on a small program, not rounding."""
    prog = _program([("v0", "torch.sin(a0) * a1"), ("v1", "v0.sum(-1)")], ["v1"],
                    [("a0", (16, 33), torch.float64, -2.0, 2.0), ("a1", (33,), torch.float64, -2.0, 2.0)])
    assert _kinds(prog, _damaging_backend(lambda t: t * (1 + 1e-9))) == ["value"]


def test_wrong_exact_value_is_caught():
    prog = _program([("v0", "torch.floor(a0)"), ("v1", "cast(v0, I64)")], ["v1"],
                    [("a0", (5, 7), torch.float32, -3.0, 3.0)], exact={"a0", "v0", "v1"})
    assert _kinds(prog, _damaging_backend(lambda t: t + (t == t.max()).to(t.dtype))) == ["exact"]


def test_wrong_strides_are_caught():
    prog = _program([("v0", "a0.t() * 2")], ["v0"], [("a0", (5, 7), torch.float32, -1.0, 1.0)])
    assert _kinds(prog, _damaging_backend(lambda t: t.contiguous())) == ["meta"]


def test_materialised_broadcast_output_is_caught():
    """A stride-0 output returned as a copy has other strides in its other dims too (fuzz seed 51 index 921)."""
    prog = _program([("v0", "(a0 * 2).unsqueeze(0).expand(3, -1, -1)")], ["v0"],
                    [("a0", (5, 7), torch.float32, -1.0, 1.0)])
    assert _kinds(prog, _damaging_backend(lambda t: t.contiguous())) == ["meta"]


def test_nan_is_caught():
    def nan_first(t):
        t = t.clone()
        t.view(-1)[0] = float("nan")
        return t
    assert _kinds(FLOAT_PROG, _damaging_backend(nan_first)) == ["nonfinite"]


def _judge_where_eager_overflowed(actual):
    """fuse_all's, eager's and the float64 result of float16 logsumexp over 65537 equal rows (fuzz seed 114
    index 83): eager's float16 sum of the exps overflowed, the float64 result fits float16."""
    ref = torch.tensor([11.5, -3.25, 0.5], dtype=torch.float64)
    eager = torch.tensor([float("inf"), float("inf"), 0.5], dtype=torch.float16)
    return fuzzcheck.compare_float(actual, eager, ref, "out")


def test_a_finite_result_where_eager_overflowed_is_accepted():
    assert _judge_where_eager_overflowed(torch.tensor([11.5, -3.25, 0.5], dtype=torch.float16)) is None
    assert _judge_where_eager_overflowed(torch.tensor([float("inf"), float("inf"), 0.5], dtype=torch.float16)) is None


@pytest.mark.parametrize("actual,kind", [([11.5 * 1.01, -3.25, 0.5], "value"),       # finite but wrong
                                         ([11.5, float("nan"), 0.5], "nonfinite"),   # NaN instead
                                         ([11.5, -3.25, float("inf")], "nonfinite"),  # inf where eager is finite
                                         ([11.5, float("-inf"), 0.5], "nonfinite")],  # the other inf
                         ids=["wrong", "nan", "inf", "neg_inf"])
def test_a_wrong_result_where_eager_overflowed_is_caught(actual, kind):
    found = _judge_where_eager_overflowed(torch.tensor(actual, dtype=torch.float16))
    assert found is not None and found[0] == kind, found


def _judge_at_a_singular_point(actual_nan_at):
    """A gradient x / hypot(x, 0) = sign(x) where float32 rounds some x ~ 1e-7 to 0 (fuzz seed 152 index 306):
    eager is 0/0 = NaN at places 0 and 1 although float64 says -1 and 1; `actual_nan_at`: fuse_all's NaNs."""
    ref = torch.tensor([-1.0, 1.0] + [1.0, -1.0] * 20, dtype=torch.float64)
    eager = ref.float()
    eager[:2] = float("nan")
    actual = ref.float()
    actual[list(actual_nan_at)] = float("nan")
    return fuzzcheck.compare_float(actual, eager, ref, "grad")


def test_nan_at_other_places_than_eagers_own_singular_nans_is_accepted_as_rounding():
    assert _judge_at_a_singular_point([]) is None                  # finite and right where eager is NaN
    assert _judge_at_a_singular_point([0, 1]) is None              # eager's NaNs
    assert _judge_at_a_singular_point([1, 5, 9]) is None           # another rounding's NaNs


def test_nan_far_more_often_than_eagers_singular_nans_is_caught():
    found = _judge_at_a_singular_point(range(2, 2 + 2 * int(fuzzcheck.K) + 1))
    assert found is not None and found[0] == "nonfinite", found


def test_nan_where_eager_has_no_singular_nan_is_caught():
    """Eager's only non-finite values are NaNs that float64 has too: nothing to round onto, no leniency."""
    ref = torch.tensor([float("nan"), 1.0, 2.0], dtype=torch.float64)
    eager = ref.float()
    found = fuzzcheck.compare_float(torch.tensor([float("nan"), float("nan"), 2.0]), eager, ref, "grad")
    assert found is not None and found[0] == "nonfinite", found


def test_eager_overflow_is_only_where_the_float64_result_fits_the_dtype():
    """Where the float64 result itself rounds to inf in the output's dtype, eager's inf is the answer."""
    ref = torch.tensor([70000.0, 1.0], dtype=torch.float64)
    eager = torch.tensor([float("inf"), 1.0], dtype=torch.float16)
    found = fuzzcheck.compare_float(torch.tensor([65504.0, 1.0], dtype=torch.float16), eager, ref, "out")
    assert found is not None and found[0] == "nonfinite"


def test_eager_error_measured_elsewhere_bounds_a_cancelling_sum():
    """A sum that cancels to ~0: one call's eager result can be exact by luck (fuzz seed 124 index 489:
    eager 0.0 for a float64 value of 1.7e-13, -1.6e-4 on the other call); fuse_all's -5.9e-5 is held to
    eager's error measured on the other calls and nudged inputs (`eager_errors`), not to that one sample."""
    ref = torch.tensor([-1.7e-13], dtype=torch.float64)
    eager, actual = torch.tensor([0.0]), torch.tensor([-5.9e-5])
    assert fuzzcheck.compare_float(actual, eager, ref, "out")[0] == "value"
    other_call = fuzzcheck.eager_error(torch.tensor([-1.6e-4]), torch.tensor([-3.6e-13], dtype=torch.float64))
    assert fuzzcheck.compare_float(actual, eager, ref, "out", eager_error=other_call) is None
    # a systematic error on a result that does not cancel is still far above eager's error elsewhere
    ok_call = fuzzcheck.eager_error(torch.tensor([2.0000002]), torch.tensor([2.0], dtype=torch.float64))
    found = fuzzcheck.compare_float(torch.tensor([2.0002]), torch.tensor([2.0]), torch.tensor([2.0], dtype=torch.float64),
                                    "out", eager_error=ok_call)
    assert found is not None and found[0] == "value"


def test_eager_errors_take_the_largest_over_calls_and_nudged_inputs():
    """The program of fuzz seed 124 index 489 (instance norm summed): eager is exact by luck on call 1."""
    prog = fuzzgen.generate(124, 489)
    src = prog.source()
    fn_eager, fn_ref = fuzzcheck.build(src), fuzzcheck.build(src, reference=True)
    calls = [[x.detach() for x in fuzzcheck.inputs_for(prog, c)] for c in range(prog.calls)]
    eager = [fn_eager(*ins) for ins in calls]
    torch.set_default_dtype(torch.float64)
    try:
        refs = [fn_ref(*[x.double() if x.is_floating_point() else x for x in ins]) for ins in calls]
    finally:
        torch.set_default_dtype(torch.float32)
    assert eager[1][0].item() == 0.0 and abs(refs[1][0].item()) < 1e-12   # the lucky sample
    errs = fuzzcheck.eager_errors(fn_eager, fn_ref, calls, eager, refs)
    assert errs[0] >= max(fuzzcheck.eager_error(e[0], r[0]) for e, r in zip(eager, refs)) > 1e6
    assert len(errs) == len(prog.outputs)


def test_wrong_gradient_is_caught():
    prog = _program([("v0", "torch.sin(a0) * 3")], ["v0"], [("a0", (4, 6), torch.float32, -1.0, 1.0)])
    prog.inputs[0].requires_grad = True
    prog.train = True

    def bw_compiler(gm, example_inputs):
        def run(*args):
            return tuple(o * 1.01 if isinstance(o, torch.Tensor) else o for o in gm(*args))
        return run
    backend = aot_autograd(fw_compiler=lambda gm, _: gm, bw_compiler=bw_compiler)
    assert _kinds(prog, backend) == ["grad"]


def test_fallback_is_a_finding(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("lowering exploded")
    monkeypatch.setattr(fuse_all.backend, "_compile", broken)
    res = fuzzcheck.run_program(FLOAT_PROG, "cpp", "fuse_all")
    assert [f.kind for f in res.findings] == ["fallback"]
    assert "lowering exploded" in res.findings[0].detail
    assert "in broken" in res.findings[0].trace   # the traceback of the failed compile comes with it


@pytest.mark.parametrize("index", range(0, 16, 8))
def test_aot_eager_passes(index):
    """The oracle on a correct backend: eight generated programs per case, nothing reported."""
    for i in range(index, index + 8):
        prog = fuzzgen.generate(3, i)
        res = fuzzcheck.run_program(prog, "cpp", "aot_eager")
        assert res.invalid is None, f"generator bug: {res.invalid}\n{prog.describe()}"
        assert not res.findings, f"{[(f.kind, f.detail) for f in res.findings]}\n{prog.describe()}"


def test_eager_layout_is_accepted_where_the_meta_functions_differ():
    """Eager's tanh of a (1, 3, 1, 1) tensor with strides (3, 1, 3, 3) has strides (3, 1, 1, 1), the meta
    function's keeps the input's; `sub` of it and a (3, 1) tensor is then (9, 3, 1, 1) in eager and
    (9, 1, 3, 9) under FakeTensorMode. Either layout is right (aot_eager, Inductor and fuse_all each gave
    eager's and were flagged: fuzz seed 46 index 299)."""
    specs = [fuzzgen.InputSpec("a0", [(1, 3, 1, 1)], torch.bfloat16, (2, 3, 0, 1), (1, 1, 1, 1), (), 0, -1.0, 1.0),
             fuzzgen.InputSpec("a1", [(3, 1)], torch.int64, (0, 1), (1, 1), (), 0, -3, 3)]
    prog = fuzzgen.Program(0, 0, specs, [("v0", "torch.tanh(a0) * 0.5 + 1.0", "test"),
                                         ("v1", "torch.sin(torch.sub(v0, a1))", "test")], ["v1"])
    eager = fuzzcheck.build(prog.source())(*fuzzcheck.inputs_for(prog, 0))[0]
    assert eager.stride() == (9, 3, 1, 1)
    assert _kinds(prog, "aot_eager") == []
    assert _kinds(prog, "fuse_all") == []


@pytest.mark.parametrize("codegen", BOTH)
def test_traced_layout_is_the_graphs_where_the_python_meta_functions_differ_from_eager(codegen):
    """Dynamo traces under the Python dispatcher, whose meta registrations lay `torch.where(a1 > 0, a1, a0)`
    of an (11,) a1 and a (64, 1, 3, 11) a0 of strides (1, 1, 0, 64) out as (1, 192, 64, 192); eager's
    TensorIterator (and a plain FakeTensorMode) as (3, 1, 1, 192). fuse_all and Inductor follow the graph:
    the oracle must judge by the graph's layout, not the C++ meta kernels' (fuzz seed 105 index 264)."""
    specs = [fuzzgen.InputSpec("a0", [(64, 1, 3, 11)], torch.float64, (3, 2, 0, 1), (1, 1, 1, 1), (2,), 0, 0.5, 2.0),
             fuzzgen.InputSpec("a1", [(11,)], torch.float64, (0,), (1,), (), 0, -4.0, 4.0)]
    prog = fuzzgen.Program(0, 0, specs, [("v0", "a1 > 0", "test"), ("v1", "torch.where(v0, a1, a0)", "test"),
                                         ("v2", "torch.where(v0, v1, a1).clamp(-1.0, 1.0) * 0.5 + 1.0", "test")],
                           ["v2", "v1"])
    inputs = fuzzcheck.inputs_for(prog, 0)
    assert inputs[0].stride() == (1, 1, 0, 64)
    eager = fuzzcheck.build(prog.source())(*inputs)
    assert [t.stride() for t in eager] == [(3, 1, 1, 192)] * 2
    assert [strides for strides, _ in fuzzcheck.traced_layouts(fuzzcheck.build(prog.source()), inputs)] == \
        [[1, 64, 192]] * 2
    res = fuzzcheck.run_program(prog, codegen, "fuse_all")
    assert res.invalid is None, res.invalid
    assert [(f.kind, f.detail) for f in res.findings] == []


def test_eager_errors_include_other_thread_counts():
    """Fuzz seed 164 index 111: `(a0.sin() * 2 + a0).sum(-1)` over 849509 values in [-2, 2] cancels to ~30;
    eager at 1-2 threads was 1.5e-5 off (its luck: 1.4e-4 to 2.6e-4 at 3 and 4 threads, 2.3e-4 typical), so
    fuse_all's 9.5e-4 was flagged. Eager's error now includes runs at other thread counts, which split the
    sum into other chunks."""
    prog = fuzzgen.generate(164, 111, dynamic_frac=0.3, train_frac=0.3, big_frac=0.02, huge_frac=0.1,
                            half_frac=0.0, max_numel=fuzzgen.MAX_NUMEL)
    assert "sum(-1)" in prog.source() and list(prog.inputs[0].shapes[0]) == [849509]
    fn_eager, fn_ref = fuzzcheck.build(prog.source()), fuzzcheck.build(prog.source(), reference=True)
    calls = [[x.detach() for x in fuzzcheck.inputs_for(prog, c)] for c in range(prog.calls)]
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        eager = [fn_eager(*ins) for ins in calls]
        torch.set_default_dtype(torch.float64)
        try:
            refs = [fn_ref(*[x.double() for x in ins]) for ins in calls]
        finally:
            torch.set_default_dtype(torch.float32)
        lucky = fuzzcheck.eager_error(eager[0][0], refs[0][0])
        errs = fuzzcheck.eager_errors(fn_eager, fn_ref, calls, eager, refs)
    finally:
        torch.set_num_threads(old)
    assert torch.get_num_threads() == old
    assert lucky < 1e-6 and errs[0] > 3e-6, (lucky, errs)

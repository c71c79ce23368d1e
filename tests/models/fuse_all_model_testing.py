"""Helpers of the real-model tests (tests/models, tests/training): compile, compare with eager, and read what
fuse_all made of each graph (`fuse_all.compiled_graphs()`).

The backend is `FUSE_ALL_TEST_BACKEND` (default "fuse_all"). Any other backend ("aot_eager", "inductor")
runs the same numeric checks, which is how the tests themselves are validated and the tolerances
calibrated; the checks of fuse_all's records (no fallback, fusion) are skipped then.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
import torch
import torch.utils._pytree as pytree

BACKEND = os.environ.get("FUSE_ALL_TEST_BACKEND", "fuse_all")
USES_FUSE_ALL = BACKEND == "fuse_all"

# Deep nets with random weights: a compiler may reorder float32 reductions (conv/matmul are ATen calls and
# identical, but batch/layer norm statistics, softmax sums and fused multiply-adds are not) and the
# differences grow through 50-100 layers. Measured on these tests (CPU, float32, 2026-11-29): Inductor
# and fuse_all are both <= 1.3e-6 of the output's scale from eager. 1e-3 leaves room for other legal
# orderings (other CPUs' vector widths, other reduction splits) while a real bug (wrong index, dropped op,
# stale buffer) is off by O(1) of the scale.
MODEL_TOL = 1e-3


def reset() -> None:
    torch._dynamo.reset()
    if USES_FUSE_ALL:
        import fuse_all
        fuse_all.reset()


def compile_fn(fn: Callable) -> Callable:
    return torch.compile(fn, backend=BACKEND)


def records() -> list:
    """fuse_all's records of the graphs compiled since the last `reset()` (none for other backends)."""
    if not USES_FUSE_ALL:
        return []
    import fuse_all
    return fuse_all.compiled_graphs()


def require_fuse_all() -> None:
    if not USES_FUSE_ALL:
        pytest.skip(f"checks fuse_all's records; FUSE_ALL_TEST_BACKEND={BACKEND!r}")


# ------------------------------------------------------------------------------------------- comparison
def tensors(value: Any) -> list[torch.Tensor]:
    """Every tensor in a result, in a stable order (transformers registers its ModelOutput with pytree)."""
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def max_scaled_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max |actual - expected| / max(1, max |expected|): the error relative to the tensor's scale."""
    scale = max(1.0, float(expected.double().abs().max())) if expected.numel() else 1.0
    return float((actual.double() - expected.double()).abs().max()) / scale if expected.numel() else 0.0


def assert_close(actual: Any, expected: Any, tol: float = MODEL_TOL, what: str = "output") -> float:
    """Same structure, shapes, dtypes; floats within `tol` of each tensor's scale (elementwise
    |a - e| <= tol * max(1, max|e|) + tol * |e|); integers equal. Returns the worst scaled error."""
    got, want = tensors(actual), tensors(expected)
    assert len(got) == len(want), f"{what}: {len(got)} tensors, eager gives {len(want)}"
    worst = 0.0
    for i, (a, e) in enumerate(zip(got, want)):
        name = f"{what}[{i}]"
        assert a.shape == e.shape, f"{name}: shape {tuple(a.shape)}, eager {tuple(e.shape)}"
        assert a.dtype == e.dtype, f"{name}: dtype {a.dtype}, eager {e.dtype}"
        if not e.is_floating_point():
            assert torch.equal(a, e), f"{name}: integer values differ from eager"
            continue
        scale = max(1.0, float(e.double().abs().max())) if e.numel() else 1.0
        torch.testing.assert_close(a.double(), e.double(), rtol=tol, atol=tol * scale,
                                   msg=lambda m: f"{name} (scale {scale:.3g}): {m}")
        worst = max(worst, max_scaled_error(a, e))
    return worst


def relative_l2(a: torch.Tensor, ref: torch.Tensor) -> float:
    """||a - ref|| / ||ref||, with ||ref|| at least an RMS of 1e-6 per element: some gradients are zero in
    exact arithmetic (attention's key bias: softmax ignores a shift) and only rounding noise in practice."""
    ref = ref.double()
    floor = 1e-6 * max(1, ref.numel()) ** 0.5
    return float((a.double() - ref).norm()) / max(float(ref.norm()), floor)


# Training: how much larger than eager's own float32 error (both against a float64 run) a compiled run's
# error may be. Random-weight ResNet50 gradients in float32 are ill-conditioned (train-mode batch norm over
# a few values, cancellation): eager itself is 1-8% off float64 per tensor (measured, CPU, batch 2-8), so no
# fixed tolerance against eager works; the float64 reference is how torch's own accuracy checker
# (torch._dynamo.utils.same with fp64_ref) judges training. A wrong index or dropped op gives O(1).
FP64_MULTIPLIER = 4.0
FP64_ATOL = 1e-5


def fp64_errors(actual: dict, eager: dict, fp64: dict) -> dict:
    """{name: (compiled error, eager error)}, each the relative L2 distance to the float64 run."""
    return {n: (relative_l2(actual[n], fp64[n]), relative_l2(eager[n], fp64[n])) for n in fp64
            if fp64[n].is_floating_point()}


def assert_as_close_to_fp64_as_eager(actual: dict, eager, fp64: dict, what: str) -> float:
    """Per tensor: compiled error <= FP64_MULTIPLIER * max(eager's error for it, eager's error over all of
    `what`) + FP64_ATOL; integer tensors equal. (The pooled term: eager's error per tensor is itself
    random and can be luckily small, while a compiled run's error of the same order is no bug.)
    `eager`: one eager float32 run, or several (the same step in each memory format eager can run it in,
    e.g. a channels-last model for a compiler that runs convolutions channels-last: each is an equally
    legitimate float32 rounding of the same maths); eager's error is then the largest of theirs.
    Returns the largest compiled error."""
    runs = [eager] if isinstance(eager, dict) else list(eager)
    assert all(actual.keys() == run.keys() == fp64.keys() for run in runs), f"{what}: names differ"
    for n, ref in fp64.items():
        if not ref.is_floating_point():
            assert torch.equal(actual[n], ref), f"{what} {n}: integer values differ from eager"
    floats = [n for n in fp64 if fp64[n].is_floating_point()]
    errors = {n: (relative_l2(actual[n], fp64[n]), max(relative_l2(run[n], fp64[n]) for run in runs)) for n in floats}
    reference = torch.cat([fp64[n].double().flatten() for n in floats]) if floats else None
    pooled = max(relative_l2(torch.cat([run[n].double().flatten() for n in floats]), reference)
                 for run in runs) if floats else 0.0
    bad = [f"{n}: {c:.2e} vs float64 (eager {e:.2e}, bound {FP64_MULTIPLIER * max(e, pooled) + FP64_ATOL:.2e})"
           for n, (c, e) in errors.items() if not c <= FP64_MULTIPLIER * max(e, pooled) + FP64_ATOL]
    assert not bad, f"{what}: {len(bad)} tensors further from float64 than eager float32 is:\n" + "\n".join(bad[:10])
    return max((c for c, _ in errors.values()), default=0.0)


# ----------------------------------------------------------------------------------------------- models
def randomize_norms(model: torch.nn.Module, seed: int = 1) -> None:
    """Give batch/layer norms non-trivial statistics and affine parameters. At initialisation they are the
    identity up to 1/sqrt(1+eps) (mean 0, var 1, weight 1, bias 0), which a wrong fusion of them would not
    reveal; values stay near one so activations keep their scale through the net."""
    gen = torch.Generator().manual_seed(seed)

    def uniform(t, lo, hi):
        return torch.rand(t.shape, generator=gen, dtype=t.dtype) * (hi - lo) + lo
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.modules.batchnorm._BatchNorm, torch.nn.LayerNorm)):
                if getattr(m, "weight", None) is not None:
                    m.weight.copy_(uniform(m.weight, 0.5, 1.5))
                    m.bias.copy_(uniform(m.bias, -0.2, 0.2))
                if getattr(m, "running_mean", None) is not None:
                    m.running_mean.copy_(uniform(m.running_mean, -0.2, 0.2))
                    m.running_var.copy_(uniform(m.running_var, 0.5, 1.5))


@dataclass
class InferenceRun:
    expected: Any
    actual: Any
    again: Any                          # a second call of the compiled function (reuses the compiled code)
    records: list = field(default_factory=list)
    seconds: float = 0.0


def compile_and_run(fn: Callable, *args) -> InferenceRun:
    """Eager, then compiled (first and second call), all under no_grad (inference graphs)."""
    with torch.no_grad():
        expected = fn(*args)
        reset()
        compiled = compile_fn(fn)
        start = time.perf_counter()
        actual = compiled(*args)
        seconds = time.perf_counter() - start
        again = compiled(*args)
    run = InferenceRun(expected, actual, again, records(), seconds)
    reset()
    print(f"\n[{BACKEND}] first call {seconds:.1f} s; " + describe(run.records))
    return run


def check_matches_eager(run: InferenceRun, case: str) -> None:
    """The first and the second call of the compiled function give eager's result."""
    err = assert_close(run.actual, run.expected, what=f"{case} first call")
    assert_close(run.again, run.expected, what=f"{case} second call")
    print(f"\n{case}: max error {err:.2e} of the output's scale")


# ----------------------------------------------------------------------------------------- fuse_all records
def describe(recs: list) -> str:
    """One line per graph: kind, kernel and ATen-call counts (what the issue notes quote)."""
    return "; ".join(f"{r.kind} graph {r.graph_id}: {len(r.kernels)} kernels, {len(r.externs)} ATen calls"
                     + (f", FALLBACK {r.fallback_reason}" if r.fallback_reason else "") for r in recs) or "no records"


def assert_compiled(recs: list, kinds: set[str]) -> None:
    """fuse_all compiled every graph (no ATen fallback), each with kernels, and made graphs of `kinds`."""
    require_fuse_all()
    assert recs, "fuse_all compiled no graph (did the backend run?)"
    fallbacks = [f"{r.kind} {r.graph_id}: {r.fallback_reason}" for r in recs if r.fallback_reason is not None]
    assert not fallbacks, "graphs ran in ATen instead of fuse_all's code: " + "; ".join(fallbacks)
    empty = [f"{r.kind} {r.graph_id}" for r in recs if not r.kernels]
    assert not empty, f"graphs without any fuse_all kernel: {empty}"
    assert {r.kind for r in recs} >= kinds, f"graph kinds {sorted({r.kind for r in recs})}, expected {sorted(kinds)}"


def ops(kernel) -> set[str]:
    return {o.aten_op for o in kernel.origins}


def codes(kernel) -> set[str]:
    return {o.code for o in kernel.origins if o.code}


def reads(kernel) -> list:
    """The buffers a kernel reads: its inputs, and the inputs it reads through its own output (in place)."""
    return list(kernel.inputs) + [donor for _, donor in getattr(kernel, "in_place", ())]


def consumers(record, buffer: str) -> list:
    """The kernels that read `buffer`."""
    return [k for k in record.kernels if buffer in reads(k)]


def kernels_from_code(record, text: str) -> list:
    """Kernels with an ATen op from a user source line containing `text`."""
    return [k for k in record.kernels if any(text in c for c in codes(k))]


def show(kernels: list, most: int = 6) -> str:
    """Kernel names, kinds and their source lines, for assertion messages (the first `most`)."""
    lines = [f"  {k.name} ({k.kind}) reads {list(k.inputs)[:6]}{'...' if len(k.inputs) > 6 else ''}: "
             + " | ".join(sorted(codes(k)))[:300] for k in kernels[:most]]
    if len(kernels) > most:
        lines.append(f"  ... and {len(kernels) - most} more")
    return "\n".join(lines)

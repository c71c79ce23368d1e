"""Correctness of a compiled run against eager: flatten both results to tensors and compare them."""
from __future__ import annotations

from typing import Any

import torch
import torch.utils._pytree as pytree


def tensors(value: Any) -> list[torch.Tensor]:
    """Every tensor in a result, in a stable order (transformers registers its ModelOutput with pytree)."""
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def snapshot(value: Any) -> list[torch.Tensor]:
    """Detached copies: CUDA-graph backends overwrite their outputs on the next replay."""
    return [t.detach().clone() for t in tensors(value)]


def compare(out: list[torch.Tensor], ref: list[torch.Tensor], tol: float, loss_only: bool = False,
            float64: list[torch.Tensor] | None = None) -> tuple[bool, str]:
    """(ok, cell text). Elementwise |out - ref| <= atol + tol * |ref| with atol = tol * max(1, max |ref|): for
    values of order one this is allclose(rtol=atol=tol); for deep nets whose outputs reach hundreds it
    measures the error against the tensor's scale, which is what float32 rounding grows with.
    With `float64` (the step run in float64), a result outside `tol` of eager's is still ok when it is as
    close to float64 as eager's float32 is (`as_close_to_float64`): a training step of a BatchNorm net
    differs from eager by 2.5e-2 for every backend, aot_eager included (bench/RESULTS.md, session 10)."""
    ok, text = _compare_to_eager(out, ref, tol, loss_only)
    if ok or float64 is None or loss_only or not text.startswith("MISMATCH ("):
        return ok, text
    close, detail = as_close_to_float64(out, ref, float64)
    return close, f"{'ok' if close else 'MISMATCH'} vs float64 ({detail}; vs eager {text[len('MISMATCH ('):]}"


# a result is as close to float64 as eager when its relative L2 error is at most this multiple of eager's
# (tests/models/fuse_all_model_testing.py judges compiled models by the same rule) plus FLOAT64_ATOL
FLOAT64_MULTIPLIER = 4.0
FLOAT64_ATOL = 1e-5


def relative_l2(a: torch.Tensor, ref: torch.Tensor) -> float:
    """||a - ref|| / ||ref||, with ||ref|| at least an RMS of 1e-6 per element (gradients that are zero in
    exact arithmetic are rounding noise in practice)."""
    ref = ref.double()
    floor = 1e-6 * max(1, ref.numel()) ** 0.5
    return float((a.double() - ref).norm()) / max(float(ref.norm()), floor)


def as_close_to_float64(out: list[torch.Tensor], eager: list[torch.Tensor],
                        float64: list[torch.Tensor]) -> tuple[bool, str]:
    """Per floating tensor: error(out) <= FLOAT64_MULTIPLIER * max(error(eager), eager's error over all
    tensors) + FLOAT64_ATOL, errors as relative L2 distances to `float64` (the pooled term: one tensor's
    eager error is itself random and can be luckily small). (ok, "err <worst>, eager's <for that tensor>")."""
    floats = [i for i, r in enumerate(float64) if r.is_floating_point()]
    if len(out) != len(float64) or not floats:
        return False, "outputs differ from the float64 run's"
    pooled = relative_l2(torch.cat([eager[i].double().flatten() for i in floats]),
                         torch.cat([float64[i].flatten() for i in floats]))
    worst, worst_eager, ok = 0.0, 0.0, True
    for i in floats:
        c, e = relative_l2(out[i], float64[i]), relative_l2(eager[i], float64[i])
        ok = ok and c <= FLOAT64_MULTIPLIER * max(e, pooled) + FLOAT64_ATOL
        if c >= worst:
            worst, worst_eager = c, e
    return ok, f"err {worst:.1e}, eager's {worst_eager:.1e}"


def _compare_to_eager(out, ref, tol, loss_only):
    if loss_only:
        out, ref = out[:1], ref[:1]
    if len(out) != len(ref):
        return False, f"MISMATCH: {len(out)} outputs, eager has {len(ref)}"
    worst, ok = 0.0, True
    for i, (a, b) in enumerate(zip(out, ref)):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False, f"MISMATCH: output {i} is {tuple(a.shape)} {a.dtype}, eager {tuple(b.shape)} {b.dtype}"
        if not b.is_floating_point():
            if not torch.equal(a, b):
                return False, f"MISMATCH: integer output {i} differs"
            continue
        a, b = a.double(), b.double()
        if bool(torch.isnan(a).ne(torch.isnan(b)).any()):
            return False, f"MISMATCH: output {i} has NaNs where eager has none (or the reverse)"
        finite = torch.isfinite(b)
        if not torch.equal(a[~finite], b[~finite]):
            return False, f"MISMATCH: output {i} differs where eager is inf"
        if not bool(finite.any()):
            continue
        a, b = a[finite], b[finite]
        scale = max(1.0, float(b.abs().max()))
        diff = (a - b).abs()
        ok = ok and bool((diff <= tol * scale + tol * b.abs()).all())
        worst = max(worst, float(diff.max()) / scale)
    label = "loss " if loss_only else ""
    return ok, (f"ok ({label}err {worst:.1e})" if ok else f"MISMATCH ({label}err {worst:.1e}, tol {tol:.0e})")

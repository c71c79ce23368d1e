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


def compare(out: list[torch.Tensor], ref: list[torch.Tensor], tol: float, loss_only: bool = False) -> tuple[bool, str]:
    """(ok, cell text). Elementwise |out - ref| <= atol + tol * |ref| with atol = tol * max(1, max |ref|): for
    values of order one this is allclose(rtol=atol=tol); for deep nets whose outputs reach hundreds it
    measures the error against the tensor's scale, which is what float32 rounding grows with."""
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

"""What one step of a compiled workload launches, counted the same way for every backend with
torch.profiler: device kernels (CUDA only: every kernel event on the GPU timeline, ours, cuBLAS's and
cuDNN's alike) and ATen calls (top-level `aten::` ops on the CPU timeline, allocations and views left out:
those are bookkeeping, not work; fuse-all's own library ops, `fuse_all_triton::matmul`, count as calls too). The report derives the host cost per kernel from them:
(default-mode median − reduce-overhead median) / kernels — what CUDA graphs remove, per launch."""
from __future__ import annotations

from typing import Any, Callable

import torch

# aten ops that allocate or re-view memory: not counted as calls (Inductor avoids the dispatcher for
# them and so does fuse_all, but older code paths may not)
BOOKKEEPING = frozenset({
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::as_strided", "aten::view",
    "aten::reshape", "aten::_reshape_alias", "aten::alias", "aten::detach", "aten::lift_fresh",
    "aten::resize_", "aten::set_", "aten::_unsafe_view", "aten::expand", "aten::t", "aten::transpose",
    "aten::permute", "aten::squeeze", "aten::unsqueeze", "aten::slice", "aten::select",
})


# dispatcher ops that count as calls: ATen's, and fuse-all's library ops (the tensor-core product, which may
# itself call aten::mm: not counted twice)
CALL_PREFIXES = ("aten::", "fuse_all_triton::")


def count_launches(step: Callable[[], Any], device: str) -> dict:
    """{"kernels": device kernels per step (None on CPU), "aten": ATen calls per step, "aten_ops":
    {op: calls}}, from one profiled step after a warm-up step."""
    from torch.profiler import ProfilerActivity, profile

    step()
    if device == "cuda":
        torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        step()
        if device == "cuda":
            torch.cuda.synchronize()
    events = prof.events()
    kernels = None
    if device == "cuda":
        kernels = sum(1 for e in events if _on_gpu(e) and not e.name.startswith(("Memcpy", "Memset")))
    ops: dict[str, int] = {}
    for e in events:
        if _on_gpu(e) or not e.name.startswith(CALL_PREFIXES) or e.name in BOOKKEEPING:
            continue
        if _has_aten_ancestor(e):
            continue            # called by another aten op (addmm inside linear, copy_ inside to)
        ops[e.name] = ops.get(e.name, 0) + 1
    return {"kernels": kernels, "aten": sum(ops.values()), "aten_ops": dict(sorted(ops.items()))}


def _on_gpu(event) -> bool:
    kind = getattr(event, "device_type", None)
    return kind is not None and getattr(kind, "name", str(kind)).upper().endswith("CUDA")


def _has_aten_ancestor(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(CALL_PREFIXES):
            return True
        parent = parent.cpu_parent
    return False


def host_us_per_kernel(default_ms, ro_ms, kernels) -> float | None:
    """(default − reduce-overhead) / kernels in µs: the host time CUDA graphs take away, per launch."""
    if default_ms is None or ro_ms is None or not kernels:
        return None
    return (default_ms - ro_ms) * 1e3 / kernels

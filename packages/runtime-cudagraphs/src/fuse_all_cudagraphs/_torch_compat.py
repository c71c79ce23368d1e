"""Every torch-internal name this package touches, in one place.

The package must run on torch 2.11 (the GPU machine) and 2.14 (development). Private names move between
releases, so each one is looked up defensively here and has a fallback that keeps behaviour *correct*
(possibly slower or more conservative) when the private name is missing. Nothing else in the package
imports from ``torch._*``.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

log = logging.getLogger("fuse_all.cudagraphs")

try:  # public-ish since torch 1.x; used to follow a storage without keeping it alive
    from torch.multiprocessing.reductions import StorageWeakRef
except ImportError:  # pragma: no cover - never seen, but the fallback below keeps us correct
    StorageWeakRef = None  # type: ignore[assignment,misc]

_use_count = getattr(torch._C, "_storage_Use_Count", None)
_ptrs_equal = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None)


def storage_weak_ref(tensor: torch.Tensor) -> Any | None:
    """A weak reference to ``tensor``'s storage, or None when this torch cannot make one."""
    if StorageWeakRef is None:
        return None
    return StorageWeakRef(tensor.untyped_storage())


def storage_use_count(weak_ref: Any | None) -> int | None:
    """How many strong references (tensors, storage objects) the storage behind ``weak_ref`` has.

    None means "cannot tell"; callers must then assume the storage is referenced by someone.
    """
    if weak_ref is None or _use_count is None:
        return None
    return int(_use_count(weak_ref.cdata))


def data_ptrs_equal(tensors: Sequence[Any], ptrs: Sequence[int], indices: Sequence[int]) -> bool:
    """``tensors[i].data_ptr() == ptrs[i]`` for every ``i`` in ``indices``: one C++ call when available.

    ``ptrs`` is indexed like ``tensors`` (entries outside ``indices`` may be None), as cudagraph trees use it;
    this check is on the per-call hot path, where a Python loop over hundreds of parameters costs ~0.1 ms.
    """
    if _ptrs_equal is not None:
        return bool(_ptrs_equal(list(tensors), list(ptrs), list(indices)))
    return all(tensors[i].data_ptr() == ptrs[i] for i in indices)


def copy_all(dst: Sequence[torch.Tensor], src: Sequence[torch.Tensor]) -> None:
    """``d.copy_(s)`` for each pair, in one kernel launch where torch has ``_foreach_copy_``."""
    foreach_copy = getattr(torch, "_foreach_copy_", None)
    if foreach_copy is not None:
        foreach_copy(list(dst), list(src))
        return
    for d, s in zip(dst, src):
        d.copy_(s)


def is_fake_tensor(value: Any) -> bool:
    """FakeTensors (AOTAutograd's example inputs) have metadata but no memory."""
    try:
        from torch._subclasses.fake_tensor import FakeTensor
    except ImportError:  # pragma: no cover
        return False
    return isinstance(value, FakeTensor)


# --------------------------------------------------------------------------- CUDA graph capture
def graph_pool_handle() -> Any:
    return torch.cuda.graph_pool_handle()


def capture_begin(graph: Any, pool: Any) -> None:
    """Begin capture on the current stream into ``pool``.

    "thread_local" (what cudagraph trees use) lets other threads, e.g. a DataLoader's pin-memory thread,
    keep calling unsafe CUDA APIs while we capture; "global" would make their calls fail our capture.
    """
    try:
        graph.capture_begin(pool=pool, capture_error_mode="thread_local")
    except TypeError:  # very old signature without capture_error_mode
        graph.capture_begin(pool=pool)


def stop_allocating_to_pool(device_index: int, pool: Any) -> None:
    """Best effort after a failed capture: make sure the caching allocator no longer routes allocations
    into ``pool`` (capture_end may have raised before telling it). Harmless when it already stopped."""
    try:
        if hasattr(torch._C, "_cuda_endAllocateToPool"):
            torch._C._cuda_endAllocateToPool(device_index, pool)
        elif hasattr(torch._C, "_cuda_endAllocateCurrentStreamToPool"):  # torch < 2.3
            torch._C._cuda_endAllocateCurrentStreamToPool(device_index)
    except Exception:  # not registered any more: capture_end did clean up
        pass


# --------------------------------------------------------------------------- torch.compile plumbing
def aot_autograd(**kwargs: Any) -> Callable[..., Any]:
    from torch._dynamo.backends.common import aot_autograd as _aot_autograd

    return _aot_autograd(**kwargs)


def make_boxed_func(fn: Callable[..., Any]) -> Callable[[list[Any]], Any]:
    try:
        from functorch.compile import make_boxed_func as _make_boxed_func
    except ImportError:  # pragma: no cover
        from torch._functorch.aot_autograd import make_boxed_func as _make_boxed_func
    return _make_boxed_func(fn)


def register_backend(name: str, compiler_fn: Callable[..., Any]) -> None:
    """Register a Dynamo backend by name (only for scripts that run without the package installed)."""
    from torch._dynamo import register_backend as _register_backend

    _register_backend(compiler_fn=compiler_fn, name=name)


def num_fw_fixed_arguments(num_dynamo_inputs: int, num_aot_inputs: int) -> int:
    """Inputs AOTAutograd prepended to Dynamo's: lifted parameters and buffers (same rule as torch)."""
    try:
        from torch._inductor.utils import num_fw_fixed_arguments as _fixed

        return int(_fixed(num_dynamo_inputs, num_aot_inputs))
    except ImportError:
        return max(0, num_aot_inputs - num_dynamo_inputs)


def fw_static_input_indices(num_fixed: int) -> list[int]:
    """Indices of forward inputs at fixed addresses (parameters, buffers), as AOTAutograd records them.

    With nn-module inlining (the default since torch 2.5) parameters are ordinary graph inputs and only the
    tracing context knows which ones they are; without a context, the lifted prefix is the answer.
    """
    try:
        from torch._guards import TracingContext

        context = TracingContext.try_get()
    except ImportError:
        context = None
    metadata = getattr(context, "fw_metadata", None) if context is not None else None
    indices = getattr(metadata, "static_input_indices", None)
    if indices is None:
        return list(range(num_fixed))
    return sorted(set(int(i) for i in indices) | set(range(num_fixed)))


# Ops a newer torch lists in FORBIDDEN_CUDAGRAPH_OPS that an older supported one does not (the op is
# just as uncapturable there): 2.14 added cuSOLVER's eigh, which syncs with the host; 2.11 lacks it.
UNCAPTURABLE_OPS_OF_NEWER_TORCH = frozenset({"aten._linalg_eigh.default"})


def first_uncapturable_node(gm: torch.fx.GraphModule) -> torch.fx.Node | None:
    """The first node torch refuses to capture (CPU syncs, unbacked sizes, tagged ops), if any; ops that
    only a newer torch knows to refuse are refused on every supported torch."""
    unsafe = [node for node in (_first_node_torch_refuses(gm), _first_node_newer_torch_refuses(gm)) if node]
    if not unsafe:
        return None
    order = {node: position for position, node in enumerate(gm.graph.nodes)}
    return min(unsafe, key=order.__getitem__)


def _first_node_newer_torch_refuses(gm: torch.fx.GraphModule) -> torch.fx.Node | None:
    return next((node for node in gm.graph.nodes
                 if node.op == "call_function" and str(node.target) in UNCAPTURABLE_OPS_OF_NEWER_TORCH), None)


def _first_node_torch_refuses(gm: torch.fx.GraphModule) -> torch.fx.Node | None:
    try:
        from torch._inductor.utils import get_first_incompatible_cudagraph_node
    except ImportError:
        return None
    try:
        return get_first_incompatible_cudagraph_node(gm)
    except Exception as exc:  # an internal helper must never break compilation
        log.debug("torch's cudagraph op check failed (%s); relying on capture errors instead", exc)
        return None

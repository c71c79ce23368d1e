"""Channels-last copies of convolution weights, kept across calls while the weight is unchanged (CPU,
inference graphs).

With channels-last activations (`layout.py`) oneDNN converts every k x k NCHW weight to channels-last on
every call: ResNet-50 at 1x3x64x64 spends ~21% of its CPU time copying ~45 MB of weights per call. A host
program instead passes each such convolution `ChannelsLastWeight(site)(weight)`: the copy made at one call
is reused at the next while the weight is provably the same tensor with the same contents:

- the same Python object (a weak reference: a freed parameter whose address is reused never matches),
- the same storage (`.data = other` swaps the storage under the same object; a weak reference to the
  old storage tells a new storage that landed at the old address apart),
- the same data pointer, sizes, strides, dtype and device,
- the same `_version`: every in-place write through the tensor or a view of it (optimizer steps,
  `copy_` in `load_state_dict`, `with torch.no_grad(): w.mul_(...)`) bumps it.

Not seen: writes through `w.data` (a tensor with its own version counter, the blind spot autograd's
saved-tensor check has too) and writes through another tensor aliasing the same memory without being a
view (`torch.from_numpy` of a shared array). Turn the cache off with `options={"weight_layout_cache":
False}` for programs that update weights that way. Inference tensors (made under `torch.inference_mode`)
carry no version counter and are never cached.

A site keeps a copy only once it has seen the same weight unchanged at two calls in a row, so a graph whose
weights change at every call (an inference graph inside a training loop) converts per call as before and
holds no extra memory. Each site holds at most one copy, the size of its weight, released when the weight
or the program goes.
"""
from __future__ import annotations

import functools
import weakref

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from . import memory
from .program import BufferRef, ExternCall, Program, TensorSpec


def _identity(weight: torch.Tensor):
    """What must not change for a copy to stay valid, or None for a tensor that cannot be cached."""
    if weight.is_inference() or type(weight) not in (torch.Tensor, torch.nn.Parameter):
        return None
    storage = weight.untyped_storage()
    return (weight.data_ptr(), storage._cdata, weight._version, weight.shape, weight.stride(), weight.dtype,
            weight.device), storage


class ChannelsLastWeight:
    """One convolution site's cache: `site(weight)` is `weight.contiguous(memory_format=channels_last)`,
    reused across calls while `weight` is unchanged (see the module docstring)."""
    __slots__ = ("_kept", "_seen", "hits", "misses", "__weakref__")

    def __init__(self):
        self._kept = None    # (identity, weakref to weight, weakref to its storage, converted copy)
        self._seen = None    # (identity, weakref to weight, weakref to its storage) of the last miss
        self.hits = self.misses = 0
        _SITES.add(self)

    @property
    def holding(self) -> bool:
        """Whether a converted copy is kept now."""
        return self._kept is not None

    def __call__(self, weight: torch.Tensor) -> torch.Tensor:
        kept = self._kept
        if kept is not None and kept[1]() is weight and not kept[2].expired():
            found = _identity(weight)
            if found is not None and found[0] == kept[0]:
                self.hits += 1
                return kept[3]
        self.misses += 1
        converted = weight.contiguous(memory_format=torch.channels_last)
        found = _identity(weight)
        if converted is weight or found is None or (weight.requires_grad and torch.is_grad_enabled()):
            self._kept = self._seen = None
            return converted
        identity, storage = found
        seen = self._seen
        if seen is not None and seen[0] == identity and seen[1]() is weight and not seen[2].expired():
            self._kept, self._seen = (identity, seen[1], seen[2], converted), None
        else:   # first sight, or changed since the last call: remember it, keep nothing
            # the copy goes as soon as the weight does (the program may outlive the model)
            self._kept = None
            self._seen = (identity, weakref.ref(weight, functools.partial(_forget, weakref.ref(self))),
                          StorageWeakRef(storage))
        return converted

    def __repr__(self):
        return f"<ChannelsLastWeight hits={self.hits} misses={self.misses} holding={self.holding}>"


def _forget(site_ref, weight_ref) -> None:
    """A weight died: its site drops the copy and the memory of it."""
    site = site_ref()
    if site is None:
        return
    if site._kept is not None and site._kept[1] is weight_ref:
        site._kept = None
    if site._seen is not None and site._seen[1] is weight_ref:
        site._seen = None


_SITES: weakref.WeakSet = weakref.WeakSet()


def live_sites() -> list[ChannelsLastWeight]:
    """Every site of the host programs alive in this process (for tests and debugging)."""
    return list(_SITES)


# ---- which convolutions get a site (render time, host.py) ----

def weight_cache_sites(program: Program) -> dict[int, str]:
    """The convolutions (step index -> slot name) whose weight is a parameter (`weight_cache_inputs`) that
    ATen would convert to channels-last at every call: a k x k NCHW weight meeting a channels-last input.
    Their copies are kept across calls (`weight_layouts.ChannelsLastWeight`). CPU only: a CUDA graph replay
    would not run the check that notices a changed weight."""
    if not program.weight_cache_inputs or program.device.split(":", 1)[0] != "cpu":
        return {}
    inputs = {i.name: i.spec for i in program.inputs if i.kind == "tensor"}
    specs = {**inputs, **memory.buffer_specs(program)}
    sites = {}
    for index, step in enumerate(program.steps):
        if not (isinstance(step, ExternCall) and str(step.target) == "aten.convolution.default"
                and len(step.args) == 9 and step.args[6] is False and not step.kwargs):
            continue
        x, w = step.args[0], step.args[1]
        if not (isinstance(w, BufferRef) and w.view is None and w.name in program.weight_cache_inputs
                and isinstance(x, BufferRef)):
            continue
        x_spec = x.view if x.view is not None else specs.get(x.name)
        w_spec = inputs.get(w.name)
        if x_spec is not None and w_spec is not None and len(w_spec.size) == 4 == len(x_spec.size) \
                and _is_channels_last(x_spec) is True and _is_channels_last(w_spec) is False:
            sites[index] = f"_fa_weight_{len(sites)}"
    return sites


def _is_channels_last(spec: TensorSpec) -> bool | None:
    """Whether a 4-D layout is channels-last contiguous; None when its sizes or strides are symbolic."""
    values = [*spec.size, *spec.stride]
    if not all(isinstance(v, int) or getattr(v, "is_Integer", False) for v in values):
        return None
    size, stride = [int(v) for v in spec.size], [int(v) for v in spec.stride]
    # torch's rule (compute_channels_last_contiguous_2d): C fastest, then W, H, N; size-1 dims: any stride
    expected = 1
    for dim in (1, 3, 2, 0):
        if size[dim] != 1 and stride[dim] != expected:
            return False
        expected *= size[dim]
    return True

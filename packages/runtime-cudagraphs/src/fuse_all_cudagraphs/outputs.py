"""A captured graph's outputs: which memory they live in, who still sees it, and how they are handed out.

A replay writes every output into the same memory as the last one. We therefore never hand out the static
output tensors themselves but fresh aliases of their storages, and count the storage's strong references
(tensors and storage objects, like torch's ``StorageWeakRef`` liveness checks) to know whether the caller,
an autograd graph or a view of either still holds the previous result before we overwrite it.

No CUDA calls here: the same logic runs on CPU tensors in the unit tests.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from . import _torch_compat as compat


class UnsupportedOutputs(Exception):
    """The outputs cannot be handed out safely from a graph (the message is the fallback reason)."""


class OwnedGroup:
    """Outputs that share one storage the graph writes (its pool memory, or a constant it returns)."""

    #: Copies are handed out until the caller has dropped this many in a row before the next call;
    #: then aliases again (a phase that kept results, e.g. validation, should not tax every later call).
    #: Not for outputs found alive when *another* graph of the pool was about to replay (``.grad`` kept
    #: across the next forward): whether they are dropped before this graph's next call says nothing about
    #: the other graph's, so they stay copies (``sticky``).
    REVERT_AFTER = 4

    __slots__ = ("outputs", "storage_ptr", "weak", "baseline", "copied_out", "sticky", "_sink", "_sticky_sink",
                 "_last_copy", "_dropped")

    def __init__(self, tensor: torch.Tensor, sink: set[int], sticky_sink: set[int] | None = None):
        self.outputs: list[int] = []
        self.storage_ptr = tensor.untyped_storage().data_ptr()
        self.weak = compat.storage_weak_ref(tensor)
        self.baseline: int | None = None  # our own references, measured once the capture is done
        self.copied_out = False
        self.sticky = False
        # the signature's sets of copied-out (and of sticky) output indices: they outlive re-captures
        self._sink = sink
        self._sticky_sink = sticky_sink if sticky_sink is not None else set()
        self._last_copy: Any = None  # weak reference to the last copy handed out
        self._dropped = 0  # calls in a row whose previous copy was already gone

    def mark_copied_out(self, sticky: bool = False) -> None:
        """From the next hand-out on, these outputs are copies (the caller keeps such results around);
        ``sticky``: for good (see REVERT_AFTER)."""
        self.copied_out = True
        self._sink.update(self.outputs)
        if sticky:
            self.sticky = True
            self._sticky_sink.update(self.outputs)

    def give(self, static: torch.Tensor, first: bool) -> torch.Tensor:
        """The tensor to hand out for one output of this group (``first``: the group's first output)."""
        if first and self.copied_out and not self.sticky and self._copies_unneeded():
            self.copied_out = False
            self._sink.difference_update(self.outputs)
        if not self.copied_out:
            return static.detach()
        copy = static.clone()
        if first:
            self._last_copy = compat.storage_weak_ref(copy)
        return copy

    def _copies_unneeded(self) -> bool:
        gone = self._last_copy is not None and compat.storage_use_count(self._last_copy) == 0
        self._dropped = self._dropped + 1 if gone else 0
        if self._dropped < self.REVERT_AFTER:
            return False
        self._dropped, self._last_copy = 0, None
        return True

    def is_live(self) -> bool:
        """Someone besides us references the storage (so the next replay would overwrite their data)."""
        if self.copied_out and self.baseline is None:
            return False  # cannot count references here, and we only ever hand out copies
        count = compat.storage_use_count(self.weak)
        return count is None or self.baseline is None or count > self.baseline


def _extent(t: torch.Tensor) -> tuple[int, int]:
    """[first byte, one past the last byte] that a strided tensor can touch."""
    start = t.data_ptr()
    if t.numel() == 0:
        return start, start
    span = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return start, start + (span + 1) * t.element_size()


class OutputPlan:
    """Built right after capture from the outputs the capture returned and the inputs it read.

    Each output is one of:
      * ("const", value)    non-tensors (e.g. SymInt values saved for backward): fixed per signature;
      * ("view", j, delta, size, stride, dtype)   a view of input ``j``: rebuilt on the caller's current
        input on each call, so it aliases the caller's tensor just as in eager mode (not our buffer);
      * ("owned", group, static)   memory the graph writes: handed out as an alias, or as a copy once
        the caller was seen holding it across calls (``copied_out``).
    """

    def __init__(self, outputs: Any, inputs: Sequence[Any], copied_out: set[int],
                 sticky_copied_out: set[int] | None = None):
        sticky_copied_out = sticky_copied_out if sticky_copied_out is not None else set()
        self.single = isinstance(outputs, torch.Tensor)
        items = [outputs] if self.single else list(outputs)
        self.as_list = isinstance(outputs, list)
        self.kinds: list[tuple[Any, ...]] = []
        self.groups: list[OwnedGroup] = []
        by_storage: dict[int, OwnedGroup] = {}
        input_extents = [(j, _extent(x)) for j, x in enumerate(inputs)
                         if isinstance(x, torch.Tensor) and x.numel() > 0]
        input_storages = {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
        for k, out in enumerate(items):
            if not isinstance(out, torch.Tensor):
                self.kinds.append(("const", out))
                continue
            if out.layout != torch.strided:  # (sparse outputs have no storage to alias)
                raise UnsupportedOutputs(f"output {k} has layout {out.layout}; only strided outputs")
            view = self._as_input_view(k, out, inputs, input_extents, input_storages)
            if view is not None:
                self.kinds.append(view)
                continue
            key = out.untyped_storage().data_ptr()
            group = by_storage.get(key)
            if group is None:
                group = by_storage[key] = OwnedGroup(out, copied_out, sticky_copied_out)
                self.groups.append(group)
            group.outputs.append(k)
            group.copied_out = group.copied_out or k in copied_out
            group.sticky = group.sticky or k in sticky_copied_out
            self.kinds.append(("owned", group, out))

    @staticmethod
    def _as_input_view(k: int, out: torch.Tensor, inputs: Sequence[Any],
                       input_extents: list[tuple[int, tuple[int, int]]], input_storages: set[int]):
        if out.untyped_storage().data_ptr() not in input_storages:
            return None
        lo, hi = _extent(out)
        for j, (start, end) in input_extents:
            same_storage = inputs[j].untyped_storage().data_ptr() == out.untyped_storage().data_ptr()
            if same_storage and start <= lo and hi <= end:
                return ("view", j, lo - start, tuple(out.shape), tuple(out.stride()), out.dtype)
        raise UnsupportedOutputs(f"output {k} aliases an input's storage outside that input's elements")

    def measure_baselines(self) -> None:
        """Count our own references; call once every capture-time temporary is gone."""
        for group in self.groups:
            group.baseline = compat.storage_use_count(group.weak)
            if group.baseline is None:
                group.copied_out = True  # cannot tell liveness on this torch: always hand out copies

    def live_groups(self) -> list[OwnedGroup]:
        return [group for group in self.groups if group.is_live()]

    def release(self) -> None:
        """Drop our references (the graph is retired); outputs the caller holds stay tracked as orphans."""
        self.kinds = [kind if kind[0] != "owned" else ("owned", kind[1], None) for kind in self.kinds]
        for group in self.groups:
            group.baseline = 0 if group.baseline is not None else None

    def hand_out(self, inputs: Sequence[Any]) -> Any:
        results = []
        for kind in self.kinds:
            tag = kind[0]
            if tag == "owned":
                group = kind[1]
                results.append(group.give(kind[2], first=group.outputs[0] == len(results)))
            elif tag == "view":
                results.append(_rebuild_view(inputs[kind[1]], *kind[2:]))
            else:
                results.append(kind[1])
        if self.single:
            return results[0]
        return results if self.as_list else tuple(results)


def _rebuild_view(base: torch.Tensor, delta: int, size: tuple[int, ...], stride: tuple[int, ...],
                  dtype: torch.dtype) -> torch.Tensor:
    """The output that was ``delta`` bytes into the captured input, placed on the caller's tensor."""
    if dtype == base.dtype:
        return base.as_strided(size, stride, base.storage_offset() + delta // base.element_size())
    storage = base.untyped_storage()
    offset_bytes = base.data_ptr() + delta - storage.data_ptr()
    itemsize = torch.empty((), dtype=dtype).element_size()
    return torch.empty((0,), dtype=dtype, device=base.device).set_(storage, offset_bytes // itemsize, size, stride)

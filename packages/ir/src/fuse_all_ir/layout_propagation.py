"""Fake-tensor propagation after a few nodes were inserted into a graph whose nodes all have values.

The layout pass (layout.py) inserts clones (a weight to channels-last, an output back to its traced strides)
and needs the values they change. torch's `FakeTensorProp` runs every node again: ~1000 fake-tensor ops for
a ResNet-50 training backward, ~1 s each time on the H200, three times per graph. Here a node runs again
only when it is new or one of its inputs got a new value; its new value replaces the old one only where it
differs in shape, strides, dtype or device (or the node aliases its input: a view or a tuple element, whose
value must share its input's storage), so the change stops spreading where layouts agree again, and every
node that keeps its value keeps the one its users were computed from. A backward whose saved activations
came back channels-last (`adopt_input_strides`) starts from its restrided inputs the same way.

`values_in_mode` says whether a graph's values can be kept: every one a fake tensor of the mode the new
inputs come from (a value of another mode, or a real tensor, would mix with the new ones in an op).
"""
from __future__ import annotations

import itertools
import operator
from typing import Any

import torch
import torch.fx
from torch.fx.passes.fake_tensor_prop import FakeTensorProp


def _layout(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return (tuple(map(str, value.shape)), tuple(map(str, value.stride())), str(value.storage_offset()),
                value.dtype, value.device)
    if isinstance(value, (list, tuple)):
        return tuple(_layout(v) for v in value)
    return str(value)     # SymInts, numbers, None: compared by their printed expression, which adds no guard


def _aliases_input(node: torch.fx.Node) -> bool:
    return node.target is operator.getitem or bool(getattr(node.target, "is_view", False))


class IncrementalFakeTensorProp(FakeTensorProp):
    """`FakeTensorProp` over `gm` that runs only `inserted`, the inputs, and the nodes whose values they
    change (an input whose example value has another layout than its node's value changes its users)."""

    def __init__(self, gm: torch.fx.GraphModule, mode, inserted):
        super().__init__(gm, mode=mode)
        self._changed = set(inserted)

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op == "placeholder":     # an input whose layout differs from its last value changes its users
            old = n.meta.get("val")
            value = torch.fx.Interpreter.run_node(self, n)     # the input, without FakeTensorProp's snapshot
            if old is not None and _layout(old) == _layout(value):
                return value          # its value stays (a ResNet-50 graph has ~270 inputs: a snapshot each)
            # FakeTensorProp takes it again (a `*args` placeholder took every remaining input as a list)
            again = value if str(n.target).startswith("*") else [value]
            self.args_iter = itertools.chain(again, self.args_iter)
            self._changed.add(n)
            return super().run_node(n)
        if n.op == "output":          # it has no value
            return super().run_node(n)
        if "val" not in n.meta:
            self._changed.add(n)
            return super().run_node(n)
        if n not in self._changed and not any(a in self._changed for a in n.all_input_nodes):
            return n.meta["val"]
        old = n.meta["val"]
        result = super().run_node(n)
        if n in self._changed or _aliases_input(n) or _layout(old) != _layout(n.meta["val"]):
            self._changed.add(n)
            return result
        n.meta["val"] = old
        return old


def values_in_mode(gm: torch.fx.GraphModule, mode) -> bool:
    """Whether every tensor in the nodes' values is a fake tensor of `mode` (a node without a value runs
    again, and so do its users)."""
    from torch._subclasses.fake_tensor import FakeTensor

    def ok(value: Any) -> bool:
        if isinstance(value, (list, tuple)):
            return all(ok(v) for v in value)
        if isinstance(value, torch.Tensor):
            return isinstance(value, FakeTensor) and value.fake_mode is mode
        return True
    return all(ok(n.meta.get("val")) for n in gm.graph.nodes)

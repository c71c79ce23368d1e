"""The values an FX graph's nodes carry (`node.meta["val"]`: fake tensors, SymInts, tuples) and where they came
from in the user's code, read and made the same way by every graph rewrite that runs before lowering
(conv_as_matmul, conv_epilogue, layout_decision, matmul_route)."""
from __future__ import annotations

from typing import Any, Iterable

import torch


def value_of(arg: Any) -> Any:
    """A node's traced value; any other argument (a constant, a list of ints) is its own value."""
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg


def tensor_of(arg: Any) -> torch.Tensor | None:
    """A node's traced value when it is a tensor; None for anything else."""
    val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def call_function(graph: torch.fx.Graph, target, args: tuple, fake_mode, val=None, **kwargs) -> torch.fx.Node:
    """A new `target(*args, **kwargs)` node at the graph's insertion point, its value traced with
    `fake_mode` from its arguments' values (or `val` when given)."""
    node = graph.call_function(target, args, kwargs)
    if val is None:
        with fake_mode:
            val = target(*[value_of(a) for a in args], **kwargs)
    node.meta["val"] = val
    return node


# the meta keys that name a node's source: capture's `source_loc` (the user's line, which the fusion report,
# the editor and the fusion SVG read first) and the traces it was derived from
SOURCE_KEYS = ("source_loc", "stack_trace", "nn_module_stack", "source_fn_stack")


def keep_source(nodes: Iterable[torch.fx.Node], of: torch.fx.Node) -> None:
    """Give `nodes` (what a rewrite put in place of `of`) the source that `of` came from."""
    for node in nodes:
        for key in SOURCE_KEYS:
            if key in of.meta:
                node.meta[key] = of.meta[key]

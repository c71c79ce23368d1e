"""`capture()`: the ATen graphs of a function, for library users who want the graphs and no compiler."""
from __future__ import annotations

from typing import Any, Callable, Mapping

import torch

from . import compat
from .backend import make_backend
from .graph import CapturedGraph


def capture(
    fn: Callable[..., Any],
    *example_inputs: Any,
    dynamic: bool = False,
    training: bool = False,
    decompositions: Mapping[Any, Callable[..., Any]] | None = None,
) -> list[CapturedGraph]:
    """Run Dynamo + AOTAutograd on `fn(*example_inputs)` and return the ATen graphs, in compile order.

    `fn` really runs once (Dynamo traces by running), each graph executed as captured. Graph breaks give
    several graphs. With `training=True` the call runs under grad mode and a backward pass is run as well,
    so forward and backward graphs come back; the gradients are computed with `torch.autograd.grad`, so
    no `.grad` of any tensor changes. If nothing requires grad, AOTAutograd makes inference graphs.
    `dynamic=True` marks all sizes symbolic (graphs get SymInt inputs and `sym_size` nodes).

    Each call compiles afresh (a new backend), so Dynamo's recompile limit per function (8 by default)
    bounds how often one function can be captured in a process; `torch.compiler.reset()` clears it.
    """
    graphs: list[CapturedGraph] = []

    def keep(graph: CapturedGraph) -> Callable[[list], Any]:
        graphs.append(graph)
        module = graph.graph_module

        def run(args: list) -> Any:
            return module(*args)

        return run

    compiled = torch.compile(fn, backend=make_backend(keep, decompositions=decompositions), dynamic=dynamic)
    with torch.enable_grad() if training else torch.no_grad():
        outputs = compiled(*example_inputs)
        if training:
            _run_backward(outputs)
    return graphs


def _run_backward(outputs: Any) -> None:
    """Differentiate a scalar built from every differentiable output, without touching any `.grad`."""
    differentiable = [
        value for value in compat.tree_leaves(outputs)
        if isinstance(value, torch.Tensor) and value.requires_grad and value.is_floating_point()
    ]
    if not differentiable:
        return
    loss = torch.stack([value.float().sum() for value in differentiable]).sum()
    leaves = _autograd_leaves(loss)
    if leaves:
        torch.autograd.grad(loss, leaves, allow_unused=True)


def _autograd_leaves(tensor: torch.Tensor) -> list[torch.Tensor]:
    """The leaf tensors (parameters, inputs) `tensor` depends on, found by walking its autograd graph."""
    leaves, seen, pending = [], set(), [tensor.grad_fn]
    while pending:
        node = pending.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)  # AccumulateGrad nodes hold their leaf
        if isinstance(variable, torch.Tensor):
            leaves.append(variable)
        pending.extend(next_node for next_node, _ in node.next_functions)
    return leaves

"""`CapturedGraph`: one functional ATen graph and everything a compiler needs to know about it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from .provenance import SOURCE_LOC, FunctionInfo

GRAPH_KINDS = ("inference", "forward", "backward")


@dataclass
class CapturedGraph:
    """An ATen graph from AOTAutograd.

    `example_inputs` are what AOTAutograd passes (FakeTensors, real tensors, SymInts, ints), in placeholder
    order. Index lists refer to those positions. Nodes carry `meta["val"]` (fake values with shapes and
    strides, symbolic where sizes are dynamic) and, where known, `meta["source_loc"]`.
    """

    graph_module: torch.fx.GraphModule
    example_inputs: list[Any]
    kind: str                                   # "inference" | "forward" | "backward"
    graph_id: str                               # [A-Za-z0-9_-]+, unique per process, stable across runs
    function: FunctionInfo | None               # the user function Dynamo compiled, when known
    static_input_indices: tuple[int, ...] = ()  # parameters/buffers: same storage on every call
    mutated_input_indices: tuple[int, ...] = ()  # inputs the graph writes (in-graph `copy_` nodes)
    num_fwd_outputs: int | None = None          # forward graphs: outputs[:n] go to the user, the rest are saved for bw
    size_hints: dict[str, int] = field(default_factory=dict)  # size symbol name -> the example value traced with
    graph_break: dict[str, Any] | None = None   # {file, line, reason} of the break that ended the Dynamo graph
    device: str = "cpu"                         # device of the first tensor input (or output), e.g. "cuda:0"
    # forward graphs: the compiler may give saved activations (outputs past num_fwd_outputs) other strides
    # than traced; capture then tells AOTAutograd, which restrides the backward's example inputs to match
    saved_layout_free: bool = False

    def __post_init__(self) -> None:
        if self.kind not in GRAPH_KINDS:
            raise ValueError(f"kind must be one of {GRAPH_KINDS}, got {self.kind!r}")

    @property
    def graph(self) -> torch.fx.Graph:
        return self.graph_module.graph

    def aten_ops(self) -> list[str]:
        """Targets of the graph's call_function nodes, in order, e.g. "aten.mm.default"."""
        return [str(node.target) for node in self.graph.nodes if node.op == "call_function"]


def graph_device(example_inputs: list[Any], graph_module: torch.fx.GraphModule) -> str:
    for value in example_inputs:
        if isinstance(value, torch.Tensor):
            return str(value.device)
    for node in graph_module.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor):
            return str(value.device)
    return "cpu"


def describe_value(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        shape = ", ".join(str(s) for s in value.shape)
        stride = ", ".join(str(s) for s in value.stride())
        return f"{str(value.dtype).replace('torch.', '')}[{shape}] stride=({stride}) {value.device}"
    if isinstance(value, torch.SymInt):
        return f"SymInt {value}"
    return f"{type(value).__name__} {value!r}"


def format_graph(graph: CapturedGraph) -> str:
    """A readable dump: header, inputs, the graph code, and each node's user source line."""
    function = graph.function
    where = f"{function.qualname or function.name} ({function.file}:{function.first_line})" if function else "unknown"
    lines = [
        f"# graph {graph.graph_id} ({graph.kind}) on {graph.device}, compiled from {where}",
        f"# size hints: {graph.size_hints or 'none (static shapes)'}",
    ]
    if graph.graph_break:
        lines.append(f"# ended by a graph break at {graph.graph_break['file']}:{graph.graph_break['line']}")
    placeholders = [node for node in graph.graph.nodes if node.op == "placeholder"]
    for index, node in enumerate(placeholders):
        value = graph.example_inputs[index] if index < len(graph.example_inputs) else node.meta.get("val")
        marks = [m for m, on in (("static", index in graph.static_input_indices),
                                 ("mutated", index in graph.mutated_input_indices)) if on]
        lines.append(f"#   input {index} {node.name}: {describe_value(value)} {' '.join(marks)}".rstrip())
    lines += ["", graph.graph_module.print_readable(print_output=False).rstrip(), "", "# source lines"]
    for node in graph.graph.nodes:
        location = node.meta.get(SOURCE_LOC)
        if location:
            lines.append(f"#   {node.name} = {node.target}  <-  {location['file']}:{location['line']}  {location['code']}")
    return "\n".join(lines) + "\n"

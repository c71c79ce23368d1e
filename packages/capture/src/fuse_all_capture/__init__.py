"""Dynamo + AOTAutograd capture to a functional ATen graph with source provenance.

    backend = make_backend(compile_graph)          # compile_graph(CapturedGraph) -> boxed callable
    torch.compile(model, backend=backend)
    graphs = capture(fn, *example_inputs)          # just the graphs, nothing compiled
"""
from .__about__ import __version__
from .backend import CompileGraph, graph_breaks, make_backend
from .decompositions import decomposition_table
from .graph import GRAPH_KINDS, CapturedGraph, format_graph
from .provenance import SOURCE_LOC, FunctionInfo, function_span
from .standalone import capture

__all__ = [
    "__version__", "CompileGraph", "graph_breaks", "make_backend", "decomposition_table", "GRAPH_KINDS",
    "CapturedGraph", "format_graph", "SOURCE_LOC", "FunctionInfo", "function_span", "capture",
]

"""`make_backend`: a torch.compile backend that hands each AOTAutograd ATen graph to a compile function."""
from __future__ import annotations

import hashlib
import os
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from . import compat
from .decompositions import decomposition_table
from .graph import CapturedGraph, graph_device
from .provenance import (
    FunctionInfo, annotate_nodes, function_from_code, function_from_frames, is_user_file, parse_stack_trace,
    unwrap_decorators,
)

CompileGraph = Callable[[CapturedGraph], Callable[[list], Any]]

_GRAPH_ID_SUFFIX = {"inference": "", "forward": "_fwd", "backward": "_bwd"}
_MAX_REASON_CHARS = 1000

_ordinals: Counter[str] = Counter()
_ordinals_lock = threading.Lock()


@dataclass
class _DynamoGraph:
    """What the three AOTAutograd graphs of one Dynamo graph share. The backward graph is compiled
    lazily (at the first `.backward()`), when Dynamo's frame is long gone, so this is computed up front."""

    function: FunctionInfo | None
    graph_break: dict[str, Any] | None
    id_stem: str
    forward_static: frozenset[int] = frozenset()
    sources_by_seq_nr: dict[int, dict[str, Any]] = field(default_factory=dict)


def make_backend(
    compile_graph: CompileGraph,
    *,
    decompositions: Mapping[Any, Callable[..., Any]] | None = None,
    name: str = "fuse_all_capture",
    partition: str | Callable[..., Any] = "min_cut",
    keep_inference_input_mutations: bool = True,
    aot_cache_tag: str | None = None,
) -> Callable[..., Any]:
    """A torch.compile backend: Dynamo graph -> AOTAutograd -> `compile_graph(CapturedGraph)` per ATen graph.

    `compile_graph` serves inference graphs and the forward and backward graphs of training alike
    (`CapturedGraph.kind` tells them apart) and returns a *boxed* callable: it takes the list of inputs
    (it may clear the list to free them early) and returns the outputs as a tuple or list.

    `decompositions` defaults to `decomposition_table()`. `partition` picks how the joint training graph
    is split: "min_cut" (recompute cheap pointwise ops in the backward instead of saving them, which is
    what a fusing compiler wants) or "default" (save what the forward computed), or a partition function.
    With `keep_inference_input_mutations`, in-place updates of inputs stay in the graph as `aten.copy_`
    nodes (listed in `mutated_input_indices`) instead of running as a separate epilogue.
    Keyword arguments torch.compile passes to custom backends (`mode`, `options`) are accepted and ignored:
    they are the business of whoever wraps this backend.

    `aot_cache_tag`, when given, lets torch's AOTAutograd cache keep the compiled graphs
    (keyed by that tag besides the graph): a later process compiling the same graph skips AOTAutograd's
    tracing and `compile_graph` and loads the entry instead. For that, every callable `compile_graph`
    returns must carry, as `__wrapped__`, a torch `OutputCode` that pickles (`compat.output_code_base`);
    an entry whose `prepare_for_serialization` raises is not saved. A training graph's entry is saved when
    its backward compiles (lazily, at the first backward: `compat.bundle_lazy_backward_save`).
    """
    table = decomposition_table() if decompositions is None else dict(decompositions)
    partition_fn = compat.partition_function(partition) if isinstance(partition, str) else partition

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any], **_options: Any) -> Callable[..., Any]:
        dynamo_graph = _Described(gm)     # on the first compile: a cache hit compiles nothing
        tag = aot_cache_tag
        compilers = {kind: _aten_compiler(kind, dynamo_graph, compile_graph, cached=bool(tag))
                     for kind in _GRAPH_ID_SUFFIX}
        if tag:
            compilers = {kind: compat.serializable_compiler(fn) for kind, fn in compilers.items()}
        aot = compat.aot_autograd(
            fw_compiler=compilers["forward"],
            bw_compiler=compilers["backward"],
            inference_compiler=compilers["inference"],
            decompositions=table,
            partition_fn=partition_fn,
            keep_inference_input_mutations=keep_inference_input_mutations,
        )
        if not tag:
            return aot(gm, example_inputs)
        with compat.aot_cache_config(tag):
            return aot(gm, example_inputs)

    backend.__name__ = backend.__qualname__ = name
    return backend


def _describe_dynamo_graph(gm: torch.fx.GraphModule) -> _DynamoGraph:
    # The traced ops' stacks (unique, in graph order). Inputs are no ops: torch 2.11 records a placeholder's
    # stack at the wrapper's call line only, which would read as an op the wrapper does itself.
    traces = dict.fromkeys(node.meta.get("stack_trace") for node in gm.graph.nodes
                           if node.op not in ("placeholder", "output"))
    stacks = [parse_stack_trace(trace) for trace in traces if trace]
    function = function_from_code(compat.compiling_frame_code())
    if function is None:
        function = next((f for f in map(function_from_frames, stacks) if f), None)
    if function is not None:
        function = unwrap_decorators(function, stacks)
    identity = f"{gm.code}\n{function.file}:{function.name}" if function else gm.code
    digest = hashlib.sha256(identity.encode()).hexdigest()[:8]
    # Same Dynamo graph compiled again in this process (a second model instance, grad mode flipped):
    # a new ordinal. Across runs the n-th compile of the same code gets the same id, so its artifact
    # record is replaced instead of piling up.
    with _ordinals_lock:
        ordinal = _ordinals[digest]
        _ordinals[digest] += 1
    reason = compat.graph_compile_reason(gm)
    graph_break = _break_entry(reason) if reason is not None and getattr(reason, "graph_break", False) else None
    return _DynamoGraph(function, graph_break, f"g_{digest}_{ordinal}")


class _Described:
    """`_describe_dynamo_graph(gm)`, computed at the first call (a forward or inference compile, inside
    Dynamo's call of the backend, where the frame is still known) and then kept; the graph is let go."""

    def __init__(self, gm: torch.fx.GraphModule):
        self._gm: torch.fx.GraphModule | None = gm
        self._value: _DynamoGraph | None = None
        self._lock = threading.Lock()

    def __call__(self) -> _DynamoGraph:
        with self._lock:
            if self._value is None:
                self._value = _describe_dynamo_graph(self._gm)
                self._gm = None
            return self._value


def _aten_compiler(kind: str, described: _Described, compile_graph: CompileGraph,
                   cached: bool = False) -> Callable[..., Any]:
    def compile_aten(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        restore_cache_setting = compat.bundle_lazy_backward_save() if cached and kind == "backward" else None
        try:
            compiled = _compile_aten(gm, example_inputs)
        except BaseException:
            if restore_cache_setting is not None:
                restore_cache_setting()
            raise
        if restore_cache_setting is None:
            return compiled
        return _after_first_call(compiled, restore_cache_setting)

    def _compile_aten(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        dynamo_graph = described()
        meta = compat.forward_metadata()
        placeholders = [node.name for node in gm.graph.nodes if node.op == "placeholder"]
        if kind == "backward":
            annotate_nodes(gm.graph.nodes, dynamo_graph.sources_by_seq_nr)
            static = _saved_static_inputs(placeholders, dynamo_graph.forward_static)
        else:
            dynamo_graph.sources_by_seq_nr.update(annotate_nodes(gm.graph.nodes))
            static = [i for i in compat.static_input_indices(meta) if i < len(placeholders)]
            dynamo_graph.forward_static = frozenset(static)
        graph = CapturedGraph(
            graph_module=gm,
            example_inputs=list(example_inputs),
            kind=kind,
            graph_id=dynamo_graph.id_stem + _GRAPH_ID_SUFFIX[kind],
            function=dynamo_graph.function,
            static_input_indices=tuple(static),
            mutated_input_indices=tuple(_written_inputs(gm)),
            num_fwd_outputs=compat.num_forward_returns(meta) if kind == "forward" else None,
            size_hints=_size_hints(gm, example_inputs),
            graph_break=dynamo_graph.graph_break,
            device=graph_device(list(example_inputs), gm),
            saved_layout_free=kind == "forward" and compat.output_strides_listened(),
        )
        traced_strides = _output_strides(gm) if kind == "forward" else None
        compiled = _boxed(compile_graph(graph))
        if traced_strides is not None:
            _report_changed_output_strides(gm, traced_strides)
        return compiled

    compile_aten.__name__ = f"fuse_all_{kind}_compiler"
    return compile_aten


def _output_strides(gm: torch.fx.GraphModule) -> list[tuple[int, ...] | None]:
    """Each output's strides as plain ints (None: not a tensor, or symbolic strides)."""
    strides: list[tuple[int, ...] | None] = []
    for arg in gm.graph.find_nodes(op="output")[0].args[0]:
        val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor) or compat.free_symbol_names([val]):
            strides.append(None)
        else:
            strides.append(tuple(int(s) for s in val.stride()))
    return strides


def _report_changed_output_strides(gm: torch.fx.GraphModule, traced: list[tuple[int, ...] | None]) -> None:
    """A compiler may give a forward's saved activations another layout (fuse_all's channels-last
    convolutions); AOTAutograd then needs their real strides for the backward's example inputs."""
    now = _output_strides(gm)
    if now != traced:
        compat.report_output_strides([s if s != t or s is None else None for s, t in zip(now, traced)]
                                     if len(now) == len(traced) else now)


def _size_hints(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> dict[str, int]:
    """Hints of the symbols this graph uses; the ShapeEnv also knows symbols Dynamo later specialized."""
    env = compat.shape_env(example_inputs)
    if not compat.backed_values(env):    # static shapes: no hint to find (walking every node's value costs)
        return {}
    values = list(example_inputs) + [node.meta.get("val") for node in gm.graph.nodes]
    return compat.backed_size_hints(env, compat.free_symbol_names(values))


def _written_inputs(gm: torch.fx.GraphModule) -> list[int]:
    """Inputs the graph itself writes (AOTAutograd keeps input mutations as `copy_` nodes where it can;
    where it cannot, the new values are extra outputs and the input is not written in the graph)."""
    position = {node: i for i, node in enumerate(gm.graph.find_nodes(op="placeholder"))}
    written = set()
    for node in gm.graph.nodes:
        if node.op == "call_function":
            for argument in compat.written_argument_positions(node.target):
                if argument < len(node.args) and node.args[argument] in position:
                    written.add(position[node.args[argument]])
    return sorted(written)


def _saved_static_inputs(placeholders: list[str], forward_static: frozenset[int]) -> list[int]:
    """Backward inputs that are parameters/buffers themselves: AOTAutograd names a forward input the
    backward keeps `primals_<k>` (1-based). Saved activations are new tensors on every step."""
    static = []
    for index, name in enumerate(placeholders):
        match = re.fullmatch(r"primals_(\d+)", name)
        if match and int(match[1]) - 1 in forward_static:
            static.append(index)
    return static


def _after_first_call(compiled: Callable[..., Any], then: Callable[[], None]) -> Callable[..., Any]:
    """`compiled` (boxed), running `then` once, when it is first called; keeps `__wrapped__` (the cache
    entry torch pickles) reachable."""
    pending = [then]

    def call(args: list) -> Any:
        if pending:
            pending.pop()()
        return compiled(args)

    call._boxed_call = True  # type: ignore[attr-defined]
    call.__wrapped__ = compiled  # type: ignore[attr-defined]
    return call


def _boxed(compiled: Callable[..., Any]) -> Callable[..., Any]:
    if getattr(compiled, "_boxed_call", False):
        return compiled

    def call(args: list) -> Any:
        return compiled(args)

    # AOTAutograd calls functions with this flag as f(list_of_args) and lets them free the inputs early.
    call._boxed_call = True  # type: ignore[attr-defined]
    return call


# ---- graph breaks -------------------------------------------------------------------------------------

def _clean_reason(text: str) -> str:
    """Dynamo's reason up to its developer-only tail ("Developer debug context", the docs link)."""
    kept = []
    for line in str(text).strip().splitlines():
        if line.strip().startswith(("Developer debug context", "For more details")):
            break
        kept.append(line.rstrip())
    reason = "\n".join(kept).strip()
    return reason if len(reason) <= _MAX_REASON_CHARS else reason[: _MAX_REASON_CHARS - 1] + "…"


def _break_entry(reason: Any) -> dict[str, Any] | None:
    stack = list(getattr(reason, "user_stack", None) or [])
    frames = [f for f in stack if is_user_file(_abspath(getattr(f, "filename", "")))]
    if not frames:
        return None
    frame = frames[-1]  # innermost: where the unsupported code is
    return {"file": _abspath(frame.filename), "line": int(frame.lineno), "reason": _clean_reason(reason.reason)}


def _abspath(file: str) -> str:
    return os.path.abspath(file) if file and not file.startswith("<") else file


def graph_breaks(function: FunctionInfo | None = None) -> list[dict[str, Any]]:
    """Dynamo's graph breaks in this process as [{file, line, reason}], deduplicated.

    Read from the list Dynamo keeps anyway (cheap; emptied by `torch.compiler.reset()`). With `function`,
    only breaks whose user stack passes through that function's lines (a break inside a helper it calls
    counts). The file/line is the innermost user frame: the unsupported call itself.
    """
    seen = set()
    breaks = []
    for reason in compat.dynamo_graph_break_reasons():
        entry = _break_entry(reason)
        if entry is None:
            continue
        if function is not None and not any(_inside(function, f) for f in getattr(reason, "user_stack", [])):
            continue
        key = (entry["file"], entry["line"], entry["reason"])
        if key not in seen:
            seen.add(key)
            breaks.append(entry)
    return breaks


def _inside(function: FunctionInfo, frame: Any) -> bool:
    last = function.last_line or function.first_line
    return _abspath(getattr(frame, "filename", "")) == function.file and function.first_line <= frame.lineno <= last

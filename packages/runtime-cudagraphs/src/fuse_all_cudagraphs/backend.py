"""``torch.compile(model, backend="fuse_all_cudagraphs")``: AOTAutograd's ATen graphs, run by torch.fx,
replayed through CUDA graphs by ``wrap``. Like torch's own ``cudagraphs`` backend, but parameters (and
inputs that stay where they are) are never copied, and every fallback says why in one line.
"""
from __future__ import annotations

import functools
import itertools
import logging
import re
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

from . import _torch_compat as compat
from .pool import GraphPool
from .wrapper import GraphedCallable, wrap

log = logging.getLogger("fuse_all.cudagraphs")

#: ``torch.compile(..., options={...})`` keys this backend understands (passed on to ``wrap``).
OPTIONS = ("on_fallback", "on_live_output", "max_graphs", "max_recaptures", "warmup_calls")

_graph_ids = itertools.count()
_pools: weakref.WeakSet[GraphPool] = weakref.WeakSet()  # every pool this backend made, for reset()


def graph_unsafe_reason(gm: torch.fx.GraphModule) -> str | None:
    """Why an ATen graph can never be captured, found before running it; None when it may be."""
    devices: dict[str, str] = {}
    for node in gm.graph.nodes:
        vals = node.meta.get("val")
        for val in vals if isinstance(vals, (list, tuple)) else [vals]:
            if isinstance(val, torch.Tensor) and val.device.type != "meta":
                devices.setdefault(val.device.type, node.name)
    if "cuda" not in devices:
        where = ", ".join(sorted(devices)) or "no device"
        return f"the graph runs on {where}; CUDA graphs need CUDA tensors"
    if len(devices) > 1:
        other = next(d for d in devices if d != "cuda")
        return (f"the graph mixes cuda with {other} tensors (e.g. '{devices[other]}'); a {other} value "
                "would be frozen into the graph")
    node = compat.first_uncapturable_node(gm)
    if node is not None:
        return f"op {node.target} ('{node.name}') cannot be captured (host sync or data-dependent size)"
    return None


def input_mutations(graph: torch.fx.Graph) -> set[int]:
    """Placeholder indices whose memory some op in the graph writes (schema alias info ``a!``)."""
    storage_inputs: dict[Any, set[int]] = {}
    mutated: set[int] = set()
    index = 0
    for node in graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor):
                storage_inputs.setdefault(compat.storage_weak_ref(val), set()).add(index)
            index += 1
            continue
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None:
            continue
        for position, argument in enumerate(schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            value = node.args[position] if position < len(node.args) else node.kwargs.get(argument.name)
            val = value.meta.get("val") if isinstance(value, torch.fx.Node) else None
            if isinstance(val, torch.Tensor):
                mutated |= storage_inputs.get(compat.storage_weak_ref(val), set())
    return mutated


def backward_static_indices(bw_gm: torch.fx.GraphModule, fw_static: Sequence[int]) -> list[int]:
    """Backward inputs that are forward parameters: AOTAutograd names them ``primals_<k>`` (1-based)."""
    fw_static_set = set(fw_static)
    static = []
    placeholders = [n for n in bw_gm.graph.nodes if n.op == "placeholder"]
    for index, node in enumerate(placeholders):
        match = re.fullmatch(r"primals_(\d+)", node.name)
        if match and int(match.group(1)) - 1 in fw_static_set:
            static.append(index)
    return static


class _ModelGraphs:
    """The graphs of one Dynamo frame: forward, backward (or inference) sharing one pool."""

    def __init__(self, num_dynamo_inputs: int, options: dict[str, Any]):
        self.num_dynamo_inputs = num_dynamo_inputs
        self.options = options
        self.pool = GraphPool()
        _pools.add(self.pool)
        self.graph_id = next(_graph_ids)
        self.fw_static: list[int] = []

    def _wrap(self, gm: torch.fx.GraphModule, inputs: Sequence[Any], static: Sequence[int],
              kind: str) -> GraphedCallable:
        return wrap(compat.make_boxed_func(gm.forward), inputs, static_input_indices=static,
                    mutated_input_indices=sorted(input_mutations(gm.graph)), pool=self.pool,
                    name=f"fuse_all_cudagraphs[{self.graph_id} {kind}]", check_input_metadata=False,
                    force_fallback=graph_unsafe_reason(gm), **self.options)

    def forward(self, gm: torch.fx.GraphModule, inputs: Sequence[Any], *, kind: str = "forward") -> Any:
        fixed = compat.num_fw_fixed_arguments(self.num_dynamo_inputs, len(inputs))
        self.fw_static = compat.fw_static_input_indices(fixed)
        return self._wrap(gm, inputs, self.fw_static, kind)

    def backward(self, gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> Any:
        return self._wrap(gm, inputs, backward_static_indices(gm, self.fw_static), "backward")


def fuse_all_cudagraphs(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Callable:
    """The Dynamo backend. ``torch.compile`` passes ``mode`` and ``options`` as keyword arguments; every
    mode captures graphs (this backend exists to do so), ``options`` may set the keys in ``OPTIONS``."""
    options = dict(kwargs.get("options") or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"fuse_all_cudagraphs: unknown option(s) {unknown}; known: {list(OPTIONS)}")
    graphs = _ModelGraphs(len(example_inputs), options)
    compiler = compat.aot_autograd(
        fw_compiler=graphs.forward,
        bw_compiler=graphs.backward,
        inference_compiler=functools.partial(graphs.forward, kind="inference"),
        # Keep input mutations inside inference graphs: replay writes them in place (or into a copied
        # input's buffer, which is copied back), instead of AOTAutograd applying them outside.
        keep_inference_input_mutations=True,
    )
    return compiler(gm, example_inputs)


def reset() -> None:
    """Retire every graph this backend captured and let the allocator free their pools (once the caller
    drops what it still holds); ``torch.compiler.reset()`` calls it."""
    for pool in list(_pools):
        pool.reset()


fuse_all_cudagraphs.reset = reset  # type: ignore[attr-defined]

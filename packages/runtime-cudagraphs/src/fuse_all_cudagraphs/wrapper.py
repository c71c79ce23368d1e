"""``wrap``: CUDA graph capture/replay around any callable on a flat list of CUDA tensors."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from . import _torch_compat as compat
from .graph import CaptureError, CapturedGraph, CudaGraphEngine
from .outputs import OutputPlan, OwnedGroup, UnsupportedOutputs
from .policy import (Action, AddressPlan, Decision, DecisionLog, InputMode, LiveGroup, SignatureState,
                     SignatureTable, describe, is_dense, resolve_live_outputs, unsafe_reason)
from .pool import GraphPool


class LiveOutputError(RuntimeError):
    """Raised with ``on_live_output="error"`` instead of overwriting an output someone still holds."""


class _Ptrs:
    """Lazy ``data_ptr`` per input index, for the hot path (only the indices asked for are computed)."""

    __slots__ = ("inputs",)

    def __init__(self, inputs: Sequence[Any]):
        self.inputs = inputs

    def __getitem__(self, i: int) -> int:
        return self.inputs[i].data_ptr()


def _versions(values: Sequence[Any]) -> list[int | None]:
    """Version counters (bumped by every in-place write); None where torch keeps none (inference tensors)."""
    versions: list[int | None] = []
    for value in values:
        try:
            versions.append(value._version if isinstance(value, torch.Tensor) else None)
        except RuntimeError:
            versions.append(None)
    return versions


class GraphedCallable:
    """The callable ``wrap`` returns: ``graphed(inputs) -> outputs`` with the boxed calling convention.

    Per distinct input signature: ``warmup_calls`` plain calls on a side stream, then a capture, then
    replays. Attributes for callers: ``decisions`` (each distinct capture/re-capture/fallback, in order),
    ``stats`` (counters), ``pool``.
    """

    def __init__(self, fn: Callable[[list[Any]], Any], example_inputs: Sequence[Any], *,
                 static_input_indices: Sequence[int] = (), mutated_input_indices: Sequence[int] = (),
                 pool: GraphPool | Any | None = None, name: str = "graph",
                 on_fallback: Callable[[str], Any] | None = None, on_live_output: str = "copy",
                 max_graphs: int = 8, max_recaptures: int = 4, warmup_calls: int = 1,
                 check_input_metadata: bool = True, force_fallback: str | None = None,
                 engine: Any = None):
        if on_live_output not in ("copy", "error"):
            raise ValueError(f"on_live_output must be 'copy' or 'error', not {on_live_output!r}")
        # AOTAutograd then calls us with one list argument. An instance attribute, because torch wraps
        # compiled backward functions with functools.wraps, which copies __dict__ but not class attributes.
        self._boxed_call = True
        self._fn = fn
        self.name = name
        self.pool = GraphPool.of(pool)
        self.pool.join(self)
        self.stats = dict.fromkeys(("calls", "plain_calls", "warmups", "captures", "replays", "input_copies"), 0)
        self._engine = engine if engine is not None else CudaGraphEngine()
        self._log = DecisionLog(name, on_fallback)
        self._table = SignatureTable(max_graphs, max_recaptures)
        self._warmup_calls = warmup_calls
        self._on_live_output = on_live_output
        self._num_inputs = len(example_inputs)
        tensor_positions = {i for i, x in enumerate(example_inputs) if isinstance(x, torch.Tensor)}
        self._static = frozenset(int(i) for i in static_input_indices if int(i) in tensor_positions)
        self._mutated = {int(i) for i in mutated_input_indices}  # written, or maybe written (unknown versions)
        self._known_written = set(self._mutated)  # declared, or seen through a version counter
        # What makes up the signature key on each call. Checked: every non-static input's metadata.
        # Trusted (check_input_metadata=False, for Dynamo/AOTAutograd graphs whose guards already pin
        # shapes, strides, dtypes and devices): only the non-tensor inputs (concrete SymInt values).
        self._key_indices = tuple(i for i in range(self._num_inputs)
                                  if i not in (self._static if check_input_metadata else tensor_positions))
        self._forced = force_fallback
        if force_fallback is not None:
            self._log.record("fallback", force_fallback)
        elif (reason := self._unsafe(example_inputs, grad_enabled=False)) is not None:
            self._log.record("fallback", reason)

    # ------------------------------------------------------------------ public
    @property
    def decisions(self) -> list[Decision]:
        return list(self._log.decisions)

    def reset(self) -> None:
        """Forget every graph and signature (the next calls warm up and capture again)."""
        for state in self._table.states.values():
            self._retire(state)
        self._table = SignatureTable(self._table.max_graphs, self._table.max_recaptures)

    def __call__(self, inputs: list[Any]) -> Any:
        self.stats["calls"] += 1
        if self._forced is not None:
            return self._run_plain(inputs)
        key = self._key(inputs)
        state = self._table.get(key)
        if state is None:
            state = self._table.add(key, self._unsafe(inputs, grad_enabled=torch.is_grad_enabled()))
            if state.plain_reason is not None:
                self._log.record("fallback", state.plain_reason)
        if state.plain_reason is not None:
            return self._run_plain(inputs)
        graph: CapturedGraph | None = state.graph
        if graph is None:
            if state.warmups < self._warmup_calls:
                state.warmups += 1
                return self._warm_up(inputs)
            return self._capture(state, inputs, self._initial_modes(inputs), None)

        plan = graph.addresses
        if not plan.pending and compat.data_ptrs_equal(inputs, plan.ptrs, plan.fixed):
            copies = plan.copies_for(_Ptrs(inputs))  # the hot path: every address where it was
        elif now_host := [i for i in plan.fixed if self._is_host_scalar(inputs[i])]:
            # made by a forward that ran without a graph this time (ATen makes attention's seed/offset on
            # the CPU then): a CPU address never "settles", and the graph must not read host memory
            return self._recapture(state, inputs, plan.modes, f"input(s) {now_host} are CPU scalars now; "
                                   "re-capturing to read them from device buffers written on every call")
        else:
            verdict = plan.classify([x.data_ptr() if isinstance(x, torch.Tensor) else None for x in inputs],
                                    self._graph_owned(inputs, plan.fixed))
            if verdict.action is Action.RECAPTURE:
                return self._recapture(state, inputs, verdict.new_modes, verdict.reason)
            if verdict.action is Action.PLAIN:
                self._log.record("fallback", verdict.reason)
                return self._run_plain(inputs)
            copies = verdict.copies

        own, later = self.pool.conflicts(graph.record)
        if own or later:
            return self._resolve_live_outputs(state, graph, inputs, own, later)
        return graph.run(self._engine, inputs, copies, self.stats)

    # ------------------------------------------------------------------ signature and safety
    def _key(self, inputs: Sequence[Any]) -> Any:
        if len(inputs) != self._num_inputs:
            return ("arity", len(inputs), tuple(describe(x) for x in inputs))
        parts: list[Any] = [torch.is_grad_enabled()]
        try:
            for i in self._key_indices:
                x = inputs[i]
                if isinstance(x, torch.Tensor):
                    parts.append((x.shape, x.stride(), x.dtype, x.device, x.requires_grad))
                else:
                    parts.append((type(x), x))
            hash(tuple(parts))
        except (RuntimeError, TypeError):  # sparse tensors have no strides; unhashable inputs
            return ("slow", tuple(repr(describe(x)) for x in inputs))
        return tuple(parts)

    def _unsafe(self, inputs: Sequence[Any], *, grad_enabled: bool) -> str | None:
        if len(inputs) != self._num_inputs:
            return f"called with {len(inputs)} inputs, wrapped with {self._num_inputs}"
        described = [describe(x) for x in inputs]
        return unsafe_reason(described, grad_enabled=grad_enabled, device_type=self._engine.device_type)

    def _initial_modes(self, inputs: Sequence[Any]) -> list[InputMode | None]:
        return [None if not isinstance(x, torch.Tensor)
                else InputMode.STATIC if i in self._static else InputMode.BORROWED
                for i, x in enumerate(inputs)]

    def _is_host_scalar(self, value: Any) -> bool:
        engine_says = getattr(self._engine, "is_host_scalar", None)  # engines without CPU scalars lack it
        return isinstance(value, torch.Tensor) and engine_says is not None and engine_says(value)

    def _modes_for_devices(self, inputs: Sequence[Any], modes: Sequence[InputMode | None]) -> list[InputMode | None]:
        """CPU scalars are read as HOST_SCALAR, whatever they were at the last capture; device tensors never."""
        result = []
        for i, (x, mode) in enumerate(zip(inputs, modes)):
            if self._is_host_scalar(x):
                mode = InputMode.HOST_SCALAR
            elif mode is InputMode.HOST_SCALAR:
                mode = InputMode.STATIC if i in self._static else InputMode.BORROWED
            result.append(mode)
        return result

    # ------------------------------------------------------------------ the four ways to run a call
    def _run_plain(self, inputs: list[Any]) -> Any:
        self.stats["plain_calls"] += 1
        return self._fn(inputs)

    def _warm_up(self, inputs: list[Any]) -> Any:
        before = _versions(inputs)
        outputs = self._engine.warm_up(self._fn, inputs, _device_index(inputs))
        self._note_mutations(before, inputs)
        self.stats["warmups"] += 1
        return outputs

    def _capture(self, state: SignatureState, inputs: list[Any], modes: Sequence[InputMode | None],
                 recapture_reason: str | None) -> Any:
        # Devices are checked on a signature's first call only, and AOTAutograd's saved tensors change
        # device when the graph making them is captured (attention's seed/offset): check them again here.
        modes = self._modes_for_devices(inputs, modes)
        if (unsafe := self._unsafe(inputs, grad_enabled=torch.is_grad_enabled())) is not None:
            self._log.record("fallback", unsafe)
            return self._run_plain(inputs)  # no graph for now; the next call of this signature tries again
        capture_inputs = list(inputs)
        buffers: dict[int, torch.Tensor] = {}
        host_scalars: dict[int, torch.Tensor] = {}
        for i, mode in enumerate(modes):
            if mode is InputMode.COPIED:
                buffers[i] = capture_inputs[i] = self._engine.new_buffer(inputs[i])
            elif mode is InputMode.HOST_SCALAR:
                buffer = self._engine.new_device_scalar(inputs[i], _device_index(inputs))
                host_scalars[i] = capture_inputs[i] = buffer.fill_(inputs[i])
        before = _versions(capture_inputs)
        try:
            handle, outputs = self._engine.capture(self._fn, capture_inputs, self.pool, _device_index(inputs))
            after = _versions(capture_inputs)  # unknown (inference tensors): the declared mutations tell
            written = [i for i in host_scalars
                       if i in self._known_written or None not in (before[i], after[i]) and after[i] != before[i]]
            if written:
                del handle, outputs
                state.plain_reason = (f"the graph writes CPU scalar input(s) {written}; a replay would write the "
                                      "graph's device copy, not the caller's tensor; this input signature runs "
                                      "plainly from now on")
                self._log.record("fallback", state.plain_reason)
                return self._run_plain(inputs)
            self._note_mutations(before, capture_inputs)
            output_plan = OutputPlan(outputs, capture_inputs, state.copied_out, state.sticky_copied_out)
        except (CaptureError, UnsupportedOutputs) as exc:
            state.plain_reason = f"capture failed: {exc}; this input signature runs plainly from now on"
            self._log.record("fallback", state.plain_reason)
            return self._run_plain(inputs)
        copyable = [isinstance(x, torch.Tensor) and i not in host_scalars and is_dense(x.shape, x.stride())
                    for i, x in enumerate(capture_inputs)]
        borrowed = [i for i, mode in enumerate(modes) if mode is InputMode.BORROWED]
        addresses = AddressPlan(modes, [x.data_ptr() if isinstance(x, torch.Tensor) and i not in host_scalars
                                        else None for i, x in enumerate(capture_inputs)], copyable,
                                self._graph_owned(capture_inputs, borrowed))
        del outputs, capture_inputs  # our static output tensors must be the only references left ...
        output_plan.measure_baselines()  # ... when we count them
        record = self.pool.register(self.name, output_plan)
        copy_back = [i for i in buffers if i in self._mutated]
        state.graph = CapturedGraph(self.name, handle, addresses, output_plan, buffers, copy_back, record,
                                    host_scalars)
        self.stats["captures"] += 1
        if recapture_reason is not None:
            self._log.record("recapture", recapture_reason)
        else:
            static = sum(m is InputMode.STATIC for m in modes)
            self._log.record("capture", f"graph {self.stats['captures']} captured on cuda:{_device_index(inputs)}"
                                        f" ({static} static inputs, {len(addresses.fixed) - static} read in "
                                        f"place, {len(buffers)} copied, {len(host_scalars)} CPU scalars)")
        return state.graph.run(self._engine, inputs, tuple(buffers), self.stats)

    def _recapture(self, state: SignatureState, inputs: list[Any], modes: Sequence[InputMode | None],
                   reason: str) -> Any:
        allowed = self._table.may_recapture(state)
        if state.graph is not None:
            # Results of the retiring graph that the caller still holds (the previous loss during
            # `loss = f(x)`) are kept across calls: the new graph hands such outputs out as copies.
            for group in state.graph.outputs.live_groups():
                group.mark_copied_out()
        self._retire(state)
        if not allowed:
            self._log.record("fallback", str(state.plain_reason))
            return self._run_plain(inputs)
        return self._capture(state, inputs, modes, reason)

    def _resolve_live_outputs(self, state: SignatureState, graph: CapturedGraph, inputs: list[Any],
                              own: list[OwnedGroup], later: list[tuple[str, OwnedGroup]]) -> Any:
        read_now = {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
        consumed = [group.storage_ptr in read_now for _, group in later]
        verdict = resolve_live_outputs(
            graph.name, [LiveGroup(graph.name, tuple(g.outputs), g.copied_out) for g in own],
            [LiveGroup(name, tuple(g.outputs), g.copied_out, used) for (name, g), used in zip(later, consumed)],
            self._on_live_output)
        if verdict.action is Action.ERROR:
            raise LiveOutputError(verdict.reason)
        for group in own:
            group.mark_copied_out()
        for (_, group), used in zip(later, consumed):
            if not used:  # held across calls by the caller (.grad kept across the next forward): copies
                group.mark_copied_out(sticky=True)
        return self._recapture(state, inputs, graph.addresses.modes, verdict.reason)

    # ------------------------------------------------------------------ helpers
    def _retire(self, state: SignatureState) -> None:
        if state.graph is not None:
            self.pool.retire(state.graph.record)
            state.graph = None

    def _graph_owned(self, inputs: Sequence[Any], indices: Sequence[int]) -> frozenset[int]:
        owned = GraphPool.owned_anywhere()
        return frozenset(i for i in indices if inputs[i].untyped_storage().data_ptr() in owned)

    def _note_mutations(self, before: Sequence[int | None], inputs: Sequence[Any]) -> None:
        # Unknown versions (inference tensors) count as written: copying back is then merely redundant.
        for i, (old, new) in enumerate(zip(before, _versions(inputs))):
            if isinstance(inputs[i], torch.Tensor) and (old is None or new is None or new != old):
                self._mutated.add(i)
                if None not in (old, new):
                    self._known_written.add(i)


def _device_index(inputs: Sequence[Any]) -> int:
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    for x in sorted(tensors, key=lambda t: t.device.type == "cpu"):  # CPU scalars say nothing about it
        return x.device.index if x.device.index is not None else 0
    return 0


def wrap(fn: Callable[[list[Any]], Any], example_inputs: Sequence[Any], *,
         static_input_indices: Sequence[int] = (), mutated_input_indices: Sequence[int] = (),
         pool: GraphPool | Any | None = None, name: str = "graph",
         on_fallback: Callable[[str], Any] | None = None, on_live_output: str = "copy",
         max_graphs: int = 8, max_recaptures: int = 4, warmup_calls: int = 1,
         check_input_metadata: bool = True, force_fallback: str | None = None) -> GraphedCallable:
    """Run ``fn(inputs) -> tuple/list of tensors`` through CUDA graphs; plain execution where unsafe.

    fn: takes one flat list (tensors, ints, floats, bools, None), like AOTAutograd's boxed functions;
        wrap ``f(*args)`` as ``lambda args: f(*args)``. May clear the list it is given. Tensors are CUDA
        tensors or 0-dim CPU tensors (read by the graph from a device buffer written on every call).
    example_inputs: real or fake tensors and (Sym)ints; only their number and metadata are read.
    static_input_indices: parameters and buffers. Read in place, never copied; if one moves, re-capture.
    mutated_input_indices: inputs the function writes into (also detected from version counters during
        warm-up and capture). Only copied inputs need it: their buffer is copied back after each replay.
    pool: a GraphPool (or a ``torch.cuda.graph_pool_handle()``) shared with other graphs of the model,
        e.g. forward and backward; default a private one.
    name: shown in log lines and decisions.
    on_fallback: called once with each distinct one-line reason for plain execution.
    on_live_output: "copy" (default) or "error": what to do when a replay would overwrite an output the
        caller still holds (see README, "Outputs").
    max_graphs: distinct input signatures that get a graph; further ones run plainly.
    max_recaptures: re-captures per signature (inputs or outputs changing place); then plain.
    warmup_calls: plain calls on a side stream per signature before it is captured.
    check_input_metadata: compare every non-static tensor's shape/stride/dtype/device on each call; pass
        False when guards upstream (Dynamo, AOTAutograd) already pin them, to save ~1 us per input.
    force_fallback: a reason to never capture (e.g. the compiler found an op that cannot be captured).
    """
    return GraphedCallable(fn, example_inputs, static_input_indices=static_input_indices,
                           mutated_input_indices=mutated_input_indices, pool=pool, name=name,
                           on_fallback=on_fallback, on_live_output=on_live_output, max_graphs=max_graphs,
                           max_recaptures=max_recaptures, warmup_calls=warmup_calls,
                           check_input_metadata=check_input_metadata, force_fallback=force_fallback)

"""The capture policy as plain Python: what is safe to capture, which inputs are copied, when to re-capture.

Nothing here calls CUDA, so every rule is unit-tested on a CPU-only machine. ``wrapper.py`` feeds these
objects data pointers and tensor metadata and carries out what they decide.
"""
from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("fuse_all.cudagraphs")

SCALAR_TYPES = (int, float, bool, type(None))


class InputMode(enum.Enum):
    """How a captured graph gets at one tensor input."""

    STATIC = "static"  # parameter/buffer: read in place; if it ever moves, re-capture (never copied)
    BORROWED = "borrowed"  # read in place while the caller passes it at the captured address
    COPIED = "copied"  # the graph reads our own buffer; the caller's tensor is copied in before replay
    # A 0-dim CPU tensor beside device tensors (attention's philox seed/offset, saved by a forward that ran
    # without a graph). Captured as it is, its value would be frozen into the graph (ATen reads CPU scalars
    # on the host at launch), or worse, its host address handed to a kernel (the attention backward with
    # dropout reads seed/offset through device pointers while capturing). So the graph reads a 0-dim
    # buffer on the device instead, and each call writes the caller's value into it (fill_: the value
    # travels as a kernel argument, no host synchronisation).
    HOST_SCALAR = "cpu scalar"


class Action(enum.Enum):
    REPLAY = "replay"
    PLAIN = "plain"  # run the callable without the graph for this call
    RECAPTURE = "recapture"
    ERROR = "error"


@dataclass(frozen=True)
class Verdict:
    action: Action
    reason: str = ""
    copies: tuple[int, ...] = ()  # COPIED inputs whose data must be copied in before the replay
    new_modes: tuple[InputMode | None, ...] = ()  # for RECAPTURE


@dataclass(frozen=True)
class TensorMeta:
    """What the policy needs to know about one tensor input (built by ``describe``)."""

    device_type: str
    device_index: int | None
    dtype: Any
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    strided: bool = True
    requires_grad: bool = False


def describe(value: Any) -> Any:
    """TensorMeta for tensors (real or fake); scalars and other values are returned unchanged."""
    import torch

    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return 0  # a symbolic size at compile time: a concrete scalar at run time
    if not isinstance(value, torch.Tensor):
        return value
    strided = value.layout == torch.strided
    return TensorMeta(
        device_type=value.device.type,
        device_index=value.device.index,
        dtype=value.dtype,
        shape=tuple(value.shape),
        stride=tuple(value.stride()) if strided else (),
        strided=strided,
        requires_grad=value.requires_grad,
    )


def is_host_scalar(value: Any, device_type: str = "cuda") -> bool:
    """A 0-dim CPU tensor among the inputs of a graph running on another device (see InputMode.HOST_SCALAR)."""
    return (isinstance(value, TensorMeta) and value.device_type == "cpu" and device_type != "cpu"
            and value.shape == () and value.strided)


def unsafe_reason(inputs: Sequence[Any], *, grad_enabled: bool, device_type: str = "cuda") -> str | None:
    """Why a call with these (described) inputs must run plainly, or None when capture is allowed."""
    devices = set()
    for i, value in enumerate(inputs):
        if isinstance(value, TensorMeta):
            if not value.strided:
                return f"input {i} is not a strided tensor; only dense tensors can be captured"
            if is_host_scalar(value, device_type) and not (grad_enabled and value.requires_grad):
                continue  # read from a device buffer holding its value (InputMode.HOST_SCALAR)
            if value.device_type != device_type:
                return f"input {i} is on {value.device_type}; CUDA graphs need {device_type} tensors"
            if grad_enabled and value.requires_grad:
                return (f"input {i} requires grad while grad mode is on; a replayed graph records no "
                        "autograd history (compile with AOTAutograd, or call under torch.no_grad())")
            devices.add(value.device_index)
        elif not isinstance(value, SCALAR_TYPES):
            return f"input {i} is a {type(value).__name__}; only tensors and int/float/bool/None are supported"
    if not devices:
        return f"no {device_type} tensor among the inputs; nothing tells which device to capture on"
    if len(devices) > 1:
        return f"inputs are on several {device_type} devices ({sorted(devices, key=str)}); a graph has one"
    return None


def is_dense(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """True when no two elements share memory and there are no gaps: such a tensor can be copied into."""
    expected = 1
    for size, step in sorted(zip(shape, stride), key=lambda pair: pair[1]):
        if size == 1:
            continue
        if step != expected:
            return False
        expected *= size
    return True


class AddressPlan:
    """Where one captured graph reads each tensor input, and what to do when a call's inputs live elsewhere.

    ``ptrs[i]`` is the address the graph reads for input ``i``: the caller's tensor at capture time for
    STATIC and BORROWED inputs, our own buffer for COPIED ones. A BORROWED input seen at another address:
      * now in memory a captured graph owns (an output of another graph, e.g. the saved tensors of a
        re-captured forward graph): it will stay there; re-capture to read it there;
      * it was in graph-owned memory at capture but is not now: its producer graph ran plainly for this
        call (or handed out a copy). Run plainly until the evidence is in: seen twice in a row at one new
        address, re-capture to read it there; ``MOVES_BEFORE_COPY_OWNED`` calls each at yet another
        address, re-capture with a buffer it is copied into on every call. The producer replays again
        soon, and reading its outputs in place beats copying them forever;
      * a caller's tensor (not graph-owned at capture): callers that pass a fresh tensor on every call
        (the next batch, the backward graph's incoming gradients) are the rule, so it is re-captured at
        once with a buffer it is copied into on every call (one ``_foreach_copy_`` launch for all of them),
        never run plainly. Inputs that cannot be copied into (expanded, overlapping) are read in place
        where they settle instead, as above.
    """

    MOVES_BEFORE_COPY = 3
    MOVES_BEFORE_COPY_OWNED = 8

    def __init__(self, modes: Sequence[InputMode | None], ptrs: Sequence[int | None],
                 copyable: Sequence[bool], owned_at_capture: frozenset[int] = frozenset()):
        self.modes = tuple(modes)
        self.ptrs = list(ptrs)
        self.copyable = tuple(copyable)
        self.owned_at_capture = owned_at_capture
        self.patience = [self.MOVES_BEFORE_COPY_OWNED if i in owned_at_capture else self.MOVES_BEFORE_COPY
                         for i in range(len(self.modes))]
        self.fixed = [i for i, m in enumerate(self.modes) if m in (InputMode.STATIC, InputMode.BORROWED)]
        self.copied = [i for i, m in enumerate(self.modes) if m is InputMode.COPIED]
        # BORROWED input -> (address at the last call, consecutive calls it was away from ptrs[i])
        self.pending: dict[int, tuple[int, int]] = {}

    def copies_for(self, ptrs: Sequence[int | None]) -> tuple[int, ...]:
        # Equal only when the caller hands us our own buffer back; otherwise the data has to come in.
        return tuple(i for i in self.copied if ptrs[i] != self.ptrs[i])

    def classify(self, ptrs: Sequence[int | None], graph_owned: frozenset[int] = frozenset()) -> Verdict:
        """``graph_owned``: indices of inputs that now sit in memory a captured graph writes."""
        static_moved, unsure, settled, fresh, moving = [], [], [], [], []
        for i in self.fixed:
            if ptrs[i] == self.ptrs[i]:
                self.pending.pop(i, None)
                continue
            if self.modes[i] is InputMode.STATIC:
                static_moved.append(i)
                continue
            last, moves = self.pending.get(i, (None, 0))
            if i in graph_owned:
                settled.append(i)
            elif self.copyable[i] and i not in self.owned_at_capture:
                fresh.append(i)
            elif ptrs[i] == last:
                settled.append(i)
            elif moves + 1 >= self.patience[i]:
                (moving if self.copyable[i] else settled).append(i)
            else:
                unsure.append(i)
            self.pending[i] = (ptrs[i], moves + 1)  # type: ignore[assignment]
        if static_moved or settled or fresh or moving:
            modes = list(self.modes)
            for i in fresh + moving:
                modes[i] = InputMode.COPIED
            if static_moved:
                reason = f"static input(s) {static_moved} moved to a new address; re-capturing to read them there"
            elif fresh:
                reason = (f"input(s) {fresh} moved since capture (a new tensor on each call); re-capturing with "
                          "static buffers they are copied into")
            elif moving:
                reason = (f"input(s) {moving} move on every call; re-capturing with static buffers they are "
                          "copied into")
            else:
                reason = f"input(s) {settled} moved and stayed at the new address; re-capturing to read them there"
            return Verdict(Action.RECAPTURE, reason, new_modes=tuple(modes))
        if unsure:
            return Verdict(Action.PLAIN, f"input(s) {unsure} moved since capture; running plainly until they "
                                         "settle at one address or prove to move on every call")
        return Verdict(Action.REPLAY, copies=self.copies_for(ptrs))


@dataclass
class LiveGroup:
    """Outputs (sharing one storage) of a graph, handed out earlier and still referenced by someone."""

    graph_name: str
    outputs: tuple[int, ...]
    was_copied_out: bool  # already marked for copy-out: the live reference is an older one
    consumed: bool = False  # an input of this very call (the backward graph reading the saved tensors)


def resolve_live_outputs(graph_name: str, own: Sequence[LiveGroup], later: Sequence[LiveGroup],
                         on_live_output: str) -> Verdict:
    """What to do when replaying ``graph_name`` would overwrite memory the caller can still see.

    ``own``: this graph's outputs from its last replay. ``later``: outputs of graphs captured after it
    into the same pool; its temporaries may have been handed to them, so its replay can clobber them.
    With "copy" the graph is retired and re-captured: the caller keeps the memory it holds, and the new
    graph cannot be placed over memory that is alive. The held outputs are copied out on every later
    hand-out (the wrapper marks them), so a loop that keeps results across calls (``loss = f(x)`` holds the
    previous loss during the call; ``.grad`` kept across the next forward) settles after one re-capture
    and never runs plainly.
    """
    if not own and not later:
        return Verdict(Action.REPLAY)
    if not own and all(group.consumed for group in later):
        # Nobody holds them but this call, which reads them: e.g. the forward graph was re-captured after
        # the backward graph, and the saved tensors it wrote may lie in the backward graph's temporaries.
        return Verdict(Action.RECAPTURE, f"inputs of this call are outputs of '{later[0].graph_name}', captured "
                                         f"later into the same pool; re-capturing '{graph_name}' so that its "
                                         "temporaries cannot lie under them")
    later = [group for group in later if not group.consumed]
    first = (own or later)[0]
    where = f"output(s) {list(first.outputs)} of '{first.graph_name}'"
    if on_live_output == "error":
        return Verdict(Action.ERROR, (
            f"{where} from an earlier call are still referenced, and replaying '{graph_name}' would "
            "overwrite them. Drop them (del out) or clone them (out = out.clone()) before the next call, or "
            "wrap with on_live_output='copy' to let the wrapper copy such outputs out."))
    if not own:
        return Verdict(Action.RECAPTURE, f"{where} (captured later into the same pool) are still referenced; "
                                         f"re-capturing '{graph_name}' so its replay cannot overwrite them; "
                                         f"'{first.graph_name}' copies them out from now on")
    if any(group.was_copied_out for group in own):
        return Verdict(Action.RECAPTURE, f"{where} are still referenced long after they were handed out; "
                                         "re-capturing so the graph no longer writes into them")
    return Verdict(Action.RECAPTURE, f"{where} from an earlier call are still referenced; re-capturing so the "
                                     "graph no longer writes into them; they are copied out from now on")


@dataclass(frozen=True)
class Decision:
    kind: str  # "capture" | "recapture" | "fallback"
    reason: str


class DecisionLog:
    """Every distinct decision once: kept in order, logged as one line, fallbacks passed to a callback."""

    def __init__(self, name: str, on_fallback: Callable[[str], Any] | None = None):
        self.name = name
        self.on_fallback = on_fallback
        self.decisions: list[Decision] = []
        self._seen: set[Decision] = set()

    def record(self, kind: str, reason: str) -> bool:
        decision = Decision(kind, " ".join(reason.split()))  # one line, whatever the reason contained
        if decision in self._seen:
            return False
        self._seen.add(decision)
        self.decisions.append(decision)
        if kind == "fallback":
            log.warning("%s: running plainly: %s", self.name, decision.reason)
            if self.on_fallback is not None:
                self.on_fallback(decision.reason)
        else:
            log.info("%s: %s: %s", self.name, kind, decision.reason)
        return True


@dataclass
class SignatureState:
    """Everything known about calls with one input signature."""

    warmups: int = 0
    graph: Any = None
    plain_reason: str | None = None
    recaptures: int = 0
    copied_out: set[int] = field(default_factory=set)  # output indices cloned on every hand-out
    sticky_copied_out: set[int] = field(default_factory=set)  # ... and never handed out as aliases again


class SignatureTable:
    """Input signature -> SignatureState, with the limits on how many graphs one callable may capture."""

    def __init__(self, max_graphs: int, max_recaptures: int):
        self.max_graphs = max_graphs
        self.max_recaptures = max_recaptures
        self.states: dict[Any, SignatureState] = {}
        self._with_graph_budget = 0

    def get(self, key: Any) -> SignatureState | None:
        return self.states.get(key)

    def add(self, key: Any, unsafe: str | None) -> SignatureState:
        """A new signature: plain for good when unsafe or over the limit, else it will be captured."""
        state = SignatureState(plain_reason=unsafe)
        if unsafe is None:
            if self._with_graph_budget >= self.max_graphs:
                state.plain_reason = (f"{len(self.states) + 1} distinct input signatures (shapes, strides, "
                                      f"int inputs) exceed the limit of {self.max_graphs} graphs")
            else:
                self._with_graph_budget += 1
        self.states[key] = state
        return state

    def may_recapture(self, state: SignatureState) -> bool:
        if state.recaptures >= self.max_recaptures:
            state.plain_reason = (f"re-capture limit ({self.max_recaptures}) reached for one input signature; "
                                  "its inputs or outputs keep changing place")
            return False
        state.recaptures += 1
        return True

"""A CPU stand-in for the CUDA graph engine, so the whole wrap() policy runs on a machine without a GPU.

Like a real CUDA graph, a FakeGraph remembers *addresses*, not tensors: a replay reads the inputs at the
addresses seen during capture and writes its results into the memory of the captured outputs. So a
policy bug (reading a moved input, overwriting an output somebody holds) shows up as wrong numbers here.
"""
from __future__ import annotations

import ctypes
import logging

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef

from fuse_all_cudagraphs import CaptureError, GraphedCallable


def at_address(ptr: int, shape, stride, dtype) -> torch.Tensor:
    """A tensor over raw memory that does not own it (no reference to any storage), like a graph's view."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    span = sum((n - 1) * s for n, s in zip(shape, stride)) + 1 if all(shape) else 0
    raw = (ctypes.c_char * max(span * itemsize, itemsize)).from_address(ptr)
    return torch.frombuffer(raw, dtype=torch.uint8).view(dtype).as_strided(shape, stride)


def _version_or_none(t: torch.Tensor):
    try:
        return t._version
    except RuntimeError:  # an inference tensor
        return None


def _layout(t: torch.Tensor):
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)


class FakeGraph:
    def __init__(self, fn, inputs, outputs, baked=frozenset()):
        self.fn = fn
        # baked: inputs whose value (not address) the graph keeps, as a CUDA graph keeps the value of a CPU
        # scalar that ATen read on the host at capture
        self.inputs = [("value", x.clone()) if i in baked else _layout(x) if isinstance(x, torch.Tensor)
                       else ("value", x) for i, x in enumerate(inputs)]
        outs = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
        self.outputs = [_layout(o) if isinstance(o, torch.Tensor) else None for o in outs]
        # Memory the graph itself allocates (in the pool): outputs that are not views of an input.
        input_storages = {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
        self.output_storages = [StorageWeakRef(o.untyped_storage()) for o in outs if isinstance(o, torch.Tensor)
                                and o.untyped_storage().data_ptr() not in input_storages]

    def clobber_outputs(self):
        """What a graph captured earlier into the same pool may do to this one's outputs: its temporaries
        may lie under them, so its replay overwrites them (here with NaN, the worst case)."""
        for weak in self.output_storages:
            if not weak.expired():  # memory the caller or the wrapper still holds; freed memory is not ours
                storage = torch.UntypedStorage._new_with_weak_ptr(weak.cdata)
                at_address(storage.data_ptr(), (storage.nbytes(),), (1,), torch.uint8).fill_(0xFF)
                del storage  # all-ones bytes: NaN in every float dtype

    def replay(self):
        inputs = [x[1] if x[0] == "value" else at_address(*x) for x in self.inputs]
        results = self.fn(inputs)
        results = [results] if isinstance(results, torch.Tensor) else list(results)
        for where, value in zip(self.outputs, results):
            if where is not None:
                at_address(*where).copy_(value)


class FakeEngine:
    """Warm-up runs the function; capture runs it but undoes its input writes (a real capture executes
    nothing); replay re-runs it over the captured addresses."""

    device_type = "cpu"

    def __init__(self, fail_capture: str | None = None, clobber: bool = False, host_scalars: bool = False):
        self.fail_capture = fail_capture
        self.clobber = clobber  # model a shared pool's worst case: see FakeGraph.clobber_outputs
        # model CPU scalars beside device tensors (all are CPU tensors here): 0-dim tensors play the CPU
        # scalars, whose value a capture keeps; the others play device tensors, read at their address
        self.host_scalars = host_scalars
        self.device_scalars: set[StorageWeakRef] = set()
        self.capturing = False
        self.captures = 0
        self.replays = 0
        self.capture_order: dict[int, list[FakeGraph]] = {}  # id(pool) -> its graphs in capture order

    def warm_up(self, fn, inputs, device_index):
        return fn(list(inputs))

    def capture(self, fn, inputs, pool, device_index):
        if self.fail_capture:
            raise CaptureError(self.fail_capture)
        snapshots = [(x, _version_or_none(x), x.clone()) for x in inputs if isinstance(x, torch.Tensor)]
        self.capturing = True  # what torch.cuda.is_current_stream_capturing() would say
        try:
            outputs = fn(list(inputs))
        finally:
            self.capturing = False
        for tensor, version, saved in snapshots:
            # inference tensors keep no version counter: compare contents instead
            if (tensor._version != version) if version is not None else not torch.equal(tensor, saved):
                with torch.no_grad():
                    tensor.copy_(saved)
        self.captures += 1
        baked = {i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and self.is_host_scalar(x)}
        graph = FakeGraph(fn, inputs, outputs, baked)
        self.capture_order.setdefault(id(pool), []).append(graph)
        graph.pool_order = self.capture_order[id(pool)]
        return graph, outputs

    def replay(self, handle):
        self.replays += 1
        if self.clobber:
            order = handle.pool_order
            for later in order[order.index(handle) + 1:]:
                later.clobber_outputs()
        handle.replay()

    def is_host_scalar(self, value):
        if not self.host_scalars or value.dim() != 0:
            return False
        self.device_scalars = {weak for weak in self.device_scalars if not weak.expired()}
        return StorageWeakRef(value.untyped_storage()) not in self.device_scalars

    def plays_device_scalar(self, tensor):
        """Let a 0-dim tensor play a device tensor (views of it too): read at its address, never baked."""
        self.device_scalars.add(StorageWeakRef(tensor.untyped_storage()))
        return tensor

    def new_device_scalar(self, like, device_index):
        return self.plays_device_scalar(torch.zeros((), dtype=like.dtype))

    def new_buffer(self, like):
        # zeros, not garbage: our capture executes the function (a real one does not), and garbage class
        # indices would fail an index op; the replay right after the capture copies the real data in
        return torch.zeros_like(like).as_strided(tuple(like.shape), tuple(like.stride()))


@pytest.fixture
def engine():
    return FakeEngine()


@pytest.fixture
def graphed(engine):
    """graphed(fn, example_inputs, **wrap_options) -> a GraphedCallable running on the fake engine."""

    def make(fn, example_inputs, **options):
        return GraphedCallable(fn, example_inputs, engine=engine, **options)

    return make


@pytest.fixture
def fallback_log(caplog):
    caplog.set_level(logging.INFO, logger="fuse_all.cudagraphs")
    return caplog


@pytest.fixture
def clobbering_engine():
    return FakeEngine(clobber=True)


@pytest.fixture
def host_scalar_engine():
    """0-dim tensors play CPU scalars beside device tensors: a capture keeps their value (FakeEngine)."""
    return FakeEngine(host_scalars=True)


@pytest.fixture
def fake_backend(monkeypatch, clobbering_engine):
    """The fuse_all_cudagraphs torch.compile backend on CPU tensors, its graphs on a clobbering FakeEngine
    (AOTAutograd's real forward/backward calling pattern, a shared pool's worst case). Returns the list
    of GraphedCallables it makes, in order."""
    import fuse_all_cudagraphs.backend as backend_module

    engine = clobbering_engine
    made: list[GraphedCallable] = []

    def fake_wrap(fn, example_inputs, **options):
        made.append(GraphedCallable(fn, example_inputs, engine=engine, **options))
        return made[-1]

    monkeypatch.setattr(backend_module, "wrap", fake_wrap)
    monkeypatch.setattr(backend_module, "graph_unsafe_reason", lambda gm: None)  # CPU graphs count as capturable
    torch.compiler.reset()
    yield made
    torch.compiler.reset()

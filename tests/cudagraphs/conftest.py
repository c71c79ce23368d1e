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

from fuse_all_cudagraphs import CaptureError, GraphedCallable


def at_address(ptr: int, shape, stride, dtype) -> torch.Tensor:
    """A tensor over raw memory that does not own it (no reference to any storage), like a graph's view."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    span = sum((n - 1) * s for n, s in zip(shape, stride)) + 1 if all(shape) else 0
    raw = (ctypes.c_char * max(span * itemsize, itemsize)).from_address(ptr)
    return torch.frombuffer(raw, dtype=torch.uint8).view(dtype).as_strided(shape, stride)


def _layout(t: torch.Tensor):
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)


class FakeGraph:
    def __init__(self, fn, inputs, outputs):
        self.fn = fn
        self.inputs = [_layout(x) if isinstance(x, torch.Tensor) else ("value", x) for x in inputs]
        outs = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
        self.outputs = [_layout(o) if isinstance(o, torch.Tensor) else None for o in outs]

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

    def __init__(self, fail_capture: str | None = None):
        self.fail_capture = fail_capture
        self.captures = 0
        self.replays = 0

    def warm_up(self, fn, inputs, device_index):
        return fn(list(inputs))

    def capture(self, fn, inputs, pool, device_index):
        if self.fail_capture:
            raise CaptureError(self.fail_capture)
        snapshots = [(x, x._version, x.clone()) for x in inputs if isinstance(x, torch.Tensor)]
        outputs = fn(list(inputs))
        for tensor, version, saved in snapshots:
            if tensor._version != version:
                with torch.no_grad():
                    tensor.copy_(saved)
        self.captures += 1
        return FakeGraph(fn, inputs, outputs), outputs

    def replay(self, handle):
        self.replays += 1
        handle.replay()

    def new_buffer(self, like):
        return torch.empty_strided(tuple(like.shape), tuple(like.stride()), dtype=like.dtype)


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

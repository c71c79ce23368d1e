"""The only module that talks to CUDA: warm-up, capture, replay.

``CudaGraphEngine`` is what ``GraphedCallable`` uses by default; the unit tests substitute an engine that
"captures" by running the function on CPU tensors and "replays" by writing fresh results into the captured
outputs, which exercises the whole policy without a GPU.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from . import _torch_compat as compat
from .pool import GraphPool


class CaptureError(Exception):
    """Capturing failed (a synchronising op, an uncapturable call...); the message is a one-line reason."""


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip().rstrip(":")


class CudaGraphEngine:
    """Warm-up and capture on a side stream (as torch does: lazy initialisation, e.g. cuBLAS workspaces,
    then happens for that stream outside capture), replay on the caller's current stream."""

    device_type = "cuda"

    def __init__(self) -> None:
        self._streams: dict[int, torch.cuda.Stream] = {}

    def _side_stream(self, device_index: int) -> torch.cuda.Stream:
        stream = self._streams.get(device_index)
        if stream is None:
            stream = self._streams[device_index] = torch.cuda.Stream(device=device_index)
        return stream

    def warm_up(self, fn: Callable[[list[Any]], Any], inputs: Sequence[Any], device_index: int) -> Any:
        current = torch.cuda.current_stream(device_index)
        side = self._side_stream(device_index)
        # Every use of the side stream starts by waiting for the caller's stream, and the caller's stream
        # waits for it afterwards: memory freed on either side is never reused while the other still uses it.
        side.wait_stream(current)
        with torch.cuda.device(device_index), torch.cuda.stream(side):
            outputs = fn(list(inputs))
        current.wait_stream(side)
        return outputs

    def capture(self, fn: Callable[[list[Any]], Any], inputs: Sequence[Any], pool: GraphPool,
                device_index: int) -> tuple[Any, Any]:
        """Record ``fn(inputs)`` into a new graph; nothing executes. Raises CaptureError."""
        torch.cuda.synchronize(device_index)  # nothing of ours in flight while the pool is rearranged
        graph = torch.cuda.CUDAGraph()
        current = torch.cuda.current_stream(device_index)
        side = self._side_stream(device_index)
        side.wait_stream(current)
        failure: BaseException | None = None
        outputs = None
        with torch.cuda.device(device_index), torch.cuda.stream(side):
            try:
                compat.capture_begin(graph, pool.handle)
            except Exception as exc:
                raise CaptureError(f"capture could not start: {one_line(exc)}") from exc
            try:
                outputs = fn(list(inputs))
            except Exception as exc:
                failure = exc
            try:
                graph.capture_end()  # always end, so the stream leaves capture mode
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            # A failed capture can leave the allocator routing this stream's allocations into the pool:
            # tell it to stop, and never use that stream again.
            compat.stop_allocating_to_pool(device_index, pool.handle)
            self._streams.pop(device_index, None)
            try:
                torch.cuda.synchronize(device_index)
            except Exception:
                pass
            raise CaptureError(one_line(failure)) from failure
        current.wait_stream(side)
        return graph, outputs

    def replay(self, handle: Any) -> None:
        handle.replay()

    def is_host_scalar(self, value: torch.Tensor) -> bool:
        """A 0-dim CPU tensor (policy.InputMode.HOST_SCALAR)."""
        return value.device.type == "cpu" and value.dim() == 0 and value.layout == torch.strided

    def new_device_scalar(self, like: torch.Tensor, device_index: int) -> torch.Tensor:
        """The device buffer a graph reads in place of the CPU scalar ``like``."""
        return torch.empty((), dtype=like.dtype, device=torch.device("cuda", device_index))

    def new_buffer(self, like: torch.Tensor) -> torch.Tensor:
        return torch.empty_strided(tuple(like.shape), tuple(like.stride()), dtype=like.dtype, device=like.device)


class CapturedGraph:
    """One captured graph of a GraphedCallable, for one input signature."""

    def __init__(self, name: str, handle: Any, addresses: Any, outputs: Any, buffers: dict[int, torch.Tensor],
                 copy_back: Sequence[int], record: Any, host_scalars: dict[int, torch.Tensor] | None = None):
        self.name = name
        self.handle = handle
        self.addresses = addresses  # policy.AddressPlan
        self.outputs = outputs  # outputs.OutputPlan
        self.buffers = buffers  # COPIED input index -> our static buffer
        self.copy_back = tuple(copy_back)  # COPIED inputs the graph writes: copied back to the caller's tensor
        self.record = record  # this graph's entry in its GraphPool
        self.host_scalars = host_scalars or {}  # CPU scalar input index -> the 0-dim device buffer read instead

    def run(self, engine: Any, inputs: Sequence[Any], copies: Sequence[int], stats: dict[str, int]) -> Any:
        if copies:
            dst = [self.buffers[i] for i in copies]
            src = [inputs[i] for i in copies]
            compat.copy_all(dst, src)
            stats["input_copies"] += len(copies)
        self.write_host_scalars(inputs)
        engine.replay(self.handle)
        for i in self.copy_back:
            inputs[i].copy_(self.buffers[i])
        stats["replays"] += 1
        return self.outputs.hand_out(inputs)

    def write_host_scalars(self, inputs: Sequence[Any]) -> None:
        # fill_ with a CPU 0-dim value passes it as a kernel argument (no transfer, no sync); a value that
        # is a device tensor by now (its producer graph was captured since) is copied on the device
        for i, buffer in self.host_scalars.items():
            buffer.fill_(inputs[i])

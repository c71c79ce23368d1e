"""Helpers the generated host programs import at run time. Kept tiny: they sit on the per-call path."""
from __future__ import annotations

import time

import torch

try:  # the cheaper range Inductor's launchers use (torch >= 2.2); the public one otherwise
    from torch._C._profiler import _RecordFunctionFast as profile_range
except ImportError:  # pragma: no cover - older or trimmed builds
    from torch.autograd.profiler import record_function as profile_range


def ensure_layout(tensor: torch.Tensor, size: tuple, stride: tuple) -> torch.Tensor:
    """An ATen call may pick another memory layout than tracing predicted (e.g. cuDNN's channels-last);
    kernels index by the predicted strides, so re-lay the result out when it differs."""
    if tensor.stride() == stride or tensor.numel() <= 1:
        return tensor
    out = torch.empty_strided(size, stride, dtype=tensor.dtype, device=tensor.device)
    out.copy_(tensor)
    return out


def _eval_size(expr: str, hints: dict) -> int:
    return int(eval(expr, {"__builtins__": {}}, dict(hints)))


def random_inputs(specs, hints: dict) -> list:
    """Random inputs of the recorded shapes, for running an output_code.py by itself."""
    inputs = []
    for spec in specs:
        kind = spec[0]
        if kind == "symint":
            inputs.append(_eval_size(spec[1], hints))
        elif kind == "tensor":
            _, size, stride, offset, dtype, device = spec
            size = [_eval_size(s, hints) for s in size]
            stride = [_eval_size(s, hints) for s in stride]
            offset = _eval_size(offset, hints)
            extent = offset + 1 + sum((n - 1) * st for n, st in zip(size, stride) if n > 0)
            if dtype.is_floating_point:
                storage = torch.randn(extent, dtype=dtype, device=device)
            elif dtype == torch.bool:
                storage = torch.rand(extent, device=device) > 0.5
            else:
                storage = torch.randint(0, 8, (extent,), dtype=dtype, device=device)
            inputs.append(torch.as_strided(storage, size, stride, offset))
        else:
            inputs.append(None)
    return inputs


def time_call(call, make_inputs, repeat: int = 50) -> None:
    def synchronize():
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    call(make_inputs())
    synchronize()
    times = []
    for _ in range(repeat):
        inputs = make_inputs()
        synchronize()
        start = time.perf_counter()
        call(inputs)
        synchronize()
        times.append(time.perf_counter() - start)
    times.sort()
    print(f"median {times[len(times) // 2] * 1e3:.4f} ms over {repeat} calls (min {times[0] * 1e3:.4f} ms)")

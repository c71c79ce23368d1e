"""Helpers the generated host programs import at run time. Kept tiny: they sit on the per-call path."""
from __future__ import annotations

import time

import torch

try:  # the cheaper range Inductor's launchers use (torch >= 2.2); the public one otherwise
    from torch._C._profiler import _RecordFunctionFast as profile_range
except ImportError:  # pragma: no cover - older or trimmed builds
    from torch.autograd.profiler import record_function as profile_range


def _dynamo_guards():
    try:
        return torch._C._dynamo.guards
    except AttributeError:  # pragma: no cover - a build without Dynamo's C helpers
        return None


def _fallback_empty(device: str):
    def empty(size, stride, dtype):
        return torch.empty_strided(size, stride, dtype=dtype, device=device)
    return empty


def _fallback_reinterpret(base, size, stride, offset_increment=0):
    return torch.as_strided(base, size, stride, base.storage_offset() + offset_increment)


# The allocation and view functions Inductor's wrapper code uses: C entry points that skip the Python
# argument parser and the dispatcher (on CPU ~0.37 µs against ~0.9 µs for `torch.empty_strided(..., dtype=,
# device=)`; ~0.4 µs against ~0.9 µs for `torch.as_strided`). `empty_strided_cuda` allocates on the
# *current* device: host programs call it only inside their device guard. `reinterpret_tensor`'s offset
# counts from `base`'s own storage offset; its result records no autograd history (host programs run
# without it).
_GUARDS = _dynamo_guards()
empty_strided_cpu = getattr(_GUARDS, "_empty_strided_cpu", None) or _fallback_empty("cpu")
empty_strided_cuda = getattr(_GUARDS, "_empty_strided_cuda", None) or _fallback_empty("cuda")
reinterpret_tensor = getattr(_GUARDS, "_reinterpret_tensor", None) or _fallback_reinterpret


current_cuda_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)


def ensure_layout(tensor: torch.Tensor, size: tuple, stride: tuple) -> torch.Tensor:
    """An ATen call may pick another memory layout than tracing predicted (e.g. cuDNN's channels-last);
    kernels index by the predicted strides, so re-lay the result out when it differs."""
    if tensor.stride() == stride or tensor.numel() <= 1:
        return tensor
    if any(st == 0 and n > 1 for n, st in zip(size, stride)):
        # the predicted layout repeats elements (an expanded view): write one copy along those dims and
        # expand it; a copy into overlapping memory is refused
        base = tuple(1 if st == 0 else n for n, st in zip(size, stride))
        out = torch.empty_strided(base, stride, dtype=tensor.dtype, device=tensor.device)
        out.copy_(tensor[tuple(slice(0, 1) if st == 0 else slice(None) for st in stride)])
        return out.expand(size)
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

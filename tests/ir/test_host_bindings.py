"""Host programs call a few ATen ops through torch's Python bindings (`fuse_all_ir.host.BOUND_FUNCTIONS`):
each binding, given the arguments a host program passes, must run exactly the overload the graph named."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import fuse_all
from fuse_all_ir.host import BOUND_FUNCTIONS


class _Ops(TorchDispatchMode):
    """Records the overloads a call dispatches; `run=False` records without running them (cuDNN's ops have
    no CPU kernel: what is checked on CPU is which overload the binding resolves to)."""
    def __init__(self, run: bool = True):
        super().__init__()
        self.seen = []
        self.run = run

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(func)
        return func(*args, **(kwargs or {})) if self.run else torch.empty(0)


def _r(*shape):
    return torch.randn(*shape)


# (positional arguments, keyword arguments) as a host program passes them, per bound op
CALLS = {
    "aten.convolution.default": [((_r(1, 4, 6, 6), _r(5, 4, 3, 3), _r(5), [1, 1], [1, 1], [1, 1], False, [0, 0], 1), {}),
                                 ((_r(1, 4, 6, 6), _r(4, 1, 3, 3), None, [2, 2], [0, 0], [1, 1], False, [0, 0], 4), {}),
                                 ((_r(1, 4, 6, 6), _r(4, 2, 3, 3), None, [1, 1], [0, 0], [1, 1], True, [0, 0], 1), {})],
    "aten.addmm.default": [((_r(3), _r(2, 4), _r(4, 3)), {}), ((_r(2, 3), _r(2, 4), _r(4, 3)), {"beta": 0.5, "alpha": 2})],
    "aten.mm.default": [((_r(2, 4), _r(4, 3)), {})],
    "aten.bmm.default": [((_r(2, 2, 4), _r(2, 4, 3)), {})],
    "aten.baddbmm.default": [((_r(2, 2, 3), _r(2, 2, 4), _r(2, 4, 3)), {"beta": 0.0, "alpha": -1.5})],
    # as conv_epilogue.py's calls pass them
    "aten.cudnn_convolution_relu.default": [((_r(1, 4, 6, 6), _r(5, 4, 3, 3), _r(5), [1, 1], [1, 1], [1, 1], 1), {}),
                                            ((_r(1, 4, 6, 6), _r(4, 2, 1, 1), None, [2, 2], [0, 0], [1, 1], 2), {})],
    "aten.cudnn_convolution_add_relu.default": [
        ((_r(1, 4, 6, 6), _r(5, 4, 3, 3), _r(1, 5, 6, 6), 1.0, _r(5), [1, 1], [1, 1], [1, 1], 1), {})],
}
CUDA_ONLY = {"aten.cudnn_convolution_relu.default", "aten.cudnn_convolution_add_relu.default"}


def _on_cuda(value):
    return value.cuda().to(memory_format=torch.channels_last) if isinstance(value, torch.Tensor) and value.dim() == 4 \
        else value.cuda() if isinstance(value, torch.Tensor) else value


@pytest.mark.parametrize("target", sorted(BOUND_FUNCTIONS))
def test_binding_runs_the_named_overload(target):
    name, positional, keywords = BOUND_FUNCTIONS[target]
    binding = getattr(torch._C._VariableFunctions, name)
    overload = eval(f"torch.ops.{target}")   # noqa: S307 - our own table
    cuda = target in CUDA_ONLY and torch.cuda.is_available() and torch.backends.cudnn.is_available()
    for args, kwargs in CALLS[target]:
        assert len(args) == positional and set(kwargs) <= keywords
        if cuda:
            args = tuple(_on_cuda(a) for a in args)
        with _Ops(run=cuda or target not in CUDA_ONLY) as mode:
            got = binding(*args, **kwargs)
        assert mode.seen[0] is overload, (target, mode.seen)
        if cuda or target not in CUDA_ONLY:
            torch.testing.assert_close(got, overload(*args, **kwargs))


def test_compiled_convolution_and_addmm_use_the_bindings():
    w, b = torch.randn(6, 4, 3, 3), torch.randn(6)
    lin_w, lin_b = torch.randn(3, 6), torch.randn(3)

    def fn(x):
        return F.linear(F.relu(F.conv2d(x, w, b, padding=1)).mean((2, 3)), lin_w, lin_b)
    x = torch.randn(2, 4, 8, 8)
    compiled = torch.compile(fn, backend="fuse_all", options={"fallback": False})
    torch.testing.assert_close(compiled(x), fn(x), rtol=1e-4, atol=1e-5)
    source = Path(fuse_all.compiled_graphs()[-1].output_code).read_text()
    assert "= torch._C._VariableFunctions.convolution   # aten.convolution.default" in source
    assert "= torch._C._VariableFunctions.addmm   # aten.addmm.default" in source
    assert "torch.ops.aten.convolution" not in source


def test_ensure_layout_to_an_expanded_layout_writes_one_copy_and_expands_it():
    """An ATen call's result whose traced layout repeats elements (stride 0: a squeeze of an expand run in
    ATen) cannot be copied into overlapping memory; the relayout writes one copy along those dims."""
    import torch
    from fuse_all_ir.runtime import ensure_layout
    base = torch.randn(4, 1).expand(4, 5)                 # values repeat along dim 1
    got = ensure_layout(base.contiguous(), (4, 5), (1, 0))
    assert got.stride() == (1, 0) and torch.equal(got, base)
    assert ensure_layout(base.contiguous(), (4, 5), (1, 4)).stride() == (1, 4)

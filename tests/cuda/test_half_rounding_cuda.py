"""float16/bfloat16 rounding on the GPU (fuse_all_ir.rounding): compiled Triton kernels round every ATen op's
half result as eager's CUDA kernels do (the CPU suite runs the same kernels in Triton's interpreter, whose
float32 -> bfloat16 conversion we patch; here the GPU's own `cvt.rn` conversions run)."""
from __future__ import annotations

import pytest
import torch

import fuse_all_optest as ot

pytestmark = pytest.mark.cuda
HALVES = [torch.float16, torch.bfloat16]


def _boundaries() -> torch.Tensor:
    halves = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16)
    finite = halves[halves.isfinite()].float().unique()
    mids = ((finite[1:].double() + finite[:-1].double()) / 2).float()
    up, down = torch.nextafter(mids, torch.tensor(torch.inf)), torch.nextafter(mids, torch.tensor(-torch.inf))
    edges = torch.tensor([65504.0, 65519.99, 65520.0, 65536.0, 1e5, 3e38, 2.0 ** -25, 1e-30, torch.inf])
    return torch.cat([finite, mids, up, down, edges, -edges, torch.randn(4096) * 1e3])


def test_casts_to_half_round_exactly_as_torch_on_the_gpu():
    def fn(x):
        return x.half().float() * 1, x.bfloat16().float() * 1
    x = _boundaries().cuda()
    for actual, expected in zip(ot.compile_fn(fn, "triton")(x), fn(x)):
        assert torch.equal(actual, expected)


@pytest.mark.parametrize("dtype", HALVES)
def test_a_fused_chain_of_half_ops_equals_eager_on_the_gpu(dtype):
    """Each op's result rounded: also no FMA contraction of `x * y + x` across the rounding (LLVM narrows the
    round trip to half arithmetic and fused it into `fma.rn.f16x2` until such kernels compiled with fp fusion
    off: 1-ulp differences in a third of the elements)."""
    def fn(x, y):
        t = x * y + x
        return torch.maximum((t - y) * t, y.abs()) - x * 3
    x, y = (ot.make((1 << 16,), dtype, low=-4, high=4).cuda() for _ in range(2))
    assert torch.equal(ot.compile_fn(fn, "triton")(x, y), fn(x, y))


@pytest.mark.parametrize("dtype", HALVES)
def test_layer_norm_gradient_of_a_constant_fused_half_row_on_the_gpu(dtype):
    """The CPU regression (fuzz 102/476) on the GPU: a constant row's layer norm has a zero input gradient."""
    def fn(a1, a2):
        s = torch.sinh(a1 * a1)
        x = a1 + torch.add(torch.hypot(a2, s), s, alpha=2)
        return torch.nn.functional.layer_norm(x.expand(4, 8), [8])
    compiled = ot.compile_fn(fn, "triton")
    for seed in range(4):
        torch.manual_seed(seed)
        a1, a2 = (ot.make((1,), dtype, low=-2, high=2).cuda().requires_grad_() for _ in range(2))
        cotangent = torch.randn(4, 8, dtype=dtype, device="cuda")
        expected = torch.autograd.grad(fn(a1, a2), [a1, a2], cotangent)
        actual = torch.autograd.grad(compiled(a1, a2), [a1, a2], cotangent)
        ot.assert_same(actual, expected, atol=1e-2, rtol=1e-2, what="gradient")

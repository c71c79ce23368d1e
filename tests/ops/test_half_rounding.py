"""float16/bfloat16 values rounded as eager rounds them: casts bit-exact on every kind of float32 value, and
fused chains of ATen ops rounding each op's result (fuse_all_ir.rounding)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fuse_all
from fuse_all_optest import BOTH, check, compile_fn, make


def _float16_boundaries() -> torch.Tensor:
    """Every float16 value as a float32, the float32 midpoints between neighbours (ties: to even) and the
    float32 numbers either side of each midpoint, plus values around float16's overflow threshold (65520)
    and below its subnormals, and float32's own extremes."""
    halves = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16)
    finite = halves[halves.isfinite()].float().unique()           # sorted, -0.0 folded into 0.0
    mids = ((finite[1:].double() + finite[:-1].double()) / 2).float()
    up, down = torch.nextafter(mids, torch.tensor(torch.inf)), torch.nextafter(mids, torch.tensor(-torch.inf))
    edges = torch.tensor([0.0, -0.0, 65504.0, 65519.99, 65520.0, 65536.0, 1e5, 3e38, 2.0 ** -25, 2.0 ** -26,
                          1e-30, 1e-45, torch.inf, -torch.inf, torch.nan])
    every = torch.cat([finite, mids, up, down, edges, -edges])
    return torch.cat([every, torch.randn(4096) * 10.0 ** torch.randint(-12, 12, (4096,))])


@pytest.mark.parametrize("codegen", BOTH)
def test_float32_to_float16_and_bfloat16_round_exactly_as_torch(codegen):
    def fn(x):
        return x.half().float() * 1, x.bfloat16().float() * 1
    x = _float16_boundaries()
    for actual, expected in zip(compile_fn(fn, codegen)(x), fn(x)):
        assert torch.equal(actual.isnan(), expected.isnan())
        same = (actual == expected) & (actual.signbit() == expected.signbit()) | expected.isnan()
        assert bool(same.all()), (x[~same][:8], actual[~same][:8], expected[~same][:8])


@pytest.mark.parametrize("codegen", BOTH)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_fused_chain_of_half_ops_equals_eager_bit_for_bit(codegen, dtype):
    """Eager rounds every op's result to the tensor's dtype; a fused chain that kept float32 intermediates
    differed from it in the last bit of ~30% of the elements (and by whole ulps after a cancellation).
    A Python scalar operand of mul and div is a float32 number in eager's CPU kernels (opmath: `x * 0.1` is
    not `x * half(0.1)`, which differs in a third of the elements) and so in fuse_all's on both codegens;
    a constant tensor (`full`, a pad's value) holds the rounded one. (Eager's CPU add/sub round the scalar
    to the tensor's dtype first: `x + 0.3` is 1 ulp apart in a fifth of the elements, within tolerance.)"""
    def fn(x, y):
        t = x * y + x
        padded = torch.nn.functional.pad(t, (3, 2), value=0.1)     # a masked load's constant
        return ((t - y) * t / (y.abs() + 1)) - x * 3, padded * 0.1 / 0.3, torch.full_like(x, 0.1) * x
    x, y = make((4096,), dtype, low=-4, high=4), make((4096,), dtype, low=-4, high=4)
    for actual, expected in zip(compile_fn(fn, codegen)(x, y), fn(x, y)):
        assert torch.equal(actual, expected), (actual != expected).sum()


def test_kernels_that_round_to_half_compile_without_fma_contraction(tmp_path):
    """LLVM narrows `float(half(x * y)) + x` to half arithmetic and NVPTX then fuses it into one
    `fma.rn.f16x2`, dropping the rounding of the product that eager's two kernels do (1-ulp differences in a
    third of the elements on the H200). Kernels that round to float16/bfloat16 compile with fp fusion off."""
    def fn(x, y):
        t = x * y + x
        return torch.maximum((t - y) * t, y.abs()) - x * 3

    programs = {}
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        compile_fn(fn, "triton")(*(make((256,), dtype) for _ in range(2)))
        programs[dtype] = fuse_all.compiled_graphs()[-1].output_code
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton")
    probe = Path(__file__).parents[1] / "codegen_triton" / "half_ptx_probe.py"
    proc = subprocess.run([sys.executable, str(probe), *programs.values()], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    for dtype, path in programs.items():
        (kernel,) = found[path].values()
        if dtype == torch.float32:
            assert kernel["fp_fusion"] and not kernel["half_fma"]
        else:
            assert not kernel["fp_fusion"] and kernel["half_fma"] == [], (dtype, kernel)
            assert kernel["half_fma_if_fused"], (dtype, "the control: with contraction on, the probe sees it")


def _all_bit_patterns(dtype) -> torch.Tensor:
    return torch.arange(65536, dtype=torch.int32).to(torch.uint16).view(dtype)


def _same_or_both_nan(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Equal values with equal signs (-0.0 is not 0.0), or NaN on both sides (NaN payloads after arithmetic
    follow operand order, which a fused kernel need not share with eager's)."""
    return ((actual == expected) & (actual.signbit() == expected.signbit())) | (actual.isnan() & expected.isnan())


# C++ only: Triton's CPU interpreter (numpy) keeps a float16 signalling NaN signalling on `.float()` and
# reads bfloat16 subnormals wrongly (0x0001 -> 0.0, 0x0003 -> 0x00400000): the interpreter's conversions,
# not the GPU's
@pytest.mark.parametrize("codegen", ["cpp"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_every_bit_pattern_loads_and_stores_as_torch(codegen, dtype):
    """All 65536 float16/bfloat16 values (subnormals, infs, NaNs with payloads) read into float32 bit for
    bit (NaNs quieted with their payload, as torch's conversion does), written back unchanged by a copy of
    a rounded-to-its-own-dtype value, and through ops whose results round (x * y + x: products of two
    halves and their sums hit float16's halfway cases; x * 0.5 is inexact only among subnormals)."""
    def fn(x, y):
        return x.float(), x.abs(), x * y + x, (x * 0.5).to(torch.float32) + 1
    x = _all_bit_patterns(dtype)
    y = x[torch.randperm(65536)]
    actual, expected = compile_fn(fn, codegen)(x, y), fn(x, y)
    assert torch.equal(actual[0].view(torch.int32), expected[0].view(torch.int32))
    for a, e in zip(actual[1:], expected[1:]):
        same = _same_or_both_nan(a, e)
        assert bool(same.all()), (x[~same][:8], a[~same][:8], e[~same][:8])


@pytest.mark.parametrize("codegen", BOTH)
def test_float32_stores_into_float16_and_bfloat16_bit_for_bit(codegen):
    """The store conversion itself (no arithmetic after it): every float16 value, the midpoints (ties to
    even) and their neighbours, 65504/65519.99/65520, subnormals, inf and NaN, compared as bits."""
    def fn(x):
        return x.half(), x.bfloat16()
    x = _float16_boundaries()
    actual, expected = compile_fn(fn, codegen)(x), fn(x)
    assert torch.equal(actual[0].view(torch.int16), expected[0].view(torch.int16))
    same = _same_or_both_nan(actual[1], expected[1])
    assert bool(same.all()), (x[~same][:8], actual[1][~same][:8], expected[1][~same][:8])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_reduction_phases_reading_a_rounded_prefix_back_match_eager(dtype):
    """softmax(x * 0.5 + 1) and gelu(layer_norm(x + y)): the later phases read the rounded prefix from
    scratch (codegen-cpp reuse.py); rows of odd length leave a vector remainder."""
    ln = torch.nn.LayerNorm(771, dtype=dtype)
    with torch.no_grad():
        ln.weight.copy_(make((771,), dtype, low=0.5, high=1.5))
        ln.bias.copy_(make((771,), dtype))
    x, y = make((37, 771), dtype), make((37, 771), dtype)
    check(lambda x: torch.softmax(x * 0.5 + 1, dim=-1), x)
    check(lambda x, y: torch.nn.functional.gelu(ln(x + y)), x, y)

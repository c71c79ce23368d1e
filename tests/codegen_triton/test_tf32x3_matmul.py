"""`torch.ops.fuse_all_triton.matmul` (fuse_all_codegen_triton/matmul.py) run in Triton's interpreter: the
kernel's indexing (tails of M, N and K, transposed, sliced and batched operands, a bias broadcast along either
dim) against float64, relative to ATen's own float32 error. The tensor-core precision itself and the
per-signature choice against cuBLAS need a GPU: tests/cuda/test_tf32x3_matmul_cuda.py."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
from fuse_all_optest import assert_near_float64  # noqa: E402


@pytest.fixture()
def matmul(triton_interpret):
    from fuse_all_codegen_triton import matmul
    return matmul


def _check(matmul, a, b, bias=None):
    got = matmul.OP(a, b, bias)
    eager = torch.matmul(a, b) if bias is None else torch.addmm(bias, a, b)
    reference = torch.matmul(a.double(), b.double()) + (0 if bias is None else bias.double())
    assert got.shape == eager.shape and got.is_contiguous()
    assert_near_float64(got, eager, reference, "product", atol=1e-5)


@pytest.mark.parametrize("m, k, n", [(70, 40, 50), (64, 64, 64), (1, 130, 3), (129, 7, 65)])
def test_tails_of_every_dim(matmul, m, k, n):
    _check(matmul, torch.randn(m, k), torch.randn(k, n))


def test_transposed_operands(matmul):
    a, b = torch.randn(45, 70), torch.randn(33, 45)
    _check(matmul, a.t(), b.t())       # (70, 45) @ (45, 33), both with their contraction dim strided


def test_sliced_operands(matmul):
    a, b = torch.randn(40, 90)[:, ::3], torch.randn(60, 50)[::2, 5:45]
    _check(matmul, a, b)               # (40, 30) every third column @ (30, 40) every other row


@pytest.mark.parametrize("bias_shape", [(50,), (1, 50), (70, 1), (70, 50), ()])
def test_bias_broadcasts(matmul, bias_shape):
    _check(matmul, torch.randn(70, 40), torch.randn(50, 40).t(), torch.randn(bias_shape))


def test_batched(matmul):
    a, b = torch.randn(3, 70, 40), torch.randn(3, 50, 40).transpose(1, 2)
    _check(matmul, a, b)
    _check(matmul, torch.randn(40, 3, 70).permute(1, 2, 0), torch.randn(3, 40, 50))


def test_outside_the_kernel_aten_answers(matmul):
    a, b = torch.randn(5, 0), torch.randn(0, 6)       # empty contraction: zeros
    assert torch.equal(matmul.OP(a, b), torch.zeros(5, 6))
    a64, b64 = torch.randn(5, 4, dtype=torch.float64), torch.randn(4, 6, dtype=torch.float64)
    assert torch.equal(matmul.OP(a64, b64), a64 @ b64)


def test_bad_operands_raise(matmul):
    with pytest.raises(RuntimeError, match="matmul"):
        matmul.OP(torch.randn(3, 4), torch.randn(5, 6))
    with pytest.raises(RuntimeError, match="bias"):
        matmul.OP(torch.randn(2, 3, 4), torch.randn(2, 4, 5), torch.randn(5))


def test_shapes_under_fake_tensors(matmul):
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        out = matmul.OP(torch.empty(2, 7, 3, device="cuda"), torch.empty(2, 3, 5, device="cuda"))
    assert out.shape == (2, 7, 5) and out.device.type == "cuda"


def test_a_reimported_package_runs_its_own_kernel(matmul):
    """tests/triton_mode.py imports the package afresh; the op (registered once per process) follows."""
    import importlib
    for name in [m for m in sys.modules if m.startswith("fuse_all_codegen_triton.matmul")]:
        del sys.modules[name]
    fresh = importlib.import_module("fuse_all_codegen_triton.matmul")
    assert fresh is not matmul and fresh.OP is matmul.OP
    calls = []
    original = fresh.matmul_cpu
    fresh.matmul_cpu = lambda *args: calls.append(1) or original(*args)
    try:
        fresh.OP(torch.randn(4, 4), torch.randn(4, 4))
    finally:
        fresh.matmul_cpu = original
    assert calls == [1]


def _random_operand(gen, shape, batch):
    """A float32 operand of `shape` ((batch,) + shape when batched) laid out at random: contiguous,
    transposed, or a strided slice of a larger tensor."""
    full = (batch, *shape) if batch else shape
    layout = int(torch.randint(3, (1,), generator=gen))
    if layout == 0:
        return torch.randn(full, generator=gen)
    if layout == 1:
        return torch.randn((*full[:-2], full[-1], full[-2]), generator=gen).transpose(-1, -2)
    step = int(torch.randint(2, 4, (1,), generator=gen))
    return torch.randn((*full[:-1], full[-1] * step), generator=gen)[..., ::step]


@pytest.mark.parametrize("seed", range(24))
def test_random_shapes_and_layouts(matmul, seed):
    gen = torch.Generator().manual_seed(1000 + seed)
    m, k, n = (int(v) for v in torch.randint(1, 150, (3,), generator=gen))
    batch = int(torch.randint(2, 5, (1,), generator=gen)) if seed % 3 == 0 else 0
    a, b = _random_operand(gen, (m, k), batch), _random_operand(gen, (k, n), batch)
    bias = None
    if not batch and seed % 2:
        bias = torch.randn(((m, n), (n,), (1, n), (m, 1))[seed % 4], generator=gen)
    _check(matmul, a, b, bias)


class _StubKernel:
    """What `_FastLaunch` takes from Triton's compiled kernel; `run` records its launches."""
    def __init__(self):
        self.function, self.packed_metadata, self.launches = "function", "metadata", []

    def run(self, *args):
        self.launches.append(args)


def test_fast_launch_passes_what_triton_jit_passes(matmul, monkeypatch):
    """The launch a signature repeats without Triton's argument binding (the op's host cost on a GPU:
    `matmul._FastLaunch`): grid, stream, the compiled kernel's handles, no hooks, then every kernel parameter
    in order (pointers as ints, the bias slot given the output when there is no bias: as `run_kernel`
    launches it); an operand off 16-byte alignment (the kernel was specialised on aligned pointers) is
    refused, for the general launch to take."""
    monkeypatch.setattr(matmul.compat, "interpret_mode", lambda: False)
    monkeypatch.setattr(matmul.compat, "stream_getter", lambda: lambda index: 77)
    kernel = _StubKernel()
    a, b = torch.randn(70, 40), torch.randn(50, 40).t()
    sizes, constants = (70, 50, 40, 2800, 40, 1, 2000, 1, 40, 0, 0, 3500, 50), (False, "tf32x3", 64, 64, 32, 8)
    fast = matmul._FastLaunch.of([kernel, (2, 1), (70, 50), sizes, constants], a, b, None)
    out = fast(a, b, None)
    assert out.shape == (70, 50) and out.dtype == torch.float32 and len(kernel.launches) == 1
    assert kernel.launches[0] == (2, 1, 1, 77, "function", "metadata", None, None, None, a.data_ptr(), b.data_ptr(),
                                  out.data_ptr(), out.data_ptr(), *sizes, *constants)
    bias = torch.randn(50)
    fast(a, b, bias)
    assert kernel.launches[1][9:13] == (a.data_ptr(), b.data_ptr(), bias.data_ptr(), kernel.launches[1][12])
    unaligned = torch.randn(70 * 40 + 1)[1:].view(70, 40)
    assert fast(unaligned, b, None) is None and len(kernel.launches) == 2
    assert matmul._FastLaunch.of([kernel, (2, 1), (70, 50), sizes, constants], unaligned, b, None) is None
    monkeypatch.setattr(matmul.compat, "launch_hooks", lambda: (print, None))   # a profiler's hook is kept
    assert matmul._FastLaunch.of([kernel, (2, 1), (70, 50), sizes, constants], a, b, None) is None


def test_interpreted_launches_keep_the_general_path(matmul):
    matmul._fast.clear()
    _check(matmul, torch.randn(70, 40), torch.randn(50, 40).t())
    assert matmul._fast == {}


def test_operands_are_made_k_major_only_where_strided(matmul):
    """`_k_major`: the kernel's tensor cores read operands contiguous along K; a strided one is copied (same
    values), a K-major one passed as it is (a forward product copies nothing)."""
    a, w = torch.randn(70, 40), torch.randn(50, 40)
    same_a, same_b = matmul._k_major(a, w.t())
    assert same_a is a and same_b.data_ptr() == w.data_ptr()
    for x, y in ((a.t().contiguous().t(), w.t().contiguous()), (torch.randn(3, 40, 70).transpose(1, 2), torch.randn(3, 40, 50))):
        kx, ky = matmul._k_major(x, y)
        assert kx.stride(-1) == 1 and ky.stride(-2) == 1
        assert torch.equal(kx, x) and torch.equal(ky, y)

"""Fuzz findings that only the GPU can judge (marker `cuda`).

    source bench/gpu_env.sh && python -m pytest tests/cuda/test_fuzz_regressions_cuda.py -m cuda -q
"""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.cuda


def test_any_and_all_of_a_loop_invariant_bool_in_a_looped_reduction():
    """Fuzz seed 132 #1068 (Triton, dynamic): `amax`/`all` over `v1 < a0` where `a0` is an expanded (stride-0)
    input, so the reduced value is the same scalar at every step of the looped reduction (`acc | scalar`).
    Triton's CPU interpreter raised on that expression (its scalar comparisons produce float32 data; such
    loads are [1, 1] blocks now: tests/fuzz/test_regressions.py); compiled for the GPU it must match eager."""
    def program(a0, a1):
        v1 = a1.unsqueeze(-2).amax(1, keepdim=False)
        v3 = v1 < a0
        return torch.all(v3), v3.amax(), torch.remainder(v1, 1.5)
    compiled = torch.compile(program, backend="fuse_all", dynamic=True)
    for n in (64, 63, 65):
        a0 = torch.randn(1, device="cuda", dtype=torch.bfloat16).expand(n)
        a1 = (torch.rand(1, device="cuda") * 1.5 + 0.5).expand(n)
        for got, want in zip(compiled(a0, a1), program(a0, a1)):
            assert torch.equal(got, want), (n, got, want)

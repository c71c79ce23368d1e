"""CUDA tests (marker `cuda`): Triton kernels compiled for the GPU, the fuse_all backend on CUDA tensors,
CUDA graphs. CI has no GPU: without CUDA they skip (tests/conftest.py). On a GPU machine:

    python -m pytest -m cuda                      # installed (pip install -r requirements-dev.txt)
    source bench/gpu_env.sh && python -m pytest -m cuda     # a bare checkout (entry points via a dist-info)

The root conftest turns Triton's CPU interpreter on for the CPU suite; here kernels must compile for the GPU,
so this folder turns it off and imports fuse_all_codegen_triton afresh (it binds interpreter or GPU pieces at
import), and undoes both afterwards.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS), str(TESTS / "ops")]   # kernel_examples/, fuse_all_optest.py


from triton_mode import fresh_triton_codegen  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def compiled_triton():
    yield from fresh_triton_codegen("0")


@pytest.fixture(autouse=True)
def _private_cache_and_clean_state(tmp_path, monkeypatch):
    """Host programs and autotune choices in a per-test folder; Dynamo and fuse_all's records reset."""
    import torch

    import fuse_all
    cache = tmp_path / "fuse_all_cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("FUSE_ALL_CACHE_DIR", str(cache))
    torch._dynamo.reset()
    fuse_all.reset()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()

"""Fixtures for the Triton codegen tests: they run kernels in Triton's CPU interpreter.

The package is imported afresh with `TRITON_INTERPRET=1` for each module (tests/triton_mode.py says why).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/kernel_examples/, triton_mode.py

from triton_mode import fresh_triton_codegen  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def triton_interpret():
    yield from fresh_triton_codegen("1")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """Autotune choices and host programs go to a per-test folder, never the user's cache."""
    path = tmp_path / "fuse_all_cache"
    path.mkdir(mode=0o700)
    monkeypatch.setenv("FUSE_ALL_CACHE_DIR", str(path))
    return path

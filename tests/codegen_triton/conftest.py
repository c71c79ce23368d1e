"""Fixtures for the Triton codegen tests: they run kernels in Triton's CPU interpreter.

`TRITON_INTERPRET=1` must be set when `triton.jit` decorates a kernel (Triton reads it then), and
`fuse_all_codegen_triton` binds its interpreter/GPU pieces at import, so the fixture imports the package
fresh with the variable set, and undoes both afterwards: other test packages in the same pytest session
see neither the variable nor an interpreter-mode copy of the package.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/kernel_examples.py


def _purge_package() -> None:
    for name in [m for m in sys.modules if m == "fuse_all_codegen_triton" or m.startswith("fuse_all_codegen_triton.")]:
        del sys.modules[name]


@pytest.fixture(scope="module", autouse=True)
def triton_interpret():
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    _purge_package()
    import fuse_all_codegen_triton
    yield fuse_all_codegen_triton
    _purge_package()
    if saved is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = saved


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """Autotune choices and host programs go to a per-test folder, never the user's cache."""
    path = tmp_path / "fuse_all_cache"
    path.mkdir(mode=0o700)
    monkeypatch.setenv("FUSE_ALL_CACHE_DIR", str(path))
    return path

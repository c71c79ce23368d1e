"""Fixtures for the C++ codegen tests: a private compile cache per test session, and the shared examples."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/kernel_examples/


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    """Keep compiled libraries out of the user's cache; shared by the tests of one session."""
    path = tmp_path_factory.mktemp("fuse_all_cache")
    path.chmod(0o700)
    mp = pytest.MonkeyPatch()
    mp.setenv("FUSE_ALL_CACHE_DIR", str(path))
    yield path
    mp.undo()


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty cache directory for tests that count compiles."""
    path = tmp_path / "cache"
    path.mkdir(mode=0o700)
    monkeypatch.setenv("FUSE_ALL_CACHE_DIR", str(path))
    return path / "cpp"

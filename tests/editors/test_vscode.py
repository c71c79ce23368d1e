"""VS Code (code-server) in headless Chromium, driven by Playwright, with the fuse-all .vsix installed:
hovering a compiled function shows its kernel code.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import editor_tools
import pytest
from fuse_all_lsp import load_records

pytestmark = pytest.mark.editor

USER_SETTINGS = {
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": False,
    "security.workspace.trust.enabled": False,
    "telemetry.telemetryLevel": "off",
    "extensions.autoCheckUpdates": False,
    "extensions.ignoreRecommendations": True,
    "update.mode": "none",
    "editor.hover.delay": 100,
    "editor.codeLens": True,
}


@contextmanager
def running_code_server(code_server: str, workspace: Path, user_data: Path, extensions: Path, env: dict[str, str]):
    """code-server in its own process group: stopping only its PID would leave the file watcher
    and extension hosts running."""
    port = editor_tools.free_port()
    log = open(user_data.parent / "code-server.log", "w")  # noqa: SIM115 - the server writes it until the finally
    process = subprocess.Popen(
        [
            code_server,
            "--bind-addr",
            f"127.0.0.1:{port}",
            "--auth",
            "none",
            "--user-data-dir",
            str(user_data),
            "--extensions-dir",
            str(extensions),
            "--disable-telemetry",
            "--disable-update-check",
            "--disable-workspace-trust",
            "--disable-getting-started-override",
            str(workspace),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).read()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    output = (user_data.parent / "code-server.log").read_text()[-2000:]
                    raise AssertionError(f"code-server did not come up: {output}") from None
                time.sleep(0.3)
        yield f"http://127.0.0.1:{port}/?folder={workspace}"
    finally:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(process.pid, signal.SIGKILL)
        log.close()


def test_vscode_hover_shows_the_kernel_code(compiled_sample, isolated_env, tmp_path):
    tools = {
        "chromium (apt-get install chromium)": editor_tools.chromium(),
        f"code-server {editor_tools.CODE_SERVER_VERSION}": editor_tools.code_server(),
        "the fuse-all .vsix (editors/vscode: npm run package)": editor_tools.vsix(),
        "playwright-core (tests/editors: npm ci)": editor_tools.playwright_core(),
        "node": editor_tools.shutil.which("node"),
    }
    if reason := editor_tools.missing(tools):
        pytest.skip(reason)
    user_data, extensions = tmp_path / "user-data", tmp_path / "extensions"
    (user_data / "User").mkdir(parents=True)
    settings = {
        **USER_SETTINGS,
        "fuseAll.python": sys.executable,
        "fuseAll.artifactDir": str(compiled_sample.artifact_dir),
    }
    (user_data / "User" / "settings.json").write_text(json.dumps(settings, indent=1))
    install = subprocess.run(
        [
            editor_tools.code_server(),
            "--user-data-dir",
            str(user_data),
            "--extensions-dir",
            str(extensions),
            "--install-extension",
            editor_tools.vsix(),
        ],
        env=isolated_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert install.returncode == 0 and "fuse-all" in install.stdout, install.stdout + install.stderr

    kernels = [
        k for r in load_records(compiled_sample.artifact_dir) if r.function.name == "pointwise" for k in r.kernels
    ]
    expected_code = kernels[0].source.splitlines()[0].strip()
    screenshot = tmp_path / "vscode-hover.png"
    with running_code_server(
        editor_tools.code_server(), compiled_sample.workspace, user_data, extensions, isolated_env
    ) as url:
        driver = {
            "url": url,
            "chromium": editor_tools.chromium(),
            "file": compiled_sample.source.name,
            "lineText": "def pointwise(x):",
            "word": "pointwise",
            "expect": ["fuse-all · pointwise · ", expected_code],
            "lensPattern": r"\d+ kernels? · \d+ fused ops? · compile \d+ ms",
            "screenshot": str(screenshot),
        }
        run = subprocess.run(
            ["node", str(editor_tools.EDITORS / "vscode_hover.mjs"), json.dumps(driver)],
            cwd=editor_tools.EDITORS,
            env=isolated_env,
            capture_output=True,
            text=True,
            timeout=240,
        )
    editor_tools.save_ci_artifact(screenshot)
    assert run.stdout.strip(), f"the driver printed nothing (exit {run.returncode}): {run.stderr[-3000:]}"
    result = json.loads(run.stdout.strip().splitlines()[-1])
    print("vscode driver steps:", result["steps"])
    assert result["ok"], f"{result}\nscreenshot: {screenshot}"
    assert screenshot.is_file()
    hover = result["hover"]
    assert hover.startswith("fuse-all · pointwise · ") and expected_code in hover
    assert all(kernel.name in hover for kernel in kernels)
    assert "aten.cos.default" in hover
    assert "kernel" in result["lens"]
    assert "output_code.py" in result["openedTab"], "clicking the code lens opens the generated code"

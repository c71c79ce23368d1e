"""VS Code (code-server) in headless Chromium, driven by Playwright, with the fuse-all .vsix installed:
hovering a compiled function shows its kernel code; the Profile lens runs the file under the profiler and
the per-line time hints and the hot line's hover appear; the fusion picture opens and its nodes jump to
their lines. Screenshots are kept in .ci-artifacts/ when that folder exists.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import editor_tools
import pytest
import sample_project
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


def required_tools() -> dict[str, str | None]:
    return {
        "chromium (apt-get install chromium)": editor_tools.chromium(),
        f"code-server {editor_tools.CODE_SERVER_VERSION}": editor_tools.code_server(),
        "the fuse-all .vsix (editors/vscode: npm run package)": editor_tools.vsix(),
        "playwright-core (tests/editors: npm ci)": editor_tools.playwright_core(),
        "node": editor_tools.shutil.which("node"),
    }


def install_extension(tmp_path: Path, artifact_dir: Path, env: dict[str, str]) -> tuple[Path, Path]:
    """A fresh user-data folder with our settings, and the .vsix installed into a fresh extensions folder."""
    user_data, extensions = tmp_path / "user-data", tmp_path / "extensions"
    (user_data / "User").mkdir(parents=True)
    settings = {**USER_SETTINGS, "fuseAll.python": sys.executable, "fuseAll.artifactDir": str(artifact_dir)}
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
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert install.returncode == 0 and "fuse-all" in install.stdout, install.stdout + install.stderr
    return user_data, extensions


def test_vscode_hover_shows_the_kernel_code(compiled_sample, isolated_env, tmp_path):
    if reason := editor_tools.missing(required_tools()):
        pytest.skip(reason)
    user_data, extensions = install_extension(tmp_path, compiled_sample.artifact_dir, isolated_env)
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


def fusion_svg(record: dict) -> str:
    """A picture of one record's fusion in the shape docs/artifact-record.md asks of `fusion_svg` (a box
    per kernel, a node per fused op carrying data-file/data-line). It stands in for the compiler's own
    picture, which this test does not depend on."""
    parts, y = [], 10
    for kernel in record["kernels"]:
        nodes = kernel["source_lines"]
        parts.append(f'<g class="kernel"><rect x="10" y="{y}" width="420" height="{30 + 34 * len(nodes)}" rx="8" '
                     f'fill="#fff4e0" stroke="#ee4c2c"/><text x="20" y="{y + 20}">{html.escape(kernel["name"])}</text>')
        for index, node in enumerate(nodes):
            top = y + 28 + 34 * index
            parts.append(
                f'<g class="node" data-file="{html.escape(node["file"])}" data-line="{node["line"]}">'
                f'<title>{html.escape(node["aten_op"] or "")} (line {node["line"]})</title>'
                f'<rect x="24" y="{top}" width="390" height="28" rx="4" fill="#ffd640"/>'
                f'<text x="32" y="{top + 19}">{html.escape(node["aten_op"] or "")} · line {node["line"]}</text></g>'
            )
        parts.append("</g>")
        y += 44 + 34 * len(nodes)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="440" height="{y}" font-family="sans-serif" '
            f'font-size="13">{"".join(parts)}<script>document.title = "the SVG\'s own script ran"</script></svg>')


def test_vscode_profiles_the_file_shows_the_time_per_line_and_opens_the_fusion_picture(
    compiled_sample, isolated_env, tmp_path
):
    if reason := editor_tools.missing(required_tools()):
        pytest.skip(reason)
    workspace, artifacts = tmp_path / "ws", tmp_path / "artifacts"
    workspace.mkdir()
    source = workspace / "example.py"
    shutil.copy(compiled_sample.source, source)
    artifacts.mkdir()
    for path in compiled_sample.artifact_dir.glob("*.json"):  # the compiled sample's records, moved here
        record = json.loads(path.read_text().replace(str(compiled_sample.source), str(source)))
        if record["function"]["name"] == "pointwise":
            picture = tmp_path / f"{record['graph_id']}.svg"
            picture.write_text(fusion_svg(record))
            record["fusion_svg"] = str(picture)
        (artifacts / path.name).write_text(json.dumps(record))
    cos = sample_project.line_of("torch.cos(x)")
    user_data, extensions = install_extension(tmp_path, artifacts, isolated_env)
    shots = tmp_path / "screenshots"
    shots.mkdir()
    with running_code_server(editor_tools.code_server(), workspace, user_data, extensions, isolated_env) as url:
        driver = {
            "url": url,
            "chromium": editor_tools.chromium(),
            "file": source.name,
            "lineText": "def pointwise(x):",
            "hotLineText": "h = self.fc(x)",
            "hotWord": "self",
            "hotLine": sample_project.line_of("h = self.fc(x)"),
            "kernelLineText": "return a * b + 1.0",
            "kernelWord": "return",
            "kernelLine": sample_project.line_of("return a * b + 1.0"),
            "nodeLine": cos,
            "screenshots": str(shots),
        }
        run = subprocess.run(
            ["node", str(editor_tools.EDITORS / "vscode_profile.mjs"), json.dumps(driver)],
            cwd=editor_tools.EDITORS,
            env=isolated_env,
            capture_output=True,
            text=True,
            timeout=400,
        )
    for screenshot in shots.glob("*.png"):
        editor_tools.save_ci_artifact(screenshot)
    assert run.stdout.strip(), f"the driver printed nothing (exit {run.returncode}): {run.stderr[-3000:]}"
    result = json.loads(run.stdout.strip().splitlines()[-1])
    print("vscode profile driver:", json.dumps(result, indent=1, ensure_ascii=False))
    assert result["ok"], f"{result}\nscreenshots: {shots}"
    assert result["fusionTab"].startswith("Fusion: g_") and result["fusionNodes"] >= 3
    assert f"Ln {cos}," in result["cursorAfterClick"], "clicking the node moved the cursor to its line"
    profiled = {entry.line for r in load_records(artifacts) if r.profile for entry in r.profile.lines}
    assert {sample_project.line_of("torch.cos(x)"), sample_project.line_of("self.fc(x)")} <= profiled
    hinted = " ".join(result["hintedLines"])
    assert "a = torch.cos(x)" in hinted and "h = self.fc(x)" in hinted and "1 ATen call" in hinted
    assert any("/call · Profile again" in lens for lens in result["lensesAfter"])
    hover = result["hover"]
    assert "fuse-all profile · line " in hover and "aten.addmm.default" in hover and "per call" in hover
    kernel_hover = result["kernelHover"]
    kernel_line = sample_project.line_of("return a * b + 1.0")
    assert f"fuse-all profile · line {kernel_line} · " in kernel_hover and "kernel_0 (cos" in kernel_hover
    assert re.search(r"\d+(\.\d+)? (GB|MB)/s \(128 B moved\)", kernel_hover), kernel_hover
    assert {path.name for path in shots.glob("*.png")} >= {
        "vscode-fusion-picture.png", "vscode-profile-hints.png", "vscode-profile-hover.png",
        "vscode-profile-hover-kernel.png",
    }


def test_vscode_says_once_how_to_install_a_missing_language_server(compiled_sample, isolated_env, tmp_path):
    """An interpreter without fuse_all_lsp: one message with the install command, not one per Python file."""
    if reason := editor_tools.missing(required_tools()):
        pytest.skip(reason)
    bare = tmp_path / "bare-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    python = str(bare / "bin" / "python")
    env = {key: value for key, value in isolated_env.items() if key != "PYTHONPATH"}
    check = subprocess.run([python, "-c", "import fuse_all_lsp"], env=env, capture_output=True, timeout=60)
    assert check.returncode != 0, "the bare venv must not see the language server"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for name in ("first.py", "second.py"):
        shutil.copy(compiled_sample.source, workspace / name)
    user_data, extensions = install_extension(tmp_path, compiled_sample.artifact_dir, env)
    settings_file = user_data / "User" / "settings.json"
    settings_file.write_text(json.dumps({**json.loads(settings_file.read_text()), "fuseAll.python": python}))
    screenshot = tmp_path / "vscode-missing-server.png"
    with running_code_server(editor_tools.code_server(), workspace, user_data, extensions, env) as url:
        driver = {"url": url, "chromium": editor_tools.chromium(), "files": ["first.py", "second.py"],
                  "screenshot": str(screenshot)}
        run = subprocess.run(
            ["node", str(editor_tools.EDITORS / "vscode_missing_server.mjs"), json.dumps(driver)],
            cwd=editor_tools.EDITORS, env=env, capture_output=True, text=True, timeout=240,
        )
    editor_tools.save_ci_artifact(screenshot)
    assert run.stdout.strip(), f"the driver printed nothing (exit {run.returncode}): {run.stderr[-3000:]}"
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["ok"], result
    ours = [message for message in result["messages"] if "fuse-all" in message]
    assert len(ours) == 1, result["messages"]
    assert f"not installed in {python}" in ours[0]
    assert f"{python} -m pip install <path to your fuse-all checkout>/packages/lsp" in ours[0]
    assert "Copy install command" in ours[0]

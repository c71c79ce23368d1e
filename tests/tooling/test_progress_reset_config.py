"""The progress line, torch.compiler.reset(), and the one table of settings."""
import io
import re
import time
from pathlib import Path

import pytest
import torch

import fuse_all
from fuse_all import config, progress

ROOT = Path(__file__).resolve().parents[2]


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("option, env, tty, shown", [
    (None, None, True, True), (None, None, False, False), (False, None, True, False),
    (True, None, False, True), (None, "0", True, False), (None, "1", False, True),
])
def test_when_progress_shows(monkeypatch, option, env, tty, shown):
    if env is None:
        monkeypatch.delenv("FUSE_ALL_PROGRESS", raising=False)
    else:
        monkeypatch.setenv("FUSE_ALL_PROGRESS", env)
    stream = Terminal() if tty else io.StringIO()
    assert progress.wanted(option, stream)[0] is shown


def test_progress_repaints_after_the_delay_and_clears(monkeypatch):
    monkeypatch.delenv("FUSE_ALL_PROGRESS", raising=False)
    stream = Terminal()
    with progress.Progress("forward", stream=stream, delay_s=0.05, refresh_s=0.02) as bar:
        bar.set_phase("rendering kernels", total_kernels=4)
        bar.kernel_done()
        time.sleep(0.2)
    text = stream.getvalue()
    assert re.search(r"\r\x1b\[Kfuse-all: graph \d+ \(forward\) · rendering kernels · kernels 1/4 · \d+\.\d s", text)
    assert text.endswith("\r\x1b[K")


def test_quick_compile_shows_nothing(monkeypatch):
    monkeypatch.delenv("FUSE_ALL_PROGRESS", raising=False)
    stream = Terminal()
    with progress.Progress("inference", stream=stream, delay_s=5):
        pass
    assert stream.getvalue() == ""


def test_asked_for_on_a_non_terminal_prints_plain_lines_per_phase():
    stream = io.StringIO()
    with progress.Progress("backward", option=True, stream=stream, delay_s=0.0, refresh_s=0.02) as bar:
        time.sleep(0.08)
        bar.set_phase("compiling 3 kernels")
        time.sleep(0.08)
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue() and len(lines) == 2
    assert "capturing" in lines[0] and "compiling 3 kernels" in lines[1]


def test_progress_option_is_checked():
    from fuse_all.options import OptionError, parse
    assert parse(None, {"progress": False}).progress is False and parse().progress is None
    with pytest.raises(OptionError, match="takes a bool"):
        parse(None, {"progress": "no"})


def test_torch_compiler_reset_clears_compiled_graphs():
    torch.compiler.reset()
    torch.compile(lambda x: x.sin() + 1, backend="fuse_all")(torch.randn(4))
    assert fuse_all.compiled_graphs()
    torch.compiler.reset()
    assert fuse_all.compiled_graphs() == []


def test_readme_table_is_the_config_table():
    assert config.markdown_table() in (ROOT / "README.md").read_text()


def test_every_fuse_all_variable_read_in_the_sources_is_declared():
    declared = {v.name for v in config.VARIABLES} | set(config.DEVELOPMENT_VARIABLES)
    found = set()
    for folder in [ROOT / "src", *sorted((ROOT / "packages").glob("*/src"))]:
        for path in folder.rglob("*.py"):
            found |= set(re.findall(r"FUSE_ALL_[A-Z0-9_]+[A-Z0-9]", path.read_text(encoding="utf-8")))
    assert found - declared == set()


def test_a_graph_compiled_inside_a_running_progress_reuses_its_line():
    stream = io.StringIO()
    with progress.Progress("tracing", option=False, stream=stream) as outer:
        with progress.for_graph("forward") as inner:
            assert inner is outer and outer.kind == "forward"
    with progress.for_graph("backward", option=False) as alone:   # a lazy backward: a line of its own
        assert alone is not outer and alone.kind == "backward"


def test_the_backend_reports_its_phases_to_one_progress_line(monkeypatch):
    seen = []
    original = progress.Progress.set_phase

    def record(self, phase, total_kernels=None):
        seen.append((id(self), self.kind, phase, total_kernels))
        original(self, phase, total_kernels)

    monkeypatch.setattr(progress.Progress, "set_phase", record)
    torch.compiler.reset()
    torch.compile(lambda x: (x.sin() @ x.T).softmax(-1), backend="fuse_all")(torch.randn(16, 16))
    assert len({line for line, *_ in seen}) == 1          # the Dynamo graph's one line
    assert [(kind, phase) for _, kind, phase, _ in seen] == [
        ("tracing", "AOTAutograd tracing"), ("inference", "lowering and fusing"),
        ("inference", "rendering kernels"), ("inference", f"compiling {seen[2][3]} kernels")]
    assert seen[2][3] == len(fuse_all.compiled_graphs()[-1].kernels) > 0


def test_every_option_is_in_the_table():
    from dataclasses import fields
    from fuse_all.options import Options
    assert set(config.OPTION_HELP) == {f.name for f in fields(Options)}

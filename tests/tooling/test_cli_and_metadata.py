"""`python -m fuse_all` / `fuse-all` and the published package metadata."""
import email
import json
import os
import re
import stat
import zipfile
from pathlib import Path

import pytest

from fuse_all import cli

from tooling_testing import SAMPLE, run_python

ROOT = Path(__file__).resolve().parents[2]


def _run(argv):
    lines = []
    code = cli.COMMANDS[argv[0]][2](_parse(argv), out=lines.append)
    return code, "\n".join(lines)


def _parse(argv):
    import argparse
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    for name, (_, add, _) in cli.COMMANDS.items():
        add(sub.add_parser(name))
    return parser.parse_args(argv)


def test_doctor_reports_versions_compiler_and_unsafe_folders(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    (cache / "cpp").mkdir(parents=True)
    os.chmod(cache, 0o700)
    os.chmod(cache / "cpp", 0o777)
    monkeypatch.setenv("FUSE_ALL_CACHE_DIR", str(cache))
    monkeypatch.setattr(cli.config, "cache_root", lambda env=None: cache)
    code, text = _run(["doctor"])
    assert code == 0
    assert "torch 2." in text and "fuse_all_ir: 0." in text and "backend registered: True" in text
    assert f"cache root: {cache}  ok (mode 700)" in text
    assert "cpp/: UNSAFE: writable by others (mode 777)" in text
    assert "C++ compiler:" in text and ("GPU 0:" in text or "GPU: none" in text)


def test_cache_info_and_clear(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    (cache / "host" / "abc").mkdir(parents=True)
    (cache / "host" / "abc" / "output_code.py").write_text("x = 1\n")
    (cache / "artifacts").mkdir()
    (cache / "artifacts" / "g_1.json").write_text("{}")
    monkeypatch.setattr(cli.config, "cache_root", lambda env=None: cache)
    code, text = _run(["cache", "info"])
    assert code == 0 and "host" in text and "1 files" in text and "artifacts" not in text
    code, text = _run(["cache", "clear"])
    assert code == 0 and not (cache / "host").exists() and (cache / "artifacts" / "g_1.json").exists()


def test_explain_runs_a_script_and_explains_each_graph(tmp_path):
    result = run_python(["-m", "fuse_all", "explain", str(SAMPLE)], tmp_path, {})
    out = result.stdout
    assert "sample done" in out and "fuse-all: 5 compiled graphs" in out
    assert "forward graph g_" in out and "[0/0] of layer (" in out
    assert "ATen aten.mm.default:" in out
    assert "not fused buf1 -> buf2: producer is an ATen call (aten.mm.default)" in out


def test_explain_uses_fuse_all_for_a_script_without_a_backend(tmp_path, capsys):
    import torch
    script = tmp_path / "plain.py"
    script.write_text("import sys, torch\nf = torch.compile(lambda x: x.cos().sin())\nf(torch.randn(4))\n"
                      "print('args', sys.argv[1:])\n")
    torch.compiler.reset()
    original = torch.compile
    code, text = _run(["explain", str(script), "--flag", "7"])
    out = capsys.readouterr().out + text
    assert code == 0 and torch.compile is original
    assert "args ['--flag', '7']" in out and "1 compiled graphs" in out and re.search(r"kernel_0: (sin.default, cos.default|cos.default, sin.default) ", out)


def test_report_reads_a_debug_folder_and_a_trace(fuse_all_debug_run, traced_run, tmp_path):
    code, out = _run(["report", str(fuse_all_debug_run.folder / "dbg")])
    assert code == 0
    assert len([l for l in out.splitlines() if " graph g_" in l]) == 5
    assert "forward graph" in out and "1 ATen calls" in out and "lower_fuse_schedule" in out
    code, out = _run(["report", str(traced_run.folder / "trace")])
    assert "[0/0]: forward graph" in out and "[0/0]: backward graph" in out and "[2/0]: inference" in out
    assert "fuse_all_forward_output_code" in out


def test_report_on_an_unrelated_folder_says_so(tmp_path):
    code, text = _run(["report", str(tmp_path)])
    assert code == 1 and "neither a fuse-all debug folder nor a TORCH_TRACE log" in text


def test_published_metadata(tmp_path):
    from hatchling.builders.wheel import WheelBuilder
    wheel = next(iter(WheelBuilder(str(ROOT)).build(directory=str(tmp_path), versions=["standard"])))
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = email.message_from_bytes(archive.read(next(n for n in names if n.endswith("/METADATA"))))
        entry_points = archive.read(next(n for n in names if n.endswith("/entry_points.txt"))).decode()
    assert metadata["License-Expression"] == "BSD-3-Clause"
    assert any(n.endswith("licenses/LICENSE") for n in names)
    classifiers = metadata.get_all("Classifier")
    assert "Topic :: Software Development :: Compilers" in classifiers and len(classifiers) >= 10
    assert metadata.get_all("Provides-Extra") == ["lsp"]          # no dev-only extra
    assert "fuse-all = fuse_all.cli:main" in entry_points
    assert "fuse_all = fuse_all.backend:fuse_all" in entry_points
    assert (ROOT / "CHANGELOG.md").read_text().startswith("# Changelog")


@pytest.mark.parametrize("package", sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").is_file()))
def test_stage_packages_carry_license_and_classifiers(tmp_path, package):
    from hatchling.builders.wheel import WheelBuilder
    wheel = next(iter(WheelBuilder(str(ROOT / "packages" / package)).build(directory=str(tmp_path),
                                                                            versions=["standard"])))
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = email.message_from_bytes(archive.read(next(n for n in names if n.endswith("/METADATA"))))
    assert metadata["License-Expression"] == "BSD-3-Clause" and any(n.endswith("licenses/LICENSE") for n in names)
    assert "Development Status :: 3 - Alpha" in metadata.get_all("Classifier")

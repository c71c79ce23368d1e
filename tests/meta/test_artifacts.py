"""Artifact records: schema, default directory rule, atomic writes, the size cap, and the compile adapter.

The language server's reader (`fuse_all_lsp.records`) is the judge of the schema: whatever the compiler
writes must parse there.
"""
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest
# (fuse_all_lsp.records, the judge of the schema, comes from the `reader` fixture: only the lsp extra has it)

from fuse_all import artifacts, provenance
from fuse_all_capture import FunctionInfo

HERE = os.path.abspath(__file__)


def sample_function():  # the "compiled function" the records below point at
    x = 1
    return x


def sample_record(**overrides):
    fields = dict(
        graph_id="g_0123abcd_0",
        function=FunctionInfo("sample_function", HERE, 21, None),
        device="cpu",
        mode=None,
        graph_kind="inference",
        compile_time_s=0.25,
        kernels=[{
            "name": "kernel_0", "language": "cpp", "kind": "pointwise", "source": "void kernel_0() {}",
            "aten_ops": ["aten.cos.default"], "output_code_line": 3,
            "source_lines": [{"file": HERE, "line": 22, "code": "x = 1", "aten_op": "aten.cos.default"}],
        }],
        externs=[{"target": "aten.mm.default", "reason": "matmul runs in ATen by design", "source_lines": []}],
        fusion={"groups": [{"kernel": "kernel_0", "nodes": ["cos"], "why": "pointwise"}], "rejected": []},
        graph_breaks=[{"file": HERE, "line": 23, "reason": "print"}],
        cudagraphs={"enabled": False, "decision": "mode is not reduce-overhead"},
        output_code="/tmp/output_code.py",
    )
    fields.update(overrides)
    return artifacts.build_record(**fields)


@pytest.fixture
def reader():
    """The language server's record reader (fuse_all_lsp.records, plain Python: it needs no pygls). Only
    the lsp extra installs fuse_all_lsp; the tests that judge records by it skip without it."""
    return pytest.importorskip("fuse_all_lsp.records", reason="the lsp extra (fuse-all[lsp]) is not installed")


def test_built_record_follows_schema_1_and_parses_in_the_server(tmp_path, reader):
    record = sample_record()
    assert record["schema"] == "fuse-all-artifact" and record["schema_version"] == 2
    # last_line was missing: found with ast; sha256 is of the file's bytes.
    assert record["function"]["first_line"] == 21 and record["function"]["last_line"] == 23
    import hashlib
    assert record["function"]["source_sha256"] == hashlib.sha256(Path(HERE).read_bytes()).hexdigest()
    path = artifacts.write_record(record, tmp_path)
    assert path == tmp_path / "g_0123abcd_0.json"
    parsed = reader.read_record(path)
    assert parsed.graph_id == "g_0123abcd_0" and parsed.function.name == "sample_function"
    assert parsed.kernels[0].source_lines[0].line == 22
    assert parsed.graph_breaks[0].reason == "print"
    assert parsed.cudagraphs.decision == "mode is not reduce-overhead"


@pytest.mark.parametrize("override, message", [
    ({"graph_id": "g/../x"}, "graph_id"),
    ({"graph_kind": "training"}, "graph_kind"),
    ({"device": None}, "device"),
    ({"compile_time_s": float("nan")}, "compile_time_s"),
    ({"function": None}, "function"),
    ({"function": FunctionInfo("f", "relative.py", 1, 2)}, "function"),
    ({"kernels": [{"name": "k", "language": "cuda", "source": ""}]}, "kernels[0].language"),
    ({"kernels": [{"name": "k", "language": "cpp", "kind": "scan", "source": ""}]}, "kernels[0].kind"),
    ({"kernels": [{"name": "k", "language": "cpp", "source": 3}]}, "kernels[0].source"),
    ({"kernels": [{"name": "k", "language": "cpp", "source": "", "aten_ops": "aten.cos"}]}, "aten_ops"),
    ({"externs": [{"target": None}]}, "externs[0].target"),
    ({"fusion": {"rejected": [{"producer": "a", "consumer": "b"}]}}, "fusion.rejected[0].reason"),
    ({"cudagraphs": {"enabled": "yes"}}, "cudagraphs.enabled"),
    ({"output_code": "output_code.py"}, "output_code"),
])
def test_build_record_rejects_wrong_types(override, message):
    with pytest.raises(artifacts.RecordError, match=message.replace("[", r"\[").replace("]", r"\]")):
        sample_record(**override)


def test_unlocated_source_lines_are_dropped_not_fatal():
    record = sample_record(
        kernels=[{"name": "k", "language": "triton", "source": "", "source_lines": [
            {"file": None, "line": 3}, {"file": "rel.py", "line": 3}, {"file": HERE, "line": 0},
            {"file": HERE, "line": 22, "code": "x = 1"}, {"file": HERE, "line": 22, "code": "x = 1"}]}],
        graph_breaks=[{"file": "<string>", "line": 1, "reason": "?"}],
    )
    assert record["kernels"][0]["source_lines"] == [{"file": HERE, "line": 22, "code": "x = 1", "aten_op": None}]
    assert record["graph_breaks"] == []


@pytest.mark.parametrize("platform, env, expected", [
    ("linux", {"FUSE_ALL_ARTIFACT_DIR": "/custom/dir"}, "/custom/dir"),
    ("linux", {"XDG_CACHE_HOME": "/xdg"}, "/xdg/fuse-all/artifacts"),
    ("linux", {}, "~/.cache/fuse-all/artifacts"),
    ("darwin", {"XDG_CACHE_HOME": "/ignored"}, "~/Library/Caches/fuse-all/artifacts"),
    ("win32", {"LOCALAPPDATA": "/local"}, "/local/fuse-all/artifacts"),
    ("win32", {}, "~/AppData/Local/fuse-all/artifacts"),
])
def test_default_dir_rule_matches_the_server(platform, env, expected, monkeypatch, tmp_path, reader):
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("FUSE_ALL_ARTIFACT_DIR", "XDG_CACHE_HOME", "LOCALAPPDATA"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    wanted = Path(expected.replace("~", str(tmp_path)))
    assert artifacts.default_artifact_dir(platform=platform) == wanted
    assert reader.default_artifact_dir(platform=platform) == wanted


def test_write_record_uses_the_environment_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSE_ALL_ARTIFACT_DIR", str(tmp_path / "records"))
    path = artifacts.write_record(sample_record())
    assert path == tmp_path / "records" / "g_0123abcd_0.json"


def test_write_is_atomic_readers_never_see_a_partial_record(tmp_path):
    big = sample_record(kernels=[{"name": f"kernel_{i}", "language": "cpp", "source": "x" * 200_000}
                                 for i in range(8)])
    small = sample_record()
    artifacts.write_record(small, tmp_path)
    target = tmp_path / "g_0123abcd_0.json"
    stop, seen, errors = threading.Event(), set(), []

    def read_continuously():
        while not stop.is_set():
            try:
                seen.add(len(json.loads(target.read_bytes())["kernels"]))
            except Exception as error:  # a partial file would land here
                errors.append(error)

    reader_thread = threading.Thread(target=read_continuously)
    reader_thread.start()
    for index in range(30):
        assert artifacts.write_record(big if index % 2 else small, tmp_path) == target
    stop.set()
    reader_thread.join()
    assert errors == [] and seen <= {1, 8}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g_0123abcd_0.json"]  # no temp files left


def test_oversized_record_has_its_longest_kernel_sources_truncated(tmp_path, reader):
    huge = "y" * (6 * 1024 * 1024)
    record = sample_record(kernels=[
        {"name": "small", "language": "cpp", "source": "void small() {}"},
        {"name": "huge_a", "language": "cpp", "source": huge},
        {"name": "huge_b", "language": "cpp", "source": huge},
    ])
    path = artifacts.write_record(record, tmp_path)
    assert path.stat().st_size <= artifacts.MAX_RECORD_BYTES
    written = json.loads(path.read_text())
    kernels = {k["name"]: k for k in written["kernels"]}
    assert written["truncated"] is True
    assert kernels["small"]["source"] == "void small() {}" and "source_truncated" not in kernels["small"]
    for name in ("huge_a", "huge_b"):
        assert kernels[name]["source_truncated"] is True
        assert "source truncated" in kernels[name]["source"]
        assert len(kernels[name]["source"]) > 1024 * 1024  # a fair share is kept, not everything dropped
    assert record["kernels"][1]["source"] == huge  # the caller's record is untouched
    reader.read_record(path)


def test_unwritable_directory_is_a_warning_not_an_error(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert artifacts.write_record(sample_record(), blocker / "sub") is None
    assert "cannot write artifact record" in caplog.text


# ---- the adapter from a compile result ----------------------------------------------------------------

@dataclass(frozen=True)
class Origin:
    aten_op: str
    file: str | None = None
    line: int | None = None
    code: str | None = None


@dataclass
class Kernel:
    name: str
    kind: str
    origins: tuple = ()


@dataclass
class Extern:
    target: str
    reason: str
    origins: tuple = ()


@dataclass
class Compiled:
    kernels: list
    kernel_sources: dict
    language: str
    externs: list
    report: dict
    output_code: str
    compile_time_s: float = 0.5
    cudagraphs: dict = field(default_factory=lambda: {"enabled": True, "decisions": ["input mutated", "cpu"]})
    fallback_reason: str | None = None


@dataclass
class Graph:
    graph_id: str = "g_feedbeef_1_fwd"
    kind: str = "forward"
    device: str = "cpu"
    function: FunctionInfo | None = FunctionInfo("sample_function", HERE, 21, 23)


def test_write_compiled_turns_a_compile_result_into_a_record(tmp_path, reader):
    output_code = tmp_path / "output_code.py"
    output_code.write_text("import torch\n\ndef kernel_10(a):\n    pass\n\ndef kernel_1(a):\n    pass\n")
    cos = Origin("aten.cos.default", HERE, 22, "x = 1")
    compiled = Compiled(
        kernels=[Kernel("kernel_1", "pointwise", (cos, Origin("aten.sin.default", HERE, 22, "x = 1"), cos)),
                 Kernel("kernel_2", "reduction", (Origin("aten.sum.dim_IntList"),))],
        kernel_sources={"kernel_1": "void kernel_1() {}", "kernel_2": "void kernel_2() {}"},
        language="cpp",
        externs=[Extern("aten.mm.default", "matmul: extern by design", (Origin("aten.mm.default", HERE, 23, "return x"),))],
        report={"groups": [{"kernel": "kernel_1", "nodes": ["cos", "sin"], "why": "pointwise chain"}],
                "rejected": [{"producer": "buf0", "consumer": "buf1", "reason": "different sizes",
                              "source_lines": [{"file": HERE, "line": 22, "code": "x = 1", "aten_op": None}]}]},
        output_code=str(output_code),
    )
    path = provenance.write_compiled(Graph(), compiled, "reduce-overhead", tmp_path)
    record = reader.read_record(path)
    first, second = record.kernels
    assert first.aten_ops == ("aten.cos.default", "aten.sin.default")
    assert [(s.line, s.aten_op) for s in first.source_lines] == [(22, "aten.cos.default"), (22, "aten.sin.default")]
    assert first.output_code_line == 6  # kernel_1, not the kernel_10 line above it
    assert second.source_lines == () and second.output_code_line is None and second.kind == "reduction"
    assert record.externs[0].source_lines[0].line == 23
    assert record.rejected_fusions[0].reason == "different sizes"
    assert record.mode == "reduce-overhead" and record.graph_kind == "forward"
    assert record.cudagraphs.enabled and record.cudagraphs.decision == "input mutated; cpu"
    assert record.output_code == str(output_code)


def test_write_compiled_never_raises(tmp_path, caplog):
    broken = Compiled(kernels=[Kernel("k", "pointwise")], kernel_sources={}, language="fortran", externs=[],
                      report={}, output_code=str(tmp_path / "missing.py"))
    assert provenance.write_compiled(Graph(), broken, None, tmp_path) is None
    assert "language" in caplog.text
    assert provenance.write_compiled(Graph(function=None), broken, None, tmp_path) is None
    assert list(tmp_path.iterdir()) == []

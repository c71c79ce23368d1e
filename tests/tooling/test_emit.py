"""What a compile hands the tools when things go wrong: a fallback graph, a failing sink."""
import logging

import pytest
import torch

import fuse_all
from fuse_all import emit, fusion_svg


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSE_ALL_ARTIFACT_DIR", str(tmp_path / "records"))
    monkeypatch.setenv("FUSE_ALL_DEBUG_DIR", str(tmp_path / "dbg"))
    for name in ("TORCH_COMPILE_DEBUG", "FUSE_ALL_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    torch.compiler.reset()
    yield
    torch.compiler.reset()


def test_fallback_graph_has_its_info_line_repro_and_picture(caplog, tmp_path, monkeypatch):
    def no_codegen(device, opts):
        raise RuntimeError("no codegen for this test")
    monkeypatch.setattr(fuse_all.backend, "_target_for", no_codegen)
    caplog.set_level(logging.INFO, logger="fuse_all")
    x = torch.randn(5)
    out = torch.compile(lambda z: (z * z).abs(), backend="fuse_all", options={"debug": True})(x)
    torch.testing.assert_close(out, (x * x).abs())
    (graph,) = fuse_all.compiled_graphs()
    assert graph.fallback_reason == "RuntimeError: no codegen for this test"
    line = next(r.getMessage() for r in caplog.records if "fuse_all: compiled" in r.getMessage())
    assert "0 kernels" in line and f"runs in ATen: {graph.fallback_reason}" in line
    folder = tmp_path / "dbg" / graph.graph_id
    assert (folder / "fx_graph_runnable.py").read_text().count("class Repro") == 1
    assert "the whole graph runs in ATen" in (folder / "fusion.svg").read_text()
    assert not (folder / "output_code.py").exists()
    assert graph.fusion_svg == str(folder / "fusion.svg")


def test_a_failing_tool_output_is_a_warning_not_a_failed_compile(monkeypatch, caplog, tmp_path):
    def broken(*args):
        raise RuntimeError("svg writer exploded")
    monkeypatch.setattr(fusion_svg, "fusion_svg", broken)
    x = torch.randn(8)
    out = torch.compile(lambda t: t.cos() + 1, backend="fuse_all", options={"debug": True})(x)
    torch.testing.assert_close(out, x.cos() + 1)
    assert "debug folder output for" in caplog.text and "svg writer exploded" in caplog.text
    (graph,) = fuse_all.compiled_graphs()
    assert graph.fallback_reason is None and len(graph.kernels) == 1
    assert (tmp_path / "dbg" / graph.graph_id / "aten_graph.txt").is_file()


def test_compiled_graph_knows_its_compile_id_function_and_summary():
    def matmul_relu_sum(t):
        return (t @ t).relu().sum()
    torch.compile(matmul_relu_sum, backend="fuse_all")(torch.randn(8, 8))
    (graph,) = fuse_all.compiled_graphs()
    assert graph.compile_id == "0/0" and ".matmul_relu_sum (" in graph.function
    assert graph.function.endswith(f"test_emit.py:{matmul_relu_sum.__code__.co_firstlineno})")
    line = emit.logs.summary_line({"graph_id": graph.graph_id, "compile_id": graph.compile_id, "kind": graph.kind,
                                   "device": "cpu", "kernels": len(graph.kernels), "language": graph.language,
                                   "aten_calls": len(graph.externs), "fused_ops": 2, "compile_time_s": 0.5})
    assert line == (f"fuse_all: compiled inference graph {graph.graph_id} [0/0] on cpu: {len(graph.kernels)} "
                    f"kernels (cpp), 1 ATen calls, 2 ops fused, 0.50 s")

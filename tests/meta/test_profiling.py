"""fuse_all.profiling: a real CPU run under torch.profiler writes each graph's `profile` section, and the
attribution from profiler ranges to kernels, ATen calls and source lines adds up."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import fuse_all
import fuse_all_ir
from fuse_all import profiling

SCRIPT = textwrap.dedent("""\
    import torch


    @torch.compile(backend="fuse_all")
    def block(x, w):
        h = x @ w
        a = torch.sin(h)
        b = torch.cos(a) * 2.0
        return b.sum(dim=-1)


    if __name__ == "__main__":
        torch.manual_seed(0)
        x, w = torch.randn(64, 32), torch.randn(32, 48)
        for _ in range(5):
            block(x, w)
""")


def line_of(text: str) -> int:
    return next(number for number, line in enumerate(SCRIPT.splitlines(), 1) if text in line)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("profiled")
    script = folder / "block.py"
    script.write_text(SCRIPT)
    artifacts = folder / "artifacts"
    env = dict(os.environ, FUSE_ALL_ARTIFACT_DIR=str(artifacts), XDG_CACHE_HOME=str(folder / "cache"))
    run = subprocess.run([sys.executable, "-m", "fuse_all.profiling", "--activities", "cpu", str(script)],
                         cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    records = [json.loads(path.read_text()) for path in artifacts.glob("*.json")]
    assert len(records) == 1, run.stderr[-3000:]
    return script, records[0], run.stderr


def test_a_real_cpu_run_writes_the_profile_section(profiled):
    script, record, stderr = profiled
    assert record["schema_version"] == 2
    profile = record["profile"]
    assert profile["basis"] == "cpu" and profile["activities"] == ["cpu"]
    assert profile["calls"] == 4 and profile["warmup_calls"] == 1  # 5 calls, the first left out
    assert profile["graph_us"] > 0 and profile["host_us"] == pytest.approx(profile["graph_us"])
    kernel_names = {k["name"] for k in record["kernels"]}
    assert {k["name"] for k in profile["kernels"]} == kernel_names
    assert [e["target"] for e in profile["externs"]] == [e["target"] for e in record["externs"]] == ["aten.mm.default"]
    assert any(op["name"] == "aten::mm" for op in profile["externs"][0]["aten_ops"])
    steps = [*profile["kernels"], *profile["externs"]]
    assert all(step["us"] > 0 and 0 < step["share"] < 1 for step in steps)
    assert sum(step["us"] for step in steps) + profile["other_us"] == pytest.approx(profile["graph_us"], rel=1e-6)
    for kernel in profile["kernels"]:  # bytes moved are known at compile time: x@w (64x48) in, 64 sums out
        assert kernel["bytes"] == (64 * 48 + 64) * 4
        assert kernel["gbps"] == pytest.approx(kernel["bytes"] / kernel["us"] / 1e3)
    assert "fuse-all profile: " + record["graph_id"] + ": 4 calls" in stderr


def test_lines_get_the_time_of_the_kernels_and_aten_calls_their_ops_went_into(profiled):
    script, record, _ = profiled
    profile = record["profile"]
    by_line = {entry["line"]: entry for entry in profile["lines"]}
    assert set(by_line) == {line_of("x @ w"), line_of("torch.sin(h)"), line_of("torch.cos(a)"),
                            line_of("b.sum(dim=-1)")}
    assert all(entry["file"] == str(script) for entry in profile["lines"])
    assert by_line[line_of("x @ w")]["externs"] == [0]
    assert by_line[line_of("x @ w")]["us"] == pytest.approx(profile["externs"][0]["us"])
    fused = [line_of("torch.sin(h)"), line_of("torch.cos(a)"), line_of("b.sum(dim=-1)")]
    kernel_us = sum(k["us"] for k in profile["kernels"])
    assert sum(by_line[line]["us"] for line in fused) == pytest.approx(kernel_us)
    assert all(by_line[line]["kernels"] for line in fused)
    assert sum(entry["share"] for entry in profile["lines"]) <= 1.0


def _call(cpu_us, device_us, steps):
    return profiling.GraphCall(cpu_us, device_us, [profiling.StepCall(*step) for step in steps])


def test_profile_section_splits_a_kernel_by_its_ops_per_line_and_uses_gpu_time_on_cuda():
    lines = [{"file": "/m.py", "line": 3, "code": "", "aten_op": "aten.sin.default"},
             {"file": "/m.py", "line": 4, "code": "", "aten_op": "aten.cos.default"},
             {"file": "/m.py", "line": 4, "code": "", "aten_op": "aten.mul.Tensor"}]
    record = {"device": "cuda:0", "kernels": [{"name": "k0", "bytes": 3000, "source_lines": lines}],
              "externs": [{"target": "aten.mm.default", "source_lines": [dict(lines[0], aten_op="aten.mm.default")]}]}
    calls = [_call(900.0, 500.0, [("k0", 800.0, 400.0), ("extern_0", 50.0, 90.0)]),  # warm-up: autotuning
             _call(40.0, 20.0, [("k0", 10.0, 6.0), ("extern_0", 20.0, 12.0)]),
             _call(40.0, 24.0, [("k0", 10.0, 10.0), ("extern_0", 20.0, 12.0)])]
    section = profiling.profile_section(record, calls, warmup=1, activities=["cpu", "cuda"])
    assert section["basis"] == "device" and section["calls"] == 2 and section["warmup_calls"] == 1
    assert section["graph_us"] == 22.0 and section["host_us"] == 40.0
    assert section["kernels"][0]["us"] == 8.0 and section["kernels"][0]["gbps"] == pytest.approx(3000 / 8e-6 / 1e9)
    assert section["externs"][0]["us"] == 12.0 and section["other_us"] == pytest.approx(2.0)
    by_line = {entry["line"]: entry for entry in section["lines"]}
    assert by_line[3]["us"] == pytest.approx(8.0 / 3 + 12.0) and by_line[3]["externs"] == [0]
    assert by_line[4]["us"] == pytest.approx(16.0 / 3) and by_line[4]["kernels"] == ["k0"]
    # One call only: it is all there is, so it is kept.
    assert profiling.profile_section(record, calls[:1], warmup=1)["warmup_calls"] == 0


def test_the_host_program_marks_its_steps_only_while_a_profiler_runs(profiled):
    from torch.autograd import profiler as autograd_profiler

    script, record, _ = profiled
    source = Path(record["output_code"]).read_text()
    assert "if _fa_profiler._is_profiler_enabled:" in source and "def _call_profiled(args):" in source
    assert f"fuse_all::{record['graph_id']}::extern_0::aten.mm.default" in source
    assert autograd_profiler._is_profiler_enabled is False
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert autograd_profiler._is_profiler_enabled is True


def test_the_channels_last_pass_is_timed_apart_from_aot_tracing(tmp_path, monkeypatch):
    """The layout pass (`fuse_all_ir.layout`: fake-tensor propagation over the whole graph, ~0.1-0.25 CPU s
    for ResNeXt-101/ResNet-50) has its own compile_timing phase; before, it was counted as `aot_trace`."""
    monkeypatch.setenv("FUSE_ALL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FUSE_ALL_FORCE_DISABLE_CACHES", "1")
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3)).eval()
    x = torch.randn(1, 3, 12, 12)
    fuse_all_ir.compile_timing.reset()
    with torch.no_grad():
        got = torch.compile(model, backend="fuse_all")(x)
        torch.testing.assert_close(got, model(x))
    phases = fuse_all_ir.compile_timing.snapshot()
    assert phases.get("layout", 0) > 0 and "aot_trace" in phases and "lowering" in phases
    layouts = [g.layout for g in fuse_all.compiled_graphs()]
    assert any(layout for layout in layouts), layouts      # the decision ran inside the timed phase
    torch._dynamo.reset()

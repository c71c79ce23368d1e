"""fuse-all as torch's own tools see it: TORCH_LOGS, TORCH_TRACE (and tlparse), TORCH_COMPILE_DEBUG.
Each test runs tests/tooling/sample_program.py in a fresh process, as a user would."""
import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tooling_testing import run_python, trace_records

# kernels of sample_program.py's training forward graph: kernel_0 is x.mean(), kernel_1 the fused
# relu/sum/softmax/cos/le chain after the mm; the saved aten.t(x) is a view of the input, not a kernel
FORWARD_KERNELS = 2


def test_torch_logs_fuse_all_prints_one_info_line_per_graph(traced_run):
    err = traced_run.stderr
    lines = [line for line in err.splitlines() if "fuse_all: compiled" in line]
    # layer: forward + backward (compile 0/0), inference after no_grad (0/1); with_break: two graphs
    assert len(lines) == 5, err[-3000:]
    forward = next(line for line in lines if "forward graph" in line)
    assert re.search(rf"\[0/0\] on cpu: {FORWARD_KERNELS} kernels \(cpp\), 1 ATen calls, \d+ ops fused, \d+\.\d\d s", forward), forward
    assert sum("backward graph" in line and "[0/0]" in line for line in lines) == 1
    assert "Output code of" not in err and "[__fusion]" not in err   # artifacts only when asked


def test_torch_logs_artifacts_carry_our_code_and_fusion(artifact_logs_run):
    err = artifact_logs_run.stderr
    assert "fuse_all: compiled" not in err                            # the INFO line is the fuse_all log's
    assert err.count("[__output_code] Output code of fuse_all forward graph") == 1
    assert "def call(args)" in err or "def call(" in err
    assert f"[__fusion] fusion report: {FORWARD_KERNELS} kernels, 1 ATen calls" in err
    assert "producer is an ATen call (aten.mm.default)" in err
    assert re.search(r"\[__schedule\]\s+0  ATen aten\.mm\.default", err)


def test_without_torch_logs_nothing_is_printed(fuse_all_debug_run):
    err = fuse_all_debug_run.stderr
    assert "fuse_all: compiled" not in err and "[__" not in err
    assert err.strip().splitlines() == [f"fuse-all: debug output in {fuse_all_debug_run.folder / 'dbg'}"]


def test_torch_trace_has_our_artifacts_under_each_compile_id(traced_run):
    ours = {}
    for envelope, payload in trace_records(traced_run.folder / "trace"):
        artifact = envelope.get("artifact")
        if artifact and artifact["name"].startswith("fuse_all_"):
            compile_id = f"{envelope['frame_id']}/{envelope['frame_compile_id']}"
            ours.setdefault(compile_id, {})[artifact["name"]] = payload
    assert sorted(ours) == ["0/0", "0/1", "1/0", "2/0"]
    forward = ours["0/0"]
    for what in ("aten_graph", "ir_pre_fusion", "ir_post_fusion", "fusion_report", "output_code",
                 "fusion_svg", "compile_phases", "summary"):
        assert f"fuse_all_forward_{what}" in forward and f"fuse_all_backward_{what}" in forward
    assert "aten.mm.default" in forward["fuse_all_forward_aten_graph"]
    report = json.loads(forward["fuse_all_forward_fusion_report"])
    assert len(report["groups"]) == FORWARD_KERNELS and report["rejected"]
    summary = json.loads(forward["fuse_all_forward_summary"])
    assert summary["compile_id"] == "0/0" and summary["kernels"] == FORWARD_KERNELS and summary["aten_calls"] == 1
    phases = json.loads(forward["fuse_all_forward_compile_phases"])
    assert set(phases) >= {"lower_fuse_schedule", "render", "compile_kernels"}
    kernels = [name for name in forward if name.startswith("fuse_all_forward_kernel_")]
    assert len(kernels) == FORWARD_KERNELS and all("extern \"C\"" in forward[k] for k in kernels)
    ET.fromstring(forward["fuse_all_forward_fusion_svg"])   # a well-formed SVG
    assert "fuse_all_inference_output_code" in ours["0/1"]


# requirements-dev.txt installs it into the venv, whose bin/ need not be on PATH
TLPARSE = shutil.which("tlparse", path=str(Path(sys.executable).parent)) or shutil.which("tlparse")


@pytest.mark.skipif(TLPARSE is None, reason="tlparse is not installed (pip install tlparse)")
def test_tlparse_report_lists_our_artifacts(traced_run, tmp_path):
    log = next((traced_run.folder / "trace").glob("*.log"))
    result = subprocess.run([TLPARSE, str(log), "--no-browser", "--strict-compile-id", "-o", str(tmp_path / "tl")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    files = sorted(p.name for p in (tmp_path / "tl" / "-_0_0_0").iterdir())
    for what in ("aten_graph", "ir_pre_fusion", "ir_post_fusion", "output_code", "fusion_svg", "kernel_kernel_0"):
        for kind in ("forward", "backward"):
            assert any(re.fullmatch(rf"fuse_all_{kind}_{what}_\d+\.txt", f) for f in files), (kind, what, files)
    assert any(re.fullmatch(r"fuse_all_forward_fusion_report_\d+\.json", f) for f in files)
    index = (tmp_path / "tl" / "index.html").read_text()
    assert "fuse_all_forward_output_code" in index and "fuse_all_inference_summary" in index


def test_torch_compile_debug_writes_inside_torchs_run_folder(torch_debug_run):
    err, tmp_path = torch_debug_run.stderr, torch_debug_run.folder
    runs = list((tmp_path / "torch_compile_debug").glob("run_*"))
    assert len(runs) == 1, err[-2000:]
    ours = runs[0] / "fuse_all"
    assert f"fuse-all: debug output in {ours}" in err
    folders = sorted(p.name for p in ours.iterdir())
    kinds = [re.fullmatch(r"model__\d+_(forward|backward|inference)_\d+\.0", f) for f in folders]
    assert all(kinds) and sorted(k[1] for k in kinds) == ["backward", "forward"] + ["inference"] * 3, folders
    forward = next(ours.glob("model__0_forward_*.0"))
    for name in ("aten_graph.txt", "fx_graph_runnable.py", "ir_before_fusion.txt", "ir_after_fusion.txt",
                 "fusion_report.txt", "fusion.svg", "output_code.py", "graph.json"):
        assert (forward / name).is_file(), name
    facts = json.loads((forward / "graph.json").read_text())
    assert facts["compile_id"] == "0/0" and facts["aot_graph"] == forward.name[:-2] and facts["kind"] == "forward"
    assert len(list((forward / "kernels").glob("kernel_*.cpp"))) == FORWARD_KERNELS
    assert not (tmp_path / "fuse_all_debug").exists()
    record = json.loads((tmp_path / "records" / f"{facts['graph_id']}.json").read_text())
    assert record["fusion_svg"] == str(forward / "fusion.svg") and record["compile_id"] == "0/0"
    assert record["debug_dir"] == str(forward)
    # The repro runs by itself: the captured graph on random inputs, eager against fuse_all.
    inference = next(ours.glob("model__*_inference_*.0"))
    repro = run_python([str(inference / "fx_graph_runnable.py")], tmp_path, {})
    assert "fuse_all matches eager on random inputs" in repro.stdout


def test_fuse_all_debug_keeps_its_own_folder(fuse_all_debug_run):
    tmp_path = fuse_all_debug_run.folder
    folders = sorted(p.name for p in (tmp_path / "dbg").iterdir())
    assert len(folders) == 5 and all(re.fullmatch(r"g_[0-9a-f]{8}_\d+(_fwd|_bwd)?", f) for f in folders)
    assert all((tmp_path / "dbg" / f / "fusion.svg").is_file() for f in folders)
    assert not (tmp_path / "torch_compile_debug").exists()


@pytest.mark.parametrize("setting, level", [("+fuse_all", "DEBUG"), ("fuse_all", "INFO")])
def test_the_fuse_all_log_name_covers_every_stage(tmp_path, setting, level):
    program = ("import logging, torch, fuse_all\n"
               "torch.compile(lambda x: x.cos(), backend='fuse_all')(torch.randn(3))\n"
               "from torch._logging import _internal\n"
               "for name in ('fuse_all', 'fuse_all_ir', 'fuse_all_codegen_triton', 'fuse_all_cudagraphs'):\n"
               "    log = logging.getLogger(name)\n"
               "    print(name, logging.getLevelName(log.getEffectiveLevel()),\n"
               "          any(_internal._is_torch_handler(h) for h in log.handlers))\n")
    out = run_python(["-c", program], tmp_path, {"TORCH_LOGS": setting}).stdout.splitlines()
    assert out == [f"{name} {level} True" for name in
                   ("fuse_all", "fuse_all_ir", "fuse_all_codegen_triton", "fuse_all_cudagraphs")]

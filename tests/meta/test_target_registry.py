"""The target registry (`fuse_all_ir.targets`): the built-in targets are found, a third one plugs in with one
call and is picked for its device type, and the options, debug folder and artifact record follow it
without any other file naming it."""
from __future__ import annotations

import importlib.metadata
import json

import pytest
import torch

import fuse_all
import fuse_all_ir as ir
from fuse_all.options import OptionError, parse


class NoEpilogues(ir.FusionChoices):
    """The fake target's tuning: a reduction's kernel takes no pointwise epilogue."""

    def veto_fusion(self, group, node, kernel):
        if any(m.kind == "reduction" for m in group.members) and node.kind != "reduction":
            return "meta_noop keeps epilogues apart"
        return None


class NoopTarget:
    """Kernels for meta tensors: they hold no data, so a launch has nothing to compute; the host program
    still allocates every buffer with its shape, strides and dtype, and runs the ATen calls."""
    language = "meta_noop"

    def __init__(self, choices):
        self.choices = choices

    def render_prelude(self, program):
        return "def _noop_launch(*args):\n    return None"

    def render_launch(self, kernel, buffer_args, size_args):
        return f"_noop_launch({', '.join([*buffer_args, *size_args])})"

    def kernel_source(self, kernel):
        return ir.format_kernel(kernel)


@pytest.fixture
def noop_target():
    spec = ir.register_target(ir.TargetSpec(
        name="meta_noop", device_types=("meta",), create=lambda options, choices: NoopTarget(choices),
        choices=lambda options: NoEpilogues(), source_language="text", kernel_suffix=".ir"))
    yield spec
    ir.unregister_target("meta_noop")


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSE_ALL_ARTIFACT_DIR", str(tmp_path / "records"))
    monkeypatch.setenv("FUSE_ALL_DEBUG_DIR", str(tmp_path / "dbg"))
    torch.compiler.reset()
    yield tmp_path
    torch.compiler.reset()


def fn(x):
    return (x.sin() * 2).sum(-1) + 1


def test_the_built_in_targets_are_registered_with_their_device_types():
    targets = ir.registered_targets()
    assert targets["cpp"].device_types == ("cpu",) and targets["triton"].device_types == ("cuda", "xpu")
    assert ir.select_target("cpu").name == "cpp" and ir.select_target("cuda:1").name == "triton"
    assert targets["cpp"].kernel_suffix == ".cpp" and targets["triton"].source_language == "python"


def test_each_codegen_package_declares_its_entry_point():
    """Installed metadata lags behind an editable checkout, so read the packages' own pyproject files."""
    import tomllib
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    for folder, name, module in (("codegen-cpp", "cpp", "fuse_all_codegen_cpp"),
                                 ("codegen-triton", "triton", "fuse_all_codegen_triton")):
        project = tomllib.loads((root / "packages" / folder / "pyproject.toml").read_text())["project"]
        value = project["entry-points"][ir.targets.ENTRY_POINT_GROUP][name]
        assert value == f"{module}.registration:TARGET"
        installed = {e.name: e.value for e in importlib.metadata.entry_points(group=ir.targets.ENTRY_POINT_GROUP)}
        assert installed.get(name, value) == value      # where installed, it says the same


def test_no_target_for_a_device_type_runs_the_graph_in_aten_with_the_reason(fresh):
    x = torch.randn(4, 8, device="meta")
    out = torch.compile(fn, backend="fuse_all")(x)
    assert out.shape == (4,) and out.device.type == "meta"
    (graph,) = fuse_all.compiled_graphs()
    assert graph.fallback_reason.startswith("TargetUnavailable: no fuse-all target runs meta tensors")


def test_a_third_target_registered_with_one_call_is_picked_for_its_device_type(fresh, noop_target):
    x = torch.randn(4, 8, device="meta")
    out = torch.compile(fn, backend="fuse_all", options={"debug": True})(x)
    expected = fn(x)
    assert (out.shape, out.dtype, out.device) == (expected.shape, expected.dtype, expected.device)
    (graph,) = fuse_all.compiled_graphs()
    assert graph.fallback_reason is None and graph.language == "meta_noop"
    # its choices decided the fusion: the epilogue `+ 1` stayed out of the reduction's kernel
    assert len(graph.kernels) == 2
    assert [r["reason"] for r in graph.report.to_json()["rejected"]] == ["meta_noop keeps epilogues apart"]
    # the debug folder and the artifact record take its suffix and language from the registration
    folder = fresh / "dbg" / graph.graph_id
    assert sorted(p.name for p in (folder / "kernels").iterdir()) == ["kernel_0.ir", "kernel_1.ir"]
    (record_file,) = (fresh / "records").glob("*.json")
    record = json.loads(record_file.read_text())
    assert {(k["language"], k["source_language"]) for k in record["kernels"]} == {("meta_noop", "text")}
    # and the `codegen` option knows its name
    assert parse(None, {"codegen": "meta_noop"}).codegen == "meta_noop"


def test_the_same_graph_on_cpu_still_gets_the_cpp_target_and_its_fusion(fresh, noop_target):
    x = torch.randn(4, 8)
    torch.testing.assert_close(torch.compile(fn, backend="fuse_all")(x), fn(x))
    (graph,) = fuse_all.compiled_graphs()
    assert graph.language == "cpp" and len(graph.kernels) == 1


def test_a_forced_target_that_cannot_run_the_device_is_an_option_error(fresh, noop_target):
    with pytest.raises(ir.TargetUnavailable, match="codegen='meta_noop' cannot run this graph on cpu"):
        ir.select_target("cpu", "meta_noop")
    compiled = torch.compile(fn, backend="fuse_all", options={"codegen": "meta_noop"})
    with pytest.raises(Exception, match="codegen='meta_noop' cannot run this graph on cpu: it runs on meta") as info:
        compiled(torch.randn(4, 8))
    assert isinstance(info.value, OptionError) or "OptionError" in str(info.value)


def test_unknown_codegen_names_the_registered_targets(noop_target):
    with pytest.raises(OptionError, match="must be one of auto, cpp, meta_noop, triton; got 'cuda'"):
        parse(None, {"codegen": "cuda"})


def test_priority_decides_between_targets_claiming_one_device_type():
    spec = ir.register_target(ir.TargetSpec(name="cpu_preferred", device_types=("cpu",), priority=1,
                                            create=lambda options, choices: None))
    try:
        assert ir.select_target("cpu") is spec
    finally:
        ir.unregister_target("cpu_preferred")
    assert ir.select_target("cpu").name == "cpp"


@pytest.mark.parametrize("name", ["auto", "C++", ""])
def test_a_target_name_must_be_a_plain_identifier(name):
    with pytest.raises(ValueError, match="target name"):
        ir.TargetSpec(name=name, device_types=("cpu",), create=lambda options, choices: None)


def test_discovering_the_targets_imports_no_codegen_machinery():
    """Registrations are light: listing the targets (what `options={"codegen": ...}` checks) imports
    neither Triton nor a renderer."""
    import subprocess
    import sys
    code = ("import sys, fuse_all_ir as ir; names = ir.target_names(); "
            "heavy = [m for m in ('triton', 'fuse_all_codegen_triton.render', 'fuse_all_codegen_cpp.render') "
            "if m in sys.modules]; print(names, heavy)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("['cpp', 'triton'] []")

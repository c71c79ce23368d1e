"""The debug folder: when it is on, where it goes, what is written, and that the path is printed once."""
import os
import re
from pathlib import Path

import pytest

from fuse_all import debug


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("FUSE_ALL_DEBUG", "TORCH_COMPILE_DEBUG", "FUSE_ALL_DEBUG_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(debug, "_default_root", None)
    monkeypatch.setattr(debug, "_announced", set())
    return monkeypatch


@pytest.mark.parametrize("env, enabled", [
    ({}, False),
    ({"FUSE_ALL_DEBUG": "1"}, True),
    ({"FUSE_ALL_DEBUG": "0"}, False),
    ({"FUSE_ALL_DEBUG": "True"}, True),
    ({"TORCH_COMPILE_DEBUG": "1"}, True),
    ({"TORCH_COMPILE_DEBUG": ""}, False),
])
def test_debug_enabled(env, enabled):
    assert debug.debug_enabled(env) is enabled


def test_off_means_no_folder(clean_env, tmp_path):
    clean_env.setenv("FUSE_ALL_DEBUG_DIR", str(tmp_path))
    assert debug.DebugDir.for_graph("g_1") is None
    assert list(tmp_path.iterdir()) == []
    assert debug.DebugDir.for_graph("g_1", force=True) is not None  # options={"debug": True}


def test_graph_folder_files_and_one_announcement(clean_env, tmp_path, capsys):
    clean_env.setenv("FUSE_ALL_DEBUG", "1")
    clean_env.setenv("FUSE_ALL_DEBUG_DIR", str(tmp_path / "dbg"))
    first = debug.DebugDir.for_graph("g_abc_0")
    second = debug.DebugDir.for_graph("g_abc_0_bwd")
    assert first.path == tmp_path / "dbg" / "g_abc_0" and second.path == tmp_path / "dbg" / "g_abc_0_bwd"
    first.write(debug.ATEN_GRAPH, "graph text")
    first.write(debug.OUTPUT_CODE, "print('hi')\n")
    first.write_kernel("kernel_0", "void kernel_0() {}", "cpp")
    first.write_kernel("kernel_1", "@triton.jit\ndef kernel_1(): pass\n", "triton")
    assert (first.path / "aten_graph.txt").read_text() == "graph text"
    assert sorted(p.name for p in (first.path / "kernels").iterdir()) == ["kernel_0.cpp", "kernel_1.py"]
    err = capsys.readouterr().err
    assert err.count("fuse-all: debug output in") == 1
    assert err.strip() == f"fuse-all: debug output in {tmp_path / 'dbg'}"


def test_default_root_is_one_run_folder_per_process(clean_env, tmp_path, capsys):
    clean_env.chdir(tmp_path)
    clean_env.setenv("FUSE_ALL_DEBUG", "1")
    a = debug.DebugDir.for_graph("g_1")
    b = debug.DebugDir.for_graph("g_2")
    assert a.path.parent == b.path.parent
    assert a.path.parent.parent == tmp_path / "fuse_all_debug"
    assert re.fullmatch(rf"run_\d{{8}}_\d{{6}}_{os.getpid()}", a.path.parent.name)
    assert capsys.readouterr().err.count("debug output in") == 1


def test_names_must_stay_inside_the_graph_folder(clean_env, tmp_path):
    folder = debug.DebugDir(tmp_path / "g")
    for name in ("../escape.txt", "/etc/passwd", "kernels/../../x", ""):
        with pytest.raises(ValueError):
            folder.write(name, "x")
    with pytest.raises(ValueError):
        debug.DebugDir.for_graph("../g", force=True)


def test_unwritable_root_warns_and_returns_none(clean_env, tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    clean_env.setenv("FUSE_ALL_DEBUG_DIR", str(blocker))
    assert debug.DebugDir.for_graph("g_1", force=True) is None
    assert "cannot create the debug folder" in caplog.text
    assert debug.DebugDir(blocker).write("a.txt", "x") is None
    assert "cannot write debug file" in caplog.text


@pytest.fixture
def torch_debug_root(clean_env, tmp_path):
    import torch._dynamo.config
    clean_env.setenv("TORCH_COMPILE_DEBUG", "1")
    with torch._dynamo.config.patch(debug_dir_root=str(tmp_path / "torch_compile_debug")):
        yield tmp_path / "torch_compile_debug"


def test_torch_compile_debug_puts_graphs_in_torchs_run_folder(torch_debug_root, capsys):
    from torch._dynamo.utils import get_debug_dir
    first = debug.DebugDir.for_graph("g_1_fwd", aot_name="model__0_forward_1")
    again = debug.DebugDir.for_graph("g_1_fwd", aot_name="model__0_forward_1")   # recompiled: next counter
    backward = debug.DebugDir.for_graph("g_1_bwd", aot_name="model__0_backward_2")
    run = Path(get_debug_dir())
    assert run.parent == torch_debug_root and re.fullmatch(rf"run_[\d_]+-pid_{os.getpid()}", run.name)
    assert first.path == run / "fuse_all" / "model__0_forward_1.0"
    assert again.path == run / "fuse_all" / "model__0_forward_1.1"
    assert backward.path == run / "fuse_all" / "model__0_backward_2.0"
    assert capsys.readouterr().err.count("debug output in") == 1


def test_torch_layout_without_a_usable_name_uses_the_graph_id(torch_debug_root):
    from torch._dynamo.utils import get_debug_dir
    for name in (None, "../x", "a/b"):
        folder = debug.DebugDir.for_graph("g_2", aot_name=name)
        assert folder.path == Path(get_debug_dir()) / "fuse_all" / "g_2"


def test_fuse_all_debug_dir_wins_over_torch_layout(torch_debug_root, tmp_path):
    clean_dir = tmp_path / "mine"
    os.environ["FUSE_ALL_DEBUG_DIR"] = str(clean_dir)
    try:
        assert debug.DebugDir.for_graph("g_3", aot_name="model__0_inference_0").path == clean_dir / "g_3"
    finally:
        del os.environ["FUSE_ALL_DEBUG_DIR"]

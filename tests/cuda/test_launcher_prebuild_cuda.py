"""Triton 3.6 builds a C launcher per kernel signature (a C compiler run, ~0.1 s) when a kernel is first
loaded, on the thread that launches it first: ~50 of them were 3 s of a ResNet-50 training step's cold first
call on the H200. The compile workers build it into Triton's cache right after compiling
(`_triton_compat.prebuild_launcher`), so the first launch only loads it (marker `cuda`; on Triton 3.8 the
launcher is generic and nothing is built either way)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cuda

PROBE = Path(__file__).with_name("launcher_prebuild_probe.py")


def test_first_load_builds_no_launcher(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(FUSE_ALL_COMPILE_WORKERS="processes", TRITON_CACHE_DIR=str(tmp_path / "triton"),
               FUSE_ALL_CACHE_DIR=str(tmp_path / "fa"))
    proc = subprocess.run([sys.executable, str(PROBE), "6"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["workers"] >= 1 and result["broken"] is None
    assert result["kernels"] >= 6
    assert result["builds_at_load"] == []

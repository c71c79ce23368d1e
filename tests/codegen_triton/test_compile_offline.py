"""The real Triton compiler (not the interpreter) accepts every example kernel, compiled for sm_90 on this
GPU-less machine, in parallel threads like the runtime does."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("compile_offline.py")


def test_examples_compile_for_sm90(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick"], env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-4000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["failed"] == 0 and summary["kernels"] >= 25, summary

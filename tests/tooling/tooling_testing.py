"""Helpers for the tooling tests: run a program in a fresh process, read a TORCH_TRACE folder."""
import json
import os
import subprocess
import sys
from pathlib import Path

SAMPLE = Path(__file__).with_name("sample_program.py")
TORCH_ENV = ("TORCH_LOGS", "TORCH_TRACE", "TORCH_COMPILE_DEBUG", "FUSE_ALL_DEBUG", "FUSE_ALL_DEBUG_DIR",
             "FUSE_ALL_PROGRESS", "TORCH_LOGS_OUT")


def run_python(args, cwd, env_overrides, timeout=300):
    """Run python with a clean tooling environment plus `env_overrides`; returns the CompletedProcess."""
    env = {k: v for k, v in os.environ.items() if k not in TORCH_ENV}
    env.update(env_overrides)
    env.setdefault("FUSE_ALL_ARTIFACT_DIR", str(Path(cwd) / "records"))
    result = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def trace_records(folder):
    """Every structured-trace entry of the TORCH_TRACE folder as (envelope dict, payload text)."""
    entries = []
    for log in Path(folder).glob("*.log"):
        current = None
        for line in log.read_text().splitlines():
            if line.startswith("\t"):
                current[1].append(line[1:])
                continue
            current = (json.loads(line[line.index("{"):]), [])
            entries.append(current)
    return [(envelope, "\n".join(payload)) for envelope, payload in entries]

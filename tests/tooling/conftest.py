import os
import sys

import pytest

# the helper module lives beside this file; pytest runs with --import-mode=importlib (no rootdir on sys.path)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tooling_testing import SAMPLE, run_python  # noqa: E402


class SampleRun:
    """One run of sample_program.py in a fresh process: its folder and output."""

    def __init__(self, folder, env):
        self.folder = folder
        self.result = run_python([str(SAMPLE)], folder, env)
        self.stderr = self.result.stderr


# Each configuration runs once per session: a run is a fresh interpreter and costs ~15 s on 2 cores.
@pytest.fixture(scope="session")
def traced_run(tmp_path_factory):
    """TORCH_LOGS=fuse_all and TORCH_TRACE=<folder>/trace."""
    folder = tmp_path_factory.mktemp("traced")
    return SampleRun(folder, {"TORCH_LOGS": "fuse_all", "TORCH_TRACE": str(folder / "trace")})


@pytest.fixture(scope="session")
def artifact_logs_run(tmp_path_factory):
    return SampleRun(tmp_path_factory.mktemp("artifacts"), {"TORCH_LOGS": "output_code,fusion,schedule"})


@pytest.fixture(scope="session")
def fuse_all_debug_run(tmp_path_factory):
    """FUSE_ALL_DEBUG=1 into <folder>/dbg, no TORCH_LOGS."""
    folder = tmp_path_factory.mktemp("fuse_all_debug")
    return SampleRun(folder, {"FUSE_ALL_DEBUG": "1", "FUSE_ALL_DEBUG_DIR": str(folder / "dbg")})


@pytest.fixture(scope="session")
def torch_debug_run(tmp_path_factory):
    return SampleRun(tmp_path_factory.mktemp("torch_debug"), {"TORCH_COMPILE_DEBUG": "1"})

import os
import sys

import pytest

# the helper module lives beside this file; pytest runs with --import-mode=importlib (no rootdir on sys.path)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tooling_testing import SAMPLE, run_python  # noqa: E402


@pytest.fixture
def run_sample(tmp_path):
    def run(**env):
        return run_python([str(SAMPLE)], tmp_path, env)
    return run

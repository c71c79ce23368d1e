"""Real models compiled with fuse_all on CPU (slow: minutes on 2 cores). Backend: FUSE_ALL_TEST_BACKEND."""
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")      # random weights only; never reach for the hub
# the helper module lives beside this file; pytest runs with --import-mode=importlib (no rootdir on sys.path)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fuse_all_model_testing as mt  # noqa: E402


def pytest_report_header(config):
    return f"fuse-all model tests: backend={mt.BACKEND!r} (FUSE_ALL_TEST_BACKEND)"

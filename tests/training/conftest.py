"""Training steps compiled with fuse_all on CPU (slow). Backend: FUSE_ALL_TEST_BACKEND."""
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# shares the helpers of tests/models (comparison, fuse_all records)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models"))

import fuse_all_model_testing as mt  # noqa: E402


def pytest_report_header(config):
    return f"fuse-all training tests: backend={mt.BACKEND!r} (FUSE_ALL_TEST_BACKEND)"

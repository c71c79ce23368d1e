"""Fixtures of the differential fuzzer's tests (tests/fuzz).

TRITON_INTERPRET=1 must be set before triton is imported (see tests/ops/conftest.py), so it is set here
first; the fuzzer's modules and the op suite's helpers (tests/ops) are put on sys.path.
"""
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
for path in (HERE, os.path.join(os.path.dirname(HERE), "ops")):
    if path not in sys.path:
        sys.path.insert(0, path)

import pytest  # noqa: E402
import torch  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "triton: run through the Triton codegen (TRITON_INTERPRET=1 on CPU)")


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch.manual_seed(0)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()

"""Fixtures for the op correctness suite (tests/ops).

TRITON_INTERPRET=1 must be in the environment *before* triton is imported (older tritons read it once;
without it a kernel launch on CPU tensors fails with "0 active drivers"), so it is set here, first thing,
before torch (whose torch.compile imports triton) is imported. An explicit TRITON_INTERPRET in the
environment is respected. Note: this is process-wide; run GPU suites in their own pytest process.
"""
import os
import sys

_TRITON_IMPORTED_EARLY = "triton" in sys.modules
os.environ.setdefault("TRITON_INTERPRET", "1")

# the helper module lives beside this file; pytest runs with --import-mode=importlib (no sys.path games)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import zlib  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import fuse_all_optest as ot  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "triton: op test run through the Triton codegen (TRITON_INTERPRET=1 on CPU)")


def pytest_report_header(config):
    return (f"fuse-all op suite: backend={ot.BACKEND!r} (FUSE_ALL_TEST_BACKEND), "
            f"TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')!r}, bisect={ot.BISECT}")


@pytest.fixture(autouse=True)
def _seed_and_reset(request):
    """Deterministic per-test seed (from the test id) and a clean Dynamo state before and after."""
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture(autouse=True)
def _triton_interpret_guard(request):
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("codegen") == "triton":
        if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
            pytest.skip("Triton codegen on CPU tensors needs TRITON_INTERPRET=1 set before triton is imported")
        if _TRITON_IMPORTED_EARLY:
            import triton
            knobs = getattr(triton, "knobs", None)
            if knobs is not None and not knobs.runtime.interpret:
                pytest.skip("triton was imported before tests/ops/conftest.py could set TRITON_INTERPRET=1")
    yield

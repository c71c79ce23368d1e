"""Suite-wide settings. CI has no GPU: Triton kernels run in Triton's CPU interpreter, which reads
TRITON_INTERPRET when triton is imported, so it is set before any test imports torch or triton.
Tests marked `cuda` need a GPU and skip without one; on a GPU machine `python -m pytest -m cuda` runs them
(tests/cuda/conftest.py compiles Triton for the GPU there). bench/gpu_*.py add timings."""
import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# every Program the suite compiles is checked against the codegen contract (fuse_all_ir/validate.py)
os.environ.setdefault("FUSE_ALL_VALIDATE", "1")


def pytest_collection_modifyitems(config, items):
    cuda_tests = [item for item in items if item.get_closest_marker("cuda")]
    if not cuda_tests:
        return
    import torch

    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs CUDA (run `python -m pytest -m cuda` on a GPU machine)")
        for item in cuda_tests:
            item.add_marker(skip)

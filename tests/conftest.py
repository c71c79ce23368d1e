"""Suite-wide settings. CI has no GPU: Triton kernels run in Triton's CPU interpreter, which reads
TRITON_INTERPRET when triton is imported, so it is set before any test imports torch or triton.
Tests marked `cuda` need a GPU and skip without one; on a GPU machine `python -m pytest -m cuda` runs them
(tests/cuda/conftest.py compiles Triton for the GPU there). bench/gpu_*.py add timings."""
import logging
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# every Program the suite compiles is checked against the codegen contract (fuse_all_ir/validate.py)
os.environ.setdefault("FUSE_ALL_VALIDATE", "1")
# torch's AOTAutograd cache off (for Inductor and fuse_all alike): a graph compiled by an earlier test or
# run would be loaded instead of compiled, without the warnings, logs and records the tests look at. The
# warm start through it is tested in new processes (tests/meta/test_graph_cache.py).
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")


def pytest_configure(config):
    # Before any test module imports torch/triton. `-m cuda` compiles for the GPU; everything else runs
    # Triton's CPU interpreter. An explicit TRITON_INTERPRET in the environment wins either way.
    on_gpu = (config.option.markexpr or "").strip() == "cuda"
    os.environ.setdefault("TRITON_INTERPRET", "0" if on_gpu else "1")


@pytest.fixture(autouse=True)
def _fuse_all_logs_reach_caplog(request):
    """torch's logging set-up (run again by torch._logging.set_logs, or by fuse_all.logs once TORCH_LOGS is
    read) makes registered loggers, ours included, stop propagating to the root logger where caplog listens,
    and may raise their level: for a test that reads caplog, let fuse_all's warnings through to it."""
    if "caplog" not in request.fixturenames:
        yield
        return
    logger = logging.getLogger("fuse_all")
    saved = logger.propagate, logger.level, logger.disabled
    logger.propagate, logger.disabled = True, False
    if logger.level > logging.WARNING:
        logger.setLevel(logging.NOTSET)
    yield
    logger.propagate, logger.disabled = saved[0], saved[2]
    logger.setLevel(saved[1])


def pytest_collection_modifyitems(config, items):
    cuda_tests = [item for item in items if item.get_closest_marker("cuda")]
    if not cuda_tests:
        return
    import torch

    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs CUDA (run `python -m pytest -m cuda` on a GPU machine)")
        for item in cuda_tests:
            item.add_marker(skip)

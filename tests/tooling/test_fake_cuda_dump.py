"""bench/fake_cuda_dump.py: a training step's CUDA programs (layout, kernels, host program), no GPU needed."""
import importlib.util
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def fake_cuda_dump():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("fake_cuda_dump", BENCH / "fake_cuda_dump.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _conv_block_graphs():
    """Forward and backward of conv 3x3, batch norm, ReLU, 3x3/2 max pool, conv 3x3, captured on CPU."""
    import fuse_all_capture as capture
    from fuse_all.backend import _decompositions
    torch.manual_seed(0)
    conv1, bn = torch.nn.Conv2d(3, 128, 3, padding=1), torch.nn.BatchNorm2d(128)
    conv2 = torch.nn.Conv2d(128, 128, 3)
    x = torch.randn(2, 3, 16, 16)

    def loss(x):
        return conv2(F.max_pool2d(F.relu(bn(conv1(x))), 3, 2, 1)).square().mean()
    return capture.capture(loss, x, training=True, decompositions=_decompositions())


def test_training_graphs_lower_with_the_cuda_choices(fake_cuda_dump):
    results = list(fake_cuda_dump.compile_graphs_for_cuda(_conv_block_graphs()))
    assert [graph.kind for graph, *_ in results] == ["forward", "backward"]
    forward, fw_layout, fw_program, fw_host, fw_sources = results[0]
    backward, bw_layout, bw_program, bw_host, _ = results[1]
    # CUDA's choices, not CPU's: channels-last activations with the 3x3 weights cloned in the graph
    assert fw_layout.startswith("channels-last applied") and "weights converted in the graph" in fw_layout
    assert bw_layout.startswith("strides re-derived")
    assert forward.device == backward.device == "cuda:0" == fw_program.device == bw_program.device
    assert "empty_strided_cuda" in fw_host and "empty_strided_cuda" in bw_host
    assert all("@triton.jit" in source for source in fw_sources.values())
    # the saved activations (not the parameters, not the input x) reach the backward channels-last, as
    # AOTAutograd restrides them on a GPU
    saved = [v for v in backward.example_inputs
             if isinstance(v, torch.Tensor) and v.dim() == 4 and v.shape[:2] == (2, 128)]
    assert saved and all(v.is_contiguous(memory_format=torch.channels_last) and v.device.type == "cuda"
                         for v in saved)

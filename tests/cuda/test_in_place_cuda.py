"""In-place buffer reuse on a real GPU (marker `cuda`): compiled Triton kernels that read their input
through their output (fuse_all_ir.in_place), autotuned on scratch copies, must match eager on the first
call (compile + autotune) and later ones (fast launch path). The kernel example `in_place` (row, column
and pointwise kernels in place) runs in test_triton_on_cuda.py with every other example."""
from __future__ import annotations

import pytest
import torch

import fuse_all
import fuse_all_optest as ot
from tiny_resnet import tiny_resnet

pytestmark = pytest.mark.cuda


@pytest.fixture(autouse=True)
def full_float32():
    """TF32 off: with contiguous input the compiled net runs its convolutions channels-last (layout
    optimisation) and eager NCHW; TF32's rounding differs between cuDNN's two algorithms by ~1e-3."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
def test_conv_batchnorm_relu_residual_net_in_place_on_the_gpu(layout):
    torch.manual_seed(0)
    net = tiny_resnet().cuda()
    x = ot.make((4, 3, 32, 32), layout=layout).cuda()
    with torch.no_grad():
        ot.check(net, x, codegen="triton", atol=1e-4, rtol=1e-4)
    graph = fuse_all.compiled_graphs()[-1]
    assert graph.fallback_reason is None, graph.fallback_reason
    with open(graph.output_code) as f:
        source = f.read()
    body = source[source.index("def call("):source.index("def _call_profiled(")]
    assert body.count("in place") >= 6, body       # as on the CPU (tests/ops/test_in_place_reuse.py)

"""The Triton codegen and the fuse_all backend on a real GPU (marker `cuda`; see conftest.py for the command).

CI runs the same kernels in Triton's CPU interpreter; what only a GPU shows is checked here: compiled (not
interpreted) kernels, the launcher, autotuning, float reductions on the GPU's summation order, dynamic shapes,
fp16/bf16, training, and mode="reduce-overhead" (CUDA graphs)."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fuse_all
import fuse_all_optest as ot
import kernel_examples as ke

pytestmark = pytest.mark.cuda
DEVICE = "cuda"

REDUCTION_EXAMPLES = [name for name, make in ke.EXAMPLES.items()
                      if any(k.reduction for k in make("cpu").program.kernels.values())]


def run_example(name, tmp_path, **target_options):
    from fuse_all_codegen_triton import TritonTarget, wait_compiled
    from fuse_all_ir import load_host_program, render_host_program
    example = ke.EXAMPLES[name](DEVICE)
    module = load_host_program(render_host_program(example.program, TritonTarget(**target_options)), str(tmp_path))
    wait_compiled(module)
    for _ in range(2):   # the first call compiles and autotunes; the second takes the fast launch path
        outputs = module.call(list(example.inputs))
        ke.assert_outputs_match(outputs, example.expected(example.inputs), example)


@pytest.mark.parametrize("name", list(ke.EXAMPLES))
def test_kernel_example(name, tmp_path):
    run_example(name, tmp_path)


@pytest.mark.parametrize("name", REDUCTION_EXAMPLES)
def test_kernel_example_looped(name, tmp_path):
    run_example(name, tmp_path, force_looped=True, rblock=128)


def cuda(shape, dtype=torch.float32, layout="contiguous", **kw):
    """ot.make's layouts, on the GPU (the view is taken after the move, so strides and offsets are kept)."""
    base_shape, view = ot._layout_plan(tuple(shape), layout)
    return view(ot.make(base_shape, dtype, **kw).to(DEVICE))


def no_fallback():
    graphs = fuse_all.compiled_graphs()
    assert graphs, "fuse_all compiled nothing"
    assert all(g.fallback_reason is None and g.language == "triton" for g in graphs), \
        [(g.graph_id, g.language, g.fallback_reason) for g in graphs]


POINTWISE = {
    "chain": lambda x, y: (x.cos() * y).sin() + y.exp(),
    "broadcast_where": lambda x, y: torch.where(x > 0, x, y[0] * 2) - x.abs().sqrt(),
    "gelu_tanh": lambda x, y: F.gelu(x * y, approximate="tanh"),
}


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=ot.dtype_id)
def test_pointwise(layout, dtype):
    ot.check_ops(POINTWISE, cuda((67, 129), dtype, layout), cuda((67, 129), dtype), codegen="triton")
    no_fallback()


REDUCTIONS = {
    "softmax": lambda x: x.softmax(-1),
    "log_softmax_dim0": lambda x: x.log_softmax(0),
    "layer_norm_gelu": lambda x: F.gelu(F.layer_norm(x, x.shape[-1:])),
    "var_mean": lambda x: torch.var_mean(x, 1),
    "amax_argmin": lambda x: (x.amax(0), x.argmin(-1)),
}


@pytest.mark.parametrize("shape", [(33, 7), (129, 4099)], ids=["small", "wide"])
def test_reductions(shape):
    ot.check_ops(REDUCTIONS, cuda(shape), codegen="triton", atol=1e-4, rtol=1e-4)
    no_fallback()


@pytest.mark.parametrize("numel", [1 << 20, (1 << 26) + 3])
def test_long_sum_is_as_close_to_float64_as_eager(numel):
    x = torch.rand(numel, device=DEVICE) - 0.3
    compiled = ot.compile_fn(lambda t: (t * 2).sum(), "triton")
    ot.assert_near_float64(compiled(x), (x * 2).sum(), (x.double() * 2).sum(), "sum", atol=1e-4)
    no_fallback()


def test_matmul_epilogue_and_conv():
    def fn(x, w, b, image, kernel):
        return F.gelu(F.linear(x, w, b)).softmax(-1), F.relu(F.conv2d(image, kernel, padding=1)).mean((2, 3))

    ot.check(fn, cuda((8, 32)), cuda((16, 32)), cuda((16,)), cuda((2, 3, 9, 9), layout="channels_last"),
             cuda((4, 3, 3, 3)), codegen="triton", atol=1e-3, rtol=1e-3)
    no_fallback()


def test_dynamic_batch_compiles_once_more_and_matches():
    counter = ot.CountingBackend("triton")
    fn = torch.compile(lambda x: (x - x.mean(0)).square().sum(-1), backend=counter)
    for rows in (4, 7, 11, 16):
        x = cuda((rows, 37))
        torch.testing.assert_close(fn(x), (x - x.mean(0)).square().sum(-1), atol=1e-4, rtol=1e-5)
    assert counter.frame_count == 2     # static first, then one dynamic graph for every later size
    no_fallback()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(F.relu(self.bn(self.conv(x))).mean((2, 3))).log_softmax(-1)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_training_step_gradients_against_float64(layout):
    x = cuda((4, 3, 12, 10), layout=layout, requires_grad=True)
    ot.check(Block().to(DEVICE).train(), x, codegen="triton", grad=True, atol=1e-4, rtol=1e-4,
             grad_vs_float64=True)
    no_fallback()


def test_reduce_overhead_replays_cuda_graphs():
    model = Block().to(DEVICE).eval()
    compiled = torch.compile(model, backend="fuse_all", mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(10):
            x = torch.randn(4, 3, 12, 10, device=DEVICE)    # a fresh tensor each call (the allocator may reuse an address)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    no_fallback()
    (graph,) = fuse_all.compiled_graphs()
    stats = graph.cudagraphs["stats"]
    assert stats["captures"] >= 1 and stats["replays"] >= 3, stats   # the last calls replay
    # A new input tensor on each call: re-captured once with a buffer it is copied into, never run plainly
    # (runtime-cudagraphs README); decisions lists only the reasons for plain calls.
    assert graph.cudagraphs["decisions"] == [], graph.cudagraphs
    assert stats["plain_calls"] == 0, stats



@pytest.mark.parametrize("mode", ["max-autotune", "max-autotune-no-cudagraphs"])
def test_max_autotune_modes_match_eager(mode):
    """The wider config space (mid-size pointwise kernels benchmark several programs sizes) computes what
    eager does; "max-autotune" replays CUDA graphs as "reduce-overhead" does, the other mode does not."""
    fuse_all.reset()
    torch._dynamo.reset()
    model = Block().to(DEVICE).eval()
    compiled = torch.compile(model, backend="fuse_all", mode=mode)
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(32, 3, 40, 40, device=DEVICE)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    no_fallback()
    (graph,) = fuse_all.compiled_graphs()
    replays = (graph.cudagraphs.get("stats") or {}).get("replays", 0)
    assert (replays >= 3) if mode == "max-autotune" else (replays == 0), graph.cudagraphs

"""In-place buffer reuse end to end (fuse_all_ir.in_place, memory.py): a kernel writes its output into
the memory of an input that dies with it -- BatchNorm(+ReLU) on a convolution's output in inference,
residual adds, a row normalisation of a matmul's result. Held to eager like every op test, on both
codegens (Triton in its CPU interpreter), and the host program must show the reuse happened."""
import os

import pytest
import torch

import fuse_all
from fuse_all_optest import BOTH, check, make
from tiny_resnet import tiny_resnet


def _host_program() -> str:
    graph = fuse_all.compiled_graphs()[-1]
    assert graph.fallback_reason is None, graph.fallback_reason
    with open(graph.output_code) as f:
        return f.read()


def _call_body(source: str) -> str:
    return source[source.index("def call("):source.index("def _call_profiled(")]


@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
@pytest.mark.parametrize("codegen", BOTH)
def test_conv_batchnorm_relu_and_residual_blocks_in_inference(codegen, layout):
    torch.manual_seed(0)
    net = tiny_resnet()
    x = make((2, 3, 12, 12), layout=layout)
    with torch.no_grad():
        check(net, x, codegen=codegen)
    body = _call_body(_host_program())
    # each of the 6 kernels applying BatchNorm(+ReLU, + the residual) to a conv's output writes into it
    # (the last block's is fused into the average pool, a reduction to another shape); from contiguous
    # input some kernels also write a second copy in place of another input
    assert body.count("in place") >= 6, body
    if layout == "channels_last":       # every activation is a conv's output, reused: none allocated by us
        assert "empty_strided_cpu((2, 8, 12, 12)" not in body, body


@pytest.mark.parametrize("codegen", BOTH)
def test_a_row_normalisation_of_a_matmul_result_in_place(codegen, monkeypatch):
    """The reduction reads each row whole before the same kernel point overwrites it. (A variance would not
    go in place: its one-pass form shifts by the row's first element, re-read while the row is written.)
    The products are ATen calls here (Triton would make these small ones reductions)."""
    monkeypatch.setenv("FUSE_ALL_SMALL_MATMUL_ROWS", "0")
    def f(x, w, v):
        y = x @ w
        return ((y - y.mean(-1, keepdim=True)) * torch.rsqrt((y * y).mean(-1, keepdim=True) + 1e-5)) @ v
    x, w, v = make((16, 32)), make((32, 32)), make((32, 8))
    check(f, x, w, v, codegen=codegen)
    assert "in place" in _call_body(_host_program())


@pytest.mark.parametrize("codegen", BOTH)
def test_transposed_and_broadcast_reads_stay_out_of_place(codegen, monkeypatch):
    monkeypatch.setenv("FUSE_ALL_SMALL_MATMUL_ROWS", "0")   # y: an ATen call's result
    def f(x, w):
        y = x @ w                                  # dies at the next kernel, read transposed and broadcast
        return ((y.t() + y[:1]).sin() @ w,)
    x, w = make((16, 16)), make((16, 16))
    check(f, x, w, codegen=codegen)
    assert "in place" not in _call_body(_host_program())


def test_reuse_off_turns_in_place_off_too(monkeypatch):
    monkeypatch.setenv("FUSE_ALL_REUSE_BUFFERS", "0")
    torch.manual_seed(0)
    with torch.no_grad():
        check(tiny_resnet(), make((2, 3, 12, 12), layout="channels_last"))
    body = _call_body(_host_program())
    assert "in place" not in body and "# reuse" not in body
    assert os.environ["FUSE_ALL_REUSE_BUFFERS"] == "0"

"""Grouped convolutions of a 1 x 1 input as batched products (fuse_all_ir/conv_as_matmul.py) through the whole
backend: the Triton target rewrites them (here in Triton's interpreter on CPU; tests/cuda/test_conv_as_matmul_cuda.py
on the GPU), held to eager with the usual harness, static and dynamic batch; the C++ target keeps the convolution."""
import pytest
import torch
import torch.nn.functional as F

from fuse_all_optest import check, compile_fn, extern_targets, make

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def block(x, w1, w2, b2, scale):
    """A grouped 3 x 3 convolution with a bias between two ungrouped 1 x 1 ones, ReLU and a scale after it."""
    y = torch.relu(F.conv2d(x, w1))
    y = torch.relu(F.conv2d(y, w2, b2, padding=1, groups=8) * scale.view(1, -1, 1, 1))
    return F.conv2d(y, w1.transpose(0, 1).contiguous()) + x


def _inputs(batch=5, channels_last=False):
    x = make((batch, 32, 1, 1))
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    return x, make((32, 32, 1, 1)) / 6, make((32, 4, 3, 3)) / 6, make((32,)), make((32,))


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_a_grouped_convolution_of_one_pixel_is_a_product(channels_last):
    check(block, *_inputs(channels_last=channels_last), codegen="triton")
    assert extern_targets({"aten.bmm.default", "aten.convolution.default"}).count("aten.bmm.default") == 1
    assert extern_targets({"aten.convolution.default"}) == ["aten.convolution.default"] * 2


def test_a_batch_that_changes_is_dynamic_and_still_a_product():
    """Dynamo's automatic dynamic shapes: the second batch size recompiles with the batch symbolic (channels
    and the pixel stay static, so the rewrite still applies), the third reuses that graph."""
    import fuse_all
    fuse_all.reset()
    torch._dynamo.reset()
    _, *weights = _inputs()
    fn = compile_fn(block, "triton", fullgraph=True)
    with torch.no_grad():
        for batch in (6, 11, 3):
            x = make((batch, 32, 1, 1))
            expected = block(*[t.double() for t in (x, *weights)])
            torch.testing.assert_close(fn(x, *weights).double(), expected, rtol=1e-4, atol=1e-4)
    graphs = fuse_all.compiled_graphs()
    assert len(graphs) == 2
    assert all("aten.bmm.default" in [e.target for e in g.externs] for g in graphs)


def test_the_cpp_target_keeps_the_convolution():
    check(block, *_inputs(), codegen="cpp")
    assert "aten.bmm.default" not in extern_targets()
    assert extern_targets({"aten.convolution.default"}) == ["aten.convolution.default"] * 3

"""`convs_as_matmuls`: which grouped convolutions of 1 x 1 inputs become a batched product of their one
weight tap, and that the rewritten graph computes what the convolution did (float64 reference; the graphs
run here on CPU tensors, tests/cuda/test_conv_as_matmul_cuda.py runs them compiled on the GPU)."""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from fuse_all_ir import convs_as_matmuls
from fuse_all_ir.conv_as_matmul import the_tap

aten = torch.ops.aten


def _conv(x, w, b=None, stride=1, padding=1, dilation=1, groups=32):
    return aten.convolution(x, w, b, [stride, stride], [padding, padding], [dilation, dilation], False, [0, 0],
                            groups)


def _targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def _check(fn, args, rewritten: int):
    gm = make_fx(fn, tracing_mode="fake")(*args)
    assert convs_as_matmuls(gm) == rewritten
    gm.graph.lint()
    targets = _targets(gm)
    assert targets.count(aten.bmm.default) == rewritten
    expected = fn(*[a.double() if isinstance(a, torch.Tensor) else a for a in args])
    got = gm(*args)
    assert got.shape == expected.shape
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)
    return targets


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("stride", [1, 2])
def test_grouped_3x3_on_one_pixel_is_a_batched_product(channels_last, bias, stride):
    x, w = torch.randn(5, 64, 1, 1), torch.randn(96, 2, 3, 3)
    if channels_last:
        x, w = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
    b = torch.randn(96) if bias else None
    targets = _check(lambda x, w, b: torch.relu(_conv(x, w, b, stride=stride)), (x, w, b), 1)
    assert aten.convolution.default not in targets


def test_padding_and_dilation_pick_the_tap():
    """5 x 5 kernel, padding 2: the centre tap; 3 x 3 with dilation 2 and padding 2: still the centre;
    padding 0 on a 1 x 1 kernel (a grouped 1 x 1 convolution): tap (0, 0)."""
    x = torch.randn(3, 16, 1, 1)
    _check(lambda x, w: _conv(x, w, padding=2, groups=4), (x, torch.randn(8, 4, 5, 5)), 1)
    _check(lambda x, w: _conv(x, w, padding=2, dilation=2, groups=4), (x, torch.randn(8, 4, 3, 3)), 1)
    _check(lambda x, w: _conv(x, w, padding=0, groups=4), (x, torch.randn(8, 4, 1, 1)), 1)
    # depthwise: one input channel per group
    _check(lambda x, w: _conv(x, w, groups=16), (x, torch.randn(32, 1, 3, 3)), 1)


def test_a_block_of_resnext_shape():
    """ResNeXt's bottleneck at a 1 x 1 activation: 1x1 -> grouped 3x3 -> 1x1; only the grouped one changes."""
    x = torch.randn(4, 64, 1, 1)
    ws = (torch.randn(128, 64, 1, 1) / 8, torch.randn(128, 4, 3, 3) / 2, torch.randn(64, 128, 1, 1) / 11)

    def block(x, w0, w1, w2):
        y = torch.relu(_conv(x, w0, padding=0, groups=1))
        y = torch.relu(_conv(y, w1))
        return _conv(y, w2, padding=0, groups=1) + x
    targets = _check(block, (x, *ws), 1)
    assert targets.count(aten.convolution.default) == 2


def _tap_of(fn, *args):
    gm = make_fx(fn, tracing_mode="fake")(*args)
    (conv,) = [n for n in gm.graph.nodes if n.target is aten.convolution.default]
    return the_tap(conv)


def test_what_stays_a_convolution():
    w = torch.randn(64, 2, 3, 3)
    assert _tap_of(lambda x, w: _conv(x, w), torch.randn(2, 64, 1, 1), w) == (1, 1)
    assert _tap_of(lambda x, w: _conv(x, w), torch.randn(2, 64, 2, 2), w) is None            # 2 x 2 input
    assert _tap_of(lambda x, w: _conv(x, w, stride=2), torch.randn(2, 64, 2, 2), w) is None  # 1 x 1 out, 4 taps
    assert _tap_of(lambda x, w: _conv(x, w, groups=1), torch.randn(2, 2, 1, 1),
                   torch.randn(64, 2, 3, 3)) is None                                       # not grouped
    assert _tap_of(lambda x, w: _conv(x, w, padding=0), torch.randn(2, 64, 3, 3), w) is None  # 3 x 3 input
    # padding 1 with dilation 2: no tap lands on the pixel (output 1 x 1 reads only padding)
    assert _tap_of(lambda x, w: _conv(x, w, padding=1, dilation=2), torch.randn(2, 64, 1, 1),
                   torch.randn(64, 2, 2, 2)) is None
    # a sliced input whose channels are not contiguous cannot be viewed as [N, G, C / G]
    assert _tap_of(lambda x, w: _conv(x[:, ::2], w), torch.randn(2, 128, 1, 1), w) is None
    # transposed convolutions are not products of one tap
    assert _tap_of(lambda x, w: aten.convolution(x, w, None, [1, 1], [1, 1], [1, 1], True, [0, 0], 32),
                   torch.randn(2, 64, 1, 1), torch.randn(64, 2, 3, 3)) is None


def test_nothing_to_rewrite_leaves_the_graph():
    gm = make_fx(lambda x, w: _conv(x, w, groups=1), tracing_mode="fake")(torch.randn(2, 8, 5, 5),
                                                                          torch.randn(8, 8, 3, 3))
    before = gm.code
    assert convs_as_matmuls(gm) == 0 and gm.code == before


def test_a_dynamic_batch_is_inferred_by_the_views():
    """Under dynamic shapes the batch is a SymInt (channels and the pixel stay static): the rewrite keeps it
    symbolic (views with -1), and the one compiled graph serves every batch size."""
    from torch._dynamo.backends.common import aot_autograd

    rewritten = []

    def compiler(gm, example_inputs):
        rewritten.append(convs_as_matmuls(gm))
        gm.graph.lint()
        return gm

    w = torch.randn(96, 2, 3, 3)
    torch._dynamo.reset()
    fn = torch.compile(lambda x, w: torch.relu(_conv(x, w)), backend=aot_autograd(fw_compiler=compiler))
    with torch.no_grad():
        for batch in (6, 11, 3):
            xb = torch.randn(batch, 64, 1, 1)
            torch._dynamo.mark_dynamic(xb, 0)
            torch.testing.assert_close(fn(xb, w).double(), torch.relu(_conv(xb.double(), w.double())),
                                       rtol=1e-5, atol=1e-5)
    assert rewritten == [1]
    torch._dynamo.reset()


def test_every_new_node_keeps_the_convolutions_source_line():
    """The fusion report and the editor's hover name a kernel's or ATen call's source through these keys."""
    gm = make_fx(lambda x, w: torch.relu(_conv(x, w)), tracing_mode="fake")(torch.randn(2, 64, 1, 1),
                                                                            torch.randn(64, 2, 3, 3))
    (conv,) = [n for n in gm.graph.nodes if n.target is aten.convolution.default]
    conv.meta["stack_trace"] = 'File "model.py", line 7, in forward'
    location = {"file": "model.py", "line": 7, "code": "y = self.conv(x)", "function": "forward"}
    conv.meta["source_loc"] = location   # what capture attaches (fuse_all_capture.provenance.annotate_nodes)
    old = set(gm.graph.nodes)
    assert convs_as_matmuls(gm) == 1
    new = [n for n in gm.graph.nodes if n not in old]
    assert aten.bmm.default in [n.target for n in new]
    assert all(n.meta.get("stack_trace") == 'File "model.py", line 7, in forward' for n in new)
    assert all(n.meta.get("source_loc") == location for n in new)

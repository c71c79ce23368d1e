"""torchvision ResNet50 and timm ResNeXt101 (random weights, eval mode) compiled with fuse_all on CPU.

Each model is compiled once per module (a fixture) and checked three ways: matches eager (first and second
call), fuse_all compiled the graph itself (no ATen fallback, kernels > 0), and the fusion that makes it
fast happened: every convolution (an ATen call) is followed by exactly one kernel doing its batch norm and
ReLU (and, at the end of a bottleneck block, the residual add).
"""
import os

import pytest
import torch

import fuse_all_model_testing as mt

pytestmark = pytest.mark.slow


def _resnet50(shape):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).eval()
    mt.randomize_norms(model)
    return mt.compile_and_run(model, torch.randn(*shape))


@pytest.fixture(scope="module")
def resnet50_64():
    return _resnet50((1, 3, 64, 64))


@pytest.fixture(scope="module")
def resnet50_224():
    return _resnet50((1, 3, 224, 224))


@pytest.fixture(scope="module")
def resnext101_7x7():
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    model = timm.create_model("resnext101_32x8d", pretrained=False, num_classes=2).eval()
    mt.randomize_norms(model)
    return mt.compile_and_run(model, torch.randn(64, 3, 7, 7))


CASES = ["resnet50_64", "resnet50_224", "resnext101_7x7"]


@pytest.mark.parametrize("case", CASES)
def test_matches_eager(case, request):
    mt.check_matches_eager(request.getfixturevalue(case), case)


@pytest.mark.parametrize("case", CASES)
def test_compiled_by_fuse_all(case, request):
    mt.assert_compiled(request.getfixturevalue(case).records, {"inference"})


def _convolutions(record):
    return [e for e in record.externs if e.target.startswith("aten.convolution")]


def test_resnet50_conv_then_one_bn_relu_kernel(resnet50_64):
    """Each convolution's output is read by one kernel, and that kernel applies batch norm and ReLU."""
    mt.require_fuse_all()
    (record,) = resnet50_64.records
    convs = _convolutions(record)
    assert len(convs) == 53, f"ResNet50 has 53 convolutions; the graph has {len(convs)} ATen convolution calls"
    problems = []
    for conv in convs:
        where = f"{conv.origins[0].code!r} (line {conv.origins[0].line})" if conv.origins else conv.outputs[0]
        readers = mt.consumers(record, conv.outputs[0])
        if len(readers) != 1:
            problems.append(f"{where}: output read by {len(readers)} kernels, expected 1:\n{mt.show(readers)}")
            continue
        kernel_ops = mt.ops(readers[0])
        # eval batch norm decomposes to (x - mean) * rsqrt(var + eps) * w + b; a native lowering keeps its name
        has_bn = any("rsqrt" in op or "batch_norm" in op for op in kernel_ops)
        if not (has_bn and any("relu" in op for op in kernel_ops)):
            problems.append(f"{where}: the kernel after it is not batch norm + ReLU: {sorted(kernel_ops)}")
    assert not problems, "\n".join(problems)


def test_resnet50_kernel_origins_point_at_user_lines(resnet50_64):
    """Provenance: the stem's kernel (after conv1) comes from `self.bn1(x)` and `self.relu(x)` in resnet.py."""
    mt.require_fuse_all()
    (record,) = resnet50_64.records
    stem = _convolutions(record)[0]
    (kernel,) = mt.consumers(record, stem.outputs[0])
    lines = {(os.path.basename(o.file or ""), o.code) for o in kernel.origins}
    assert ("resnet.py", "x = self.bn1(x)") in lines and ("resnet.py", "x = self.relu(x)") in lines, lines
    assert all(o.line for o in kernel.origins if o.file), "origins with a file but no line number"

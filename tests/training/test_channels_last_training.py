"""torchvision ResNet18 (small inputs) compiled with fuse_all on CPU with channels-last convolutions
(`fuse_all_ir.layout`): inference and two SGD steps against float64 (outputs, loss, gradients, updated
parameters and BatchNorm buffers, all with eager's strides), and the layout each graph ran with."""
import sys
from pathlib import Path

import pytest
import torch

import fuse_all_model_testing as mt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import layout_checks  # noqa: E402

pytestmark = pytest.mark.slow


def _compile(model):
    return torch.compile(model, backend="fuse_all", options={"fallback": False})


@pytest.fixture
def resnet18():
    pytest.importorskip("torchvision")
    mt.require_fuse_all()
    mt.reset()
    torch.manual_seed(0)
    model = layout_checks.resnet18()
    mt.randomize_norms(model)
    yield model
    mt.reset()


def test_resnet18_inference(resnet18):
    # the weight cache: without it CPU inference keeps ResNet's dense convolutions NCHW (layout_decision.py)
    layout_checks.check_inference(resnet18, torch.randn(2, 3, 32, 32), lambda m: torch.compile(
        m, backend="fuse_all", options={"fallback": False, "weight_layout_cache": True}))
    records = mt.records()
    mt.assert_compiled(records, {"inference"})
    assert layout_checks.layout_lines(records)["inference"] == [
        "channels-last applied: 20 CPU convolutions: oneDNN runs channels-last faster; "
        "1 layout copy of convolution inputs"]


def test_resnet18_training_steps(resnet18):
    # 64x64, not 32x32: at 32x32 layer4 is 1x1, and train-mode batch norm over 2 values is so ill-conditioned
    # that fuse_all's running mean there is 4.7x further from float64 than eager's (layout optimisation on or off).
    # Smooth activations: with ReLUs, one ReLU input within rounding of zero moves every earlier gradient by
    # ~1e-3, and which rounding hits one depends on oneDNN's algorithms, i.e. on the CPU (on an AVX-512/AMX
    # Xeon step 2's gradients were 3.5e-3 off float64 in the compiled channels-last run, 6e-6 in eager NCHW);
    # the ReLU network is checked in float64 below, where no kink is hit by rounding.
    model = layout_checks.smooth_activations(resnet18)
    layout_checks.check_training(model, torch.randn(2, 3, 64, 64), torch.randint(0, 10, (2,)), _compile)
    records = mt.records()
    mt.assert_compiled(records, {"forward", "backward"})
    lines = layout_checks.layout_lines(records)
    assert lines["forward"] == ["channels-last applied: 20 CPU convolutions: oneDNN runs channels-last faster; "
                                "1 layout copy of convolution inputs"]
    assert lines["backward"] == ["strides re-derived from the saved activations' layout (channels-last forward)"]


def test_resnet18_training_steps_float64_with_relus(resnet18):
    layout_checks.check_training_float64(resnet18, torch.randn(2, 3, 64, 64), torch.randint(0, 10, (2,)), _compile)
    mt.assert_compiled(mt.records(), {"forward", "backward"})

"""Conv nets compiled with channels-last layout optimisation (`fuse_all_ir.layout`), checked against eager.

Shared by tests/ops/test_channels_last.py and tests/training/test_channels_last_training.py (CPU) and
tests/cuda/test_layout_cuda.py (GPU). Every value is judged against a float64 run of the same model: the
compiled run must be about as close to it as eager float32 is (`fuse_all_model_testing`), and every tensor the
caller sees (outputs, gradients, parameters) must have eager's strides, whatever layout ran inside.
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent / "models"))
import fuse_all_model_testing as mt  # noqa: E402


class ConvBNReLU(nn.Module):
    """Three Conv-BN-ReLU stages (one with more than 64 output channels, none with twice as many input as
    output channels, so Inductor's rules pick channels-last on a GPU too); returns the logits and the last
    feature map, a user-visible 4-D output whose NCHW strides must survive."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 96, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(96), nn.ReLU(),
            nn.Conv2d(96, 96, 3, padding=1), nn.BatchNorm2d(96), nn.ReLU())
        self.fc = nn.Linear(96, classes)

    def forward(self, x):
        features = self.features(x)
        return self.fc(features.mean((2, 3))), features


def resnet18(classes: int = 10) -> nn.Module:
    import torchvision
    return torchvision.models.resnet18(weights=None, num_classes=classes)


def _outputs(value) -> list[torch.Tensor]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def _loss(outputs: list[torch.Tensor], y: torch.Tensor) -> torch.Tensor:
    loss = F.cross_entropy(outputs[0], y)
    return loss + sum(o.float().square().mean() * 0.01 for o in outputs[1:])


def _same_strides(got: dict, want: dict, what: str) -> None:
    bad = [f"{n}: {got[n].stride()} (eager {want[n].stride()})" for n in want if got[n].stride() != want[n].stride()]
    assert not bad, f"{what}: strides differ from eager's: " + "; ".join(bad[:5])


def check_inference(model: nn.Module, x: torch.Tensor, compile_fn) -> None:
    """Eager float32, eager float64 and compiled (twice), in eval mode under no_grad."""
    model = model.eval()
    wide = copy.deepcopy(model).double()
    compiled = compile_fn(model)
    with torch.no_grad():
        eager = _outputs(model(x))
        reference = _outputs(wide(x.double()))
        for call in ("first call", "second call"):
            got = _outputs(compiled(x))
            names = [f"output {i}" for i in range(len(eager))]
            mt.assert_as_close_to_fp64_as_eager(dict(zip(names, got)), dict(zip(names, eager)),
                                                dict(zip(names, reference)), f"inference {call}")
            _same_strides(dict(zip(names, got)), dict(zip(names, eager)), f"inference {call}")


def check_training(model: nn.Module, x: torch.Tensor, y: torch.Tensor, compile_fn, steps: int = 2) -> None:
    """`steps` SGD steps of the compiled model; before each, eager float32 and float64 copies take the same
    step from the same state. Loss, outputs, gradients, updated parameters and BatchNorm buffers are judged
    against float64 (and their strides against eager's)."""
    model = model.train()
    eager, wide = copy.deepcopy(model), copy.deepcopy(model).double()
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) for m in (eager, wide, model)]
    compiled = compile_fn(model)
    for step in range(1, steps + 1):
        with torch.no_grad():
            for ref in (eager, wide):
                for d, s in zip(list(ref.parameters()) + list(ref.buffers()),
                                list(model.parameters()) + list(model.buffers())):
                    d.copy_(s)
        states = []
        for m, fn, opt, inputs in ((eager, eager, optimizers[0], x), (wide, wide, optimizers[1], x.double()),
                                   (model, compiled, optimizers[2], x)):
            opt.zero_grad(set_to_none=True)
            outputs = _outputs(fn(inputs))
            loss = _loss(outputs, y)
            loss.backward()
            state = {"outputs": {f"output {i}": o.detach() for i, o in enumerate(outputs)},
                     "loss": {"loss": loss.detach()},
                     "grads": {n: p.grad for n, p in m.named_parameters()}}
            opt.step()
            state["params"] = {n: p.detach() for n, p in m.named_parameters()}
            state["buffers"] = {n: b.detach() for n, b in m.named_buffers()}
            states.append(state)
        for part in ("outputs", "loss", "grads", "params", "buffers"):
            got, want, reference = (s[part] for s in (states[2], states[0], states[1]))
            mt.assert_as_close_to_fp64_as_eager(got, want, reference, f"step {step} {part}")
            _same_strides(got, want, f"step {step} {part}")


def layout_lines(records) -> dict[str, list[str]]:
    """kind -> the layout decisions fuse_all recorded for its graphs of that kind."""
    lines: dict[str, list[str]] = {}
    for record in records:
        lines.setdefault(record.kind, []).append(record.layout or "")
    return lines


def convolution_layouts(record) -> list[str]:
    """"NHWC" or "NCHW" for the result of each convolution a compiled graph calls (its planned layout)."""
    layouts = []
    for call in record.externs:
        if call.target == "aten.convolution.default" and call.out_specs and call.out_specs[0] is not None:
            stride = [int(s) for s in call.out_specs[0].stride]
            size = [int(s) for s in call.out_specs[0].size]
            layouts.append("NHWC" if len(size) == 4 and size[1] > 1 and stride[1] == 1 else "NCHW")
    return layouts

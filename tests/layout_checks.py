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
    feature map, a user-visible 4-D output whose NCHW strides must survive. `activation`: another one
    (a smooth one, `nn.SiLU`, where float32 gradients are compared with float64: see `check_training`)."""

    def __init__(self, classes: int = 10, activation: type[nn.Module] = nn.ReLU):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), activation(),
            nn.Conv2d(32, 96, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(96), activation(),
            nn.Conv2d(96, 96, 3, padding=1), nn.BatchNorm2d(96), activation())
        self.fc = nn.Linear(96, classes)

    def forward(self, x):
        features = self.features(x)
        return self.fc(features.mean((2, 3))), features


def smooth_activations(model: nn.Module) -> nn.Module:
    """Every `nn.ReLU` of the model replaced by `nn.SiLU` (smooth: float32 gradients then have no jumps to
    compare with float64, see `check_training`); the model, changed in place."""
    for name, child in list(model.named_children()):
        if isinstance(child, nn.ReLU):
            setattr(model, name, nn.SiLU())
        else:
            smooth_activations(child)
    return model


def resnet18(classes: int = 10) -> nn.Module:
    import torchvision
    return torchvision.models.resnet18(weights=None, num_classes=classes)


def _outputs(value) -> list[torch.Tensor]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def _loss(outputs: list[torch.Tensor], y: torch.Tensor) -> torch.Tensor:
    loss = F.cross_entropy(outputs[0], y)
    # at least float32 (a half-precision feature map), float64 kept so the float64 runs stay float64 throughout
    return loss + sum(o.to(torch.promote_types(o.dtype, torch.float32)).square().mean() * 0.01 for o in outputs[1:])


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


def _has_convolutions(model: nn.Module) -> bool:
    return any(isinstance(m, nn.Conv2d) for m in model.modules())


def _sync(dst: nn.Module, src: nn.Module) -> None:
    """dst's parameters and buffers take src's values (each keeps its own dtype and strides)."""
    with torch.no_grad():
        for d, s in zip(list(dst.parameters()) + list(dst.buffers()), list(src.parameters()) + list(src.buffers())):
            d.copy_(s)


def _train_step(m: nn.Module, fn, opt, x: torch.Tensor, y: torch.Tensor) -> dict:
    opt.zero_grad(set_to_none=True)
    outputs = _outputs(fn(x))
    loss = _loss(outputs, y)
    loss.backward()
    state = {"outputs": {f"output {i}": o.detach() for i, o in enumerate(outputs)},
             "loss": {"loss": loss.detach()},
             "grads": {n: p.grad for n, p in m.named_parameters()}}
    opt.step()
    state["params"] = {n: p.detach() for n, p in m.named_parameters()}
    state["buffers"] = {n: b.detach() for n, b in m.named_buffers()}
    return state


def check_training(model: nn.Module, x: torch.Tensor, y: torch.Tensor, compile_fn, steps: int = 2) -> None:
    """`steps` SGD steps of the compiled model; before each, eager float32 and float64 copies take the same
    step from the same state. Loss, outputs, gradients, updated parameters and BatchNorm buffers are judged
    against float64 (and their strides against eager's). For a conv net, eager float32 also runs the step
    channels-last: the compiled run (channels-last where `fuse_all_ir.layout` decides so) may be as far from
    float64 as either eager layout is (`mt.assert_as_close_to_fp64_as_eager`; on CPU, ResNet-50's step-2 loss
    is 3.2e-5 off float64 in eager channels-last and 3.1e-6 in eager NCHW).

    A ReLU net's float32 gradients jump where a ReLU input is within rounding of zero: float32 and float64 may
    put it on either side of the kink, and one such element moves every earlier layer's gradients by ~1e-3
    (ConvBNReLU, 4x3x64x64, CPU: eager float32 in either layout is 1e-3 off float64 at a step with one such
    element, 4e-6 at the others). Any other rounding (another layout, another reduction order) can hit or miss
    it, so on many elements use `smooth_activations` here and `check_training_float64` for the ReLUs."""
    model = model.train()
    eager, wide = copy.deepcopy(model), copy.deepcopy(model).double()
    references = [eager] + ([copy.deepcopy(model).to(memory_format=torch.channels_last)]
                            if _has_convolutions(model) else [])
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) for m in references + [wide, model]]
    compiled = compile_fn(model)
    for step in range(1, steps + 1):
        for ref in references + [wide]:
            _sync(ref, model)
        eager_states = [_train_step(m, m, opt, x, y) for m, opt in zip(references, optimizers)]
        reference = _train_step(wide, wide, optimizers[-2], x.double(), y)
        got = _train_step(model, compiled, optimizers[-1], x, y)
        for part in ("outputs", "loss", "grads", "params", "buffers"):
            mt.assert_as_close_to_fp64_as_eager(got[part], [s[part] for s in eager_states], reference[part],
                                                f"step {step} {part}")
            _same_strides(got[part], eager_states[0][part], f"step {step} {part}")


def check_training_float64(model: nn.Module, x: torch.Tensor, y: torch.Tensor, compile_fn, steps: int = 3,
                           tol: float = 1e-9) -> None:
    """The model in float64, compiled and eager, `steps` SGD steps, the eager copy starting each step from the
    compiled run's state (parameters, buffers, momentum). Every output, the loss, every gradient, updated
    parameter and buffer must agree to `tol` of the tensor's largest value, strides as eager's. Rounding is
    ~1e-16 there (measured: ResNet-50 on CPU, channels-last, 1e-12 at most), so unlike float32 against
    float64 no ReLU kink or ill-conditioned BatchNorm hides a wrong layout, stride or stale value."""
    model = model.train().double()
    eager = copy.deepcopy(model)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) for m in (eager, model)]
    compiled = compile_fn(model)
    x = x.double()
    for step in range(1, steps + 1):
        _sync(eager, model)
        for d, s in zip(eager.parameters(), model.parameters()):
            if "momentum_buffer" in optimizers[1].state.get(s, {}):
                optimizers[0].state[d]["momentum_buffer"] = optimizers[1].state[s]["momentum_buffer"].clone()
        want = _train_step(eager, eager, optimizers[0], x, y)
        got = _train_step(model, compiled, optimizers[1], x, y)
        for part in ("outputs", "loss", "grads", "params", "buffers"):
            bad = []
            for name, w in want[part].items():
                g = got[part][name]
                if not w.is_floating_point():
                    if not torch.equal(g, w):
                        bad.append(f"{name}: integer values differ")
                    continue
                diff, scale = float((g - w).abs().max()), float(w.abs().max())
                if not diff <= tol * scale + 1e-15:
                    bad.append(f"{name}: max abs difference {diff:.2e} (largest value {scale:.2e})")
            assert not bad, f"float64 step {step} {part}: {len(bad)} tensors differ from eager:\n" + "\n".join(bad[:10])
            _same_strides(got[part], want[part], f"float64 step {step} {part}")


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

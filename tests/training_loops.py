"""Training loops for the CUDA-graph tests: a compiled model and an eager copy trained side by side.

Shared by tests/cudagraphs (CPU, the FakeEngine) and tests/cuda (the real engine on a GPU). Each loop
style is one way users drive a training step; `train_side_by_side` runs it on both models and checks every
step against eager (loss, gradients, parameters after the optimizer step, BatchNorm's running stats), and
records what the graphs did, so a test can assert that after warm-up nothing runs plainly.
"""
from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

#: Steps before graphs must replay: step 0 warms up, step 1 captures, step 2 may re-capture once (inputs
#: that turn out to be new tensors on every call, a result the loop keeps across the next call).
WARMUP_STEPS = 3


class ResidualBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        return F.relu(x + self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))


class ConvNet(nn.Module):
    """ResNet in miniature: stem, two residual blocks, pooling, classifier."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.blocks = nn.Sequential(ResidualBlock(8), ResidualBlock(8))
        self.fc = nn.Linear(8, classes)

    def forward(self, x):
        return self.fc(self.blocks(self.stem(x)).mean((2, 3)))


class TransformerNet(nn.Module):
    """One pre-norm transformer encoder layer (dropout off: compiled and eager draw other random numbers)."""

    def __init__(self, width: int = 32, classes: int = 10):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=2 * width, dropout=0.0,
                                                batch_first=True, norm_first=True)
        self.fc = nn.Linear(width, classes)

    def forward(self, x):
        return self.fc(self.layer(x).mean(1))


def make_batch(model_name: str, batch: int, device: str, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    shape = (batch, 3, 8, 8) if model_name == "convnet" else (batch, 6, 32)
    x = torch.randn(shape, generator=generator).to(device)
    y = torch.randint(0, 10, (batch,), generator=generator).to(device)
    return x, y


MODELS = {"convnet": ConvNet, "transformer": TransformerNet}


def make_optimizer(name: str, params) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    # eps well above the float32 noise of a gradient: compiled and eager gradients differ in the last bits,
    # and Adam divides by sqrt(v) + eps, which would turn that noise into visible steps for tiny gradients
    return torch.optim.Adam(params, lr=1e-3, eps=1e-4)


@dataclass
class Side:
    """One of the two models being trained (compiled or eager) with its optimizer."""

    model: nn.Module
    loss: Callable[..., torch.Tensor]
    optimizer: torch.optim.Optimizer
    kept: list[Any] = field(default_factory=list)  # results the loop keeps (e.g. losses for logging)


def _step(style: str, side: Side, batches: list[tuple[torch.Tensor, ...]]) -> dict[str, Any]:
    """One training step in the given loop style; returns what is compared with eager."""
    opt, loss_fn = side.optimizer, side.loss
    seen: dict[str, Any] = {}
    if style == "zero_grad_after_forward":
        loss = loss_fn(*batches[0])
        opt.zero_grad()  # .grad of the previous step is still alive during the forward above
        loss.backward()
    elif style == "grad_accumulation":
        opt.zero_grad()
        loss = loss_fn(*batches[0]) / 2
        loss.backward()
        second = loss_fn(*batches[1]) / 2
        second.backward()  # accumulates into .grad, which holds the first backward's result
        loss = loss.detach() + second.detach()
    elif style == "two_forwards_one_backward":
        opt.zero_grad()
        loss = loss_fn(*batches[0]) + loss_fn(*batches[1])  # the first forward's saved tensors are alive
        loss.backward()
    else:  # "fresh_batches", "same_batch", "eval_in_between", "dynamic_shapes", "keep_losses"
        opt.zero_grad()
        loss = loss_fn(*batches[0])
        loss.backward()
    seen["loss"] = loss.detach().clone()
    seen["grads"] = [p.grad.detach().clone() for p in side.model.parameters()]
    opt.step()
    if style == "keep_losses":
        side.kept.append(loss)  # the loop keeps every loss tensor (not .item()): aliases must stay intact
        seen["kept"] = [k.detach().clone() for k in side.kept]
    if style == "eval_in_between":
        with torch.no_grad():
            seen["eval"] = loss_fn(*batches[1]).clone()
    seen["params"] = [p.detach().clone() for p in side.model.parameters()]
    seen["buffers"] = [b.detach().clone() for b in side.model.buffers() if b.is_floating_point()]
    return seen


STYLES = ("fresh_batches", "same_batch", "zero_grad_after_forward", "grad_accumulation",
          "two_forwards_one_backward", "eval_in_between", "dynamic_shapes", "keep_losses")


@dataclass
class StepLog:
    step: int
    plain_calls: int  # over every graph, cumulative
    backward_replays: int  # over every backward graph, cumulative
    replays: int
    fallback_lines: list[str]  # "running plainly" log lines emitted during this step


class _FallbackLines(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record):
        message = record.getMessage()
        if "running plainly" in message:
            self.lines.append(message)


def train_side_by_side(model_name: str, style: str, optimizer: str, compile_fn: Callable[[Callable], Callable],
                       graph_stats: Callable[[], list[tuple[str, dict[str, int]]]], *, device: str,
                       steps: int = 6, atol: float = 1e-5, rtol: float = 1e-5) -> list[StepLog]:
    """Train a compiled model and an eager copy for ``steps`` steps in ``style``; every step must match.

    compile_fn(loss_fn) -> the compiled loss function. graph_stats() -> [(kind, stats)] for every CUDA-graph
    wrapper made so far (kind "forward", "backward" or "inference").
    """
    torch.manual_seed(0)
    model = MODELS[model_name]().to(device).train()
    reference = copy.deepcopy(model)

    def loss_of(m):
        return lambda x, y: F.cross_entropy(m(x), y)

    compiled = Side(model, compile_fn(loss_of(model)), make_optimizer(optimizer, model.parameters()))
    eager = Side(reference, loss_of(reference), make_optimizer(optimizer, reference.parameters()))
    generator = torch.Generator().manual_seed(1)
    fixed = [make_batch(model_name, 4, device, generator) for _ in range(2)]
    handler = _FallbackLines()
    logger = logging.getLogger("fuse_all.cudagraphs")
    logger.addHandler(handler)
    level = logger.level
    if logger.getEffectiveLevel() > logging.WARNING:
        logger.setLevel(logging.WARNING)  # the fallback lines must reach our handler
    log: list[StepLog] = []
    try:
        for step in range(steps):
            if style == "same_batch":
                batches = fixed
            else:
                batch = (4, 6)[step % 2] if style == "dynamic_shapes" else 4
                batches = [make_batch(model_name, batch, device, generator) for _ in range(2)]
            handler.lines = []
            got = _step(style, compiled, batches)
            want = _step(style, eager, batches)
            _assert_close(got, want, f"{model_name}/{style}/{optimizer} step {step}", atol, rtol)
            stats = graph_stats()
            log.append(StepLog(step, sum(s["plain_calls"] for _, s in stats),
                               sum(s["replays"] for kind, s in stats if kind == "backward"),
                               sum(s["replays"] for _, s in stats), list(handler.lines)))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return log


def _assert_close(got: dict[str, Any], want: dict[str, Any], where: str, atol: float, rtol: float) -> None:
    assert got.keys() == want.keys()
    for key in got:
        a, b = got[key], want[key]
        pairs = zip(a, b, strict=True) if isinstance(a, list) else [(a, b)]
        for index, (x, y) in enumerate(pairs):
            assert torch.isfinite(x).all(), f"{where}: {key}[{index}] has NaN/inf (memory overwritten?)"
            torch.testing.assert_close(x, y, atol=atol, rtol=rtol, msg=lambda m: f"{where}: {key}[{index}]: {m}")


def warmup_steps(style: str) -> int:
    """Dynamic shapes: the second size recompiles (a dynamic graph), whose every size warms up and captures."""
    return WARMUP_STEPS + 2 if style == "dynamic_shapes" else WARMUP_STEPS


def assert_graphs_replay_after_warmup(log: list[StepLog], warmup: int = WARMUP_STEPS) -> None:
    """After ``warmup`` steps: no call ran plainly (counters and log), and the backward graphs replayed."""
    settled = log[warmup - 1]
    after = log[warmup:]
    assert after, "too few steps to judge"
    lines = [line for entry in after for line in entry.fallback_lines]
    assert not lines, lines
    assert log[-1].plain_calls == settled.plain_calls, [(e.step, e.plain_calls) for e in log]
    # every step after warm-up runs at least one backward graph, each one a replay
    assert log[-1].backward_replays - settled.backward_replays >= len(after), \
        [(e.step, e.backward_replays) for e in log]

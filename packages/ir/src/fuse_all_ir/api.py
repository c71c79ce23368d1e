"""The IR stage's entry point: an ATen FX graph in, a scheduled `Program` out."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import lowerings_pointwise, lowerings_reduce, lowerings_view  # noqa: F401  (register lowerings)
from .choices import FusionChoices
from .lowering import LOWERINGS, GraphLowering
from .nodes import LoweredGraph
from .program import Program
from .schedule import schedule
from .validate import validate_program, validation_requested


@dataclass
class Compiled:
    lowered: LoweredGraph      # the IR before fusion
    program: Program           # after fusion and scheduling


def lower(gm: torch.fx.GraphModule, example_inputs, graph_id: str = "graph", device: str | None = None,
          validate: bool | None = None, choices: FusionChoices | None = None) -> Compiled:
    """`validate`: check the Program against its contract (`validate.py`), raising `InvalidProgram`;
    None means "when FUSE_ALL_VALIDATE=1". `choices`: the fusion heuristics of the target the Program is
    for (`KernelTarget.choices`); None: the target-neutral `FusionChoices`."""
    lowered = GraphLowering(gm, example_inputs, graph_id, device).run()
    program = schedule(lowered, choices)
    if validate or (validate is None and validation_requested()):
        validate_program(program)
    return Compiled(lowered, program)


def lowered_ops() -> list[str]:
    """Names of the ATen overloads that lower to fused code (everything else runs in ATen)."""
    return sorted({str(op) for op in LOWERINGS})

"""The IR stage's entry point: an ATen FX graph in, a scheduled `Program` out."""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from . import (lowerings_gather, lowerings_matmul, lowerings_pointwise,  # noqa: F401  (register lowerings)
               lowerings_pool, lowerings_random, lowerings_reduce, lowerings_view)
from .choices import FusionChoices
from .column_split import split_reductions
from .compile_timing import phase
from .conv_epilogue import fold_conv_batchnorm
from .gc_pause import paused as gc_paused
from .lowering import LOWERINGS, GraphLowering
from .matmul_bias import unfuse_matmul_bias
from .matmul_route import route_matmuls
from .memory import plan_reuse
from .nodes import LoweredGraph
from .program import Program
from .schedule import schedule
from .validate import validate_program, validation_requested


@dataclass
class Compiled:
    lowered: LoweredGraph      # the IR before fusion
    program: Program           # after fusion and scheduling


def lower(gm: torch.fx.GraphModule, example_inputs, graph_id: str = "graph", device: str | None = None,
          validate: bool | None = None, reuse_buffers: bool | None = None,
          choices: FusionChoices | None = None) -> Compiled:
    """`validate`: check the Program against its contract (`validate.py`), raising `InvalidProgram`;
    None means "when FUSE_ALL_VALIDATE=1". `reuse_buffers`: allocations take the memory of dead buffers
    (`memory.plan_reuse`); None means "unless FUSE_ALL_REUSE_BUFFERS=0". `choices`: the fusion heuristics
    of the target the Program is for (`KernelTarget.choices`); None: the target-neutral `FusionChoices`."""
    with gc_paused():
        return _lower(gm, example_inputs, graph_id, device, validate, reuse_buffers, choices)


def _lower(gm, example_inputs, graph_id, device, validate, reuse_buffers, choices) -> Compiled:
    with phase("lowering"):
        random_in_kernel = choices is not None and choices.random_in_kernel
        if choices is not None and choices.unfuse_matmul_bias:
            unfuse_matmul_bias(gm, random_in_kernel)
        if choices is not None and choices.fold_conv_batchnorm and device is not None and "cuda" in str(device):
            fold_conv_batchnorm(gm)
        matmul_op = choices.fp32_matmul(device) if choices is not None else None
        if matmul_op is not None:
            route_matmuls(gm, matmul_op)
        recompute = choices is not None and choices.recompute_shared_pointwise
        gathers = choices is not None and choices.gather_in_kernel
        small_matmul_rows = choices.small_matmul_rows if choices is not None else 0
        lowered = GraphLowering(gm, example_inputs, graph_id, device, recompute_shared=recompute,
                                random_in_kernel=random_in_kernel, gather_in_kernel=gathers,
                                small_matmul_rows=small_matmul_rows).run()
    with phase("fusion_schedule"):
        program = schedule(lowered, choices)
        if choices is not None and choices.split_reductions:   # a grid target: idle programs are lost time
            program = split_reductions(program)
        if reuse_buffers is None:
            reuse_buffers = os.environ.get("FUSE_ALL_REUSE_BUFFERS", "1").strip() != "0"
        if reuse_buffers:
            plan_reuse(program)
        if validate or (validate is None and validation_requested()):
            validate_program(program)
    return Compiled(lowered, program)


def sized_ops() -> frozenset[str]:
    """Ops a target lowers only at some sizes (skinny matrix products, `choices.small_matmul_rows`): an ATen
    call for the other sizes is by design (cuBLAS is faster there), not a fallback worth a warning."""
    return frozenset(str(op) for op in lowerings_matmul.MATMUL_OPS)


def lowered_ops(choices: FusionChoices | None = None) -> list[str]:
    """Names of the ATen overloads that lower to fused code (everything else runs in ATen); with `choices`,
    those that do for that target (random ops only where `choices.random_in_kernel`, gathers only where
    `choices.gather_in_kernel`, small matrix products only where `choices.small_matmul_rows`)."""
    kept = ()
    if choices is not None and not choices.random_in_kernel:
        kept += tuple(lowerings_random.RANDOM_OPS)
    if choices is not None and not choices.gather_in_kernel:
        kept += lowerings_gather.GATHER_OPS
    if choices is None or not choices.small_matmul_rows:
        kept += lowerings_matmul.MATMUL_OPS
    return sorted({str(op) for op in LOWERINGS if op not in kept})

"""`TritonChoices`: the Triton target's fusion heuristics and kernel shapes (`fuse_all_ir.FusionChoices`).

Fusion: the IR's target-neutral heuristics. Kernel shapes (render.py follows them):

* ``pointwise``: one flat block of XBLOCK points;
* ``persistent``: a reduction over a concrete size of at most `persistent_max_rnumel`: RBLOCK covers the
  row, every phase is straight-line code and values are reused across phases (softmax loads once);
* ``looped``: every reduction phase loops over the row in RBLOCK chunks (``params["rblock"]`` forces the
  RBLOCK; None lets the candidate configs choose).

The block sizes themselves (XBLOCK/RBLOCK candidates, warps) are `configs.py`, autotuned at run time.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from fuse_all_ir import FusionChoices, KernelShape

PERSISTENT_MAX_RNUMEL = 8192   # reductions up to this (concrete) size keep the row in registers


@dataclass
class TritonChoices(FusionChoices):
    persistent_max_rnumel: int = PERSISTENT_MAX_RNUMEL
    rblock: int | None = None           # force RBLOCK of looped reductions (tests use tiny values)
    force_looped: bool = False

    def choose_kernel_shape(self, kernel, size_hints: dict | None = None) -> KernelShape:
        if not kernel.reduction:
            return KernelShape("pointwise")
        rnumel = sympy.Mul(*kernel.reduction)
        if (not self.force_looped and rnumel.is_number and self.rblock is None
                and int(rnumel) <= self.persistent_max_rnumel):
            return KernelShape("persistent", reason=f"reduction of {rnumel} <= {self.persistent_max_rnumel}")
        return KernelShape("looped", {"rblock": self.rblock})

"""`TritonChoices`: the Triton target's fusion heuristics and kernel shapes (`fuse_all_ir.FusionChoices`).

Fusion: the IR's target-neutral heuristics. Kernel shapes (render.py follows them):

* ``pointwise``: one flat block of XBLOCK points;
* ``tiled``: a pointwise kernel whose `TilePlan` (fuse_all_ir.tiling) is a 2-D transpose tile: [YBLOCK, XBLOCK]
  blocks, so loads and stores that disagree on the contiguous dim are all coalesced;
* ``persistent``: a reduction over a concrete size of at most `persistent_max_rnumel`: RBLOCK covers the
  row, every phase is straight-line code and values are reused across phases (softmax loads once);
* ``looped``: every reduction phase loops over the row in RBLOCK chunks (``params["rblock"]`` forces the
  RBLOCK; None lets the candidate configs choose).

The block sizes themselves (XBLOCK/RBLOCK candidates, warps) are `configs.py`, autotuned at run time.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import sympy

from fuse_all_ir import FusionChoices, KernelShape
from fuse_all_ir.symbolic import size_hint

from .indexing import DEFAULT_SIZE_HINT

PERSISTENT_MAX_RNUMEL = 8192   # reductions up to this (concrete) size keep the row in registers
# A column reduction keeps the row in registers only when it is this short: a long persistent column
# leaves room for a single column per program (no coalescing); looped, XBLOCK columns walk the rows. A split
# reduction's chunks (196 rows for train_resnet50's BatchNorms) loop in 64 x 8 steps, as Inductor's outer
# reductions do (persistent only up to 64 there).
PERSISTENT_MAX_COLUMN = 128
# ... except a small one (a split's final combine: 256 channels x 512 partials), latency-bound: one round
# of loads over 8-column programs (`configs.persistent_configs`) beats a loop of dependent steps
SMALL_COLUMN_ELEMENTS = 1 << 18
PERSISTENT_MAX_SMALL_COLUMN = 1024
# mm/addmm with at most this many static rows (or columns) run as generated reductions over K: on the H200
# cuBLAS's skinny GEMMs are latency-bound (bench/RESULTS.md, "skinny products"); FUSE_ALL_SMALL_MATMUL_ROWS
# overrides it (0: every product in cuBLAS)
SMALL_MATMUL_ROWS = 16


def _fold_conv_batchnorm() -> bool:
    return os.environ.get("FUSE_ALL_CONV_EPILOGUE", "1").strip() != "0"


def _grouped_convs_as_matmuls() -> bool:
    return os.environ.get("FUSE_ALL_GROUPED_CONV_MATMUL", "1").strip() != "0"


def _tf32x3_matmul() -> bool:
    return os.environ.get("FUSE_ALL_TF32X3_MATMUL", "1").strip() != "0"


def _small_matmul_rows() -> int:
    return int(os.environ.get("FUSE_ALL_SMALL_MATMUL_ROWS", SMALL_MATMUL_ROWS))


@dataclass
class TritonChoices(FusionChoices):
    persistent_max_rnumel: int = PERSISTENT_MAX_RNUMEL
    rblock: int | None = None           # force RBLOCK of looped reductions (tests use tiny values)
    force_looped: bool = False
    split_reductions: bool = True       # few columns or rows over long reductions: partial + final kernels
    unfuse_matmul_bias: bool = True     # mm + bias add in the consumer: plain cuBLAS tiles beat cuBLASLt's epilogue
    recompute_shared_pointwise: bool = True   # recompute small shared pointwise values: less memory traffic
    random_in_kernel: bool = True       # dropout & co. fuse: Philox numbers in the kernels, not ATen's mask
    gather_in_kernel: bool = True       # embedding / indexing fuse: indirect loads, not one ATen launch each
    small_matmul_rows: int = field(default_factory=_small_matmul_rows)   # skinny mm/addmm as reductions
    # inference conv + BatchNorm [+ residual] + ReLU in cuDNN's fused epilogue; FUSE_ALL_CONV_EPILOGUE=0: off
    fold_conv_batchnorm: bool = field(default_factory=_fold_conv_batchnorm)
    # grouped convolutions of 1 x 1 inputs as batched products; FUSE_ALL_GROUPED_CONV_MATMUL=0: off
    grouped_convs_as_matmuls: bool = field(default_factory=_grouped_convs_as_matmuls)
    # large float32 products on tensor cores at float32 accuracy, where faster than cuBLAS (`matmul.py`);
    # FUSE_ALL_TF32X3_MATMUL=0: off
    tf32x3_matmul: bool = field(default_factory=_tf32x3_matmul)

    def fp32_matmul(self, device):
        """`fuse_all_triton::matmul` on CUDA GPUs with TF32 tensor cores (compute capability >= 8.0) while
        torch keeps float32 products in float32 (`torch.backends.cuda.matmul.allow_tf32` off, the default:
        with it on, cuBLAS's one-pass TF32 is faster still and what the user asked for)."""
        import torch

        device = torch.device(device) if device is not None else None
        if (not self.tf32x3_matmul or device is None or device.type != "cuda" or not torch.cuda.is_available()
                or torch.backends.cuda.matmul.allow_tf32):
            return None
        if torch.cuda.get_device_capability(device.index if device.index is not None else 0) < (8, 0):
            return None
        from .matmul import OP
        return OP

    def choose_kernel_shape(self, kernel, size_hints: dict | None = None) -> KernelShape:
        plan = kernel.tiling
        if not kernel.reduction:
            if plan is not None and plan.kind == "transpose":
                return KernelShape("tiled", reason="loads and stores disagree on the contiguous dim: 2-D tiles")
            return KernelShape("pointwise")
        rnumel = sympy.Mul(*kernel.reduction)
        limit = self.persistent_max_rnumel
        if plan is not None and plan.kind == "column":
            elements = size_hint(sympy.Mul(*kernel.outer, rnumel), size_hints or {}, DEFAULT_SIZE_HINT)
            small = elements <= SMALL_COLUMN_ELEMENTS
            limit = min(limit, PERSISTENT_MAX_SMALL_COLUMN if small else PERSISTENT_MAX_COLUMN)
        if (not self.force_looped and rnumel.is_number and self.rblock is None
                and int(rnumel) <= limit):
            return KernelShape("persistent", reason=f"reduction of {rnumel} <= {limit}")
        return KernelShape("looped", {"rblock": self.rblock})

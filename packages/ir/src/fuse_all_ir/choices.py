"""Fusion heuristics and kernel shapes: among the legal fusions, which to make, and how each kernel runs.

Legality lives in `legality.py` (a fusion that would be wrong is never offered here); this module only
decides what pays. `FusionChoices` is one object passed to scheduling (`fuse_all_ir.lower(...,
choices=...)`); a codegen subclasses it in its own package (`CppChoices`, `TritonChoices`) to

* veto or limit fusions for its target (`veto_fusion`, `max_kernel_statements`, `max_group_members`),
* pick each kernel's shape (`choose_kernel_shape`: persistent / looped / split / tiled / ...), which its
  renderer follows.

The base class is target-neutral: it is what `lower()` uses when no target is named, and both codegens
keep its fusion decisions, so the same graph fuses the same way on every target unless a target says
otherwise.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

import sympy

from .symbolic import size_hint

MAX_KERNEL_STATEMENTS = 600   # past this, compile time and register pressure outgrow the saved traffic
MAX_GROUP_MEMBERS = 64
# sibling fusion: a kernel writing more buffers or reading more than this gets too many pointer arguments
# and live values per thread for what one shared read saves
MAX_KERNEL_OUTPUTS = 12
MAX_KERNEL_INPUTS = 24
# kernels of at most this many points (outer x reduction) are launch-bound: two of them over one space
# share a launch even when they read nothing in common
SMALL_KERNEL_NUMEL = 4096


@dataclass(frozen=True)
class KernelShape:
    """How a target runs one kernel. `kind` is the target's own vocabulary ("pointwise", "persistent",
    "looped", "split", "tiled", "rows", ...); `params` holds what the renderer needs for that kind (an
    RBLOCK, tile sizes, ...); `reason` says why, for reports and tests."""
    kind: str
    params: dict = field(default_factory=dict, compare=True, hash=False)
    reason: str = ""

    def get(self, name: str, default: Any = None) -> Any:
        return self.params.get(name, default)


class FusionChoices:
    """Target-neutral heuristics; subclass per target and override the hooks."""

    max_kernel_statements: int = MAX_KERNEL_STATEMENTS
    # split reductions that would leave most of a grid target idle (`column_split.py`); CPU threads
    # split inside one kernel instead
    split_reductions: bool = False
    max_group_members: int = MAX_GROUP_MEMBERS
    # sibling (horizontal) fusion: kernels with no dependence between them, over one space
    sibling_fusion: bool = True
    max_kernel_outputs: int = MAX_KERNEL_OUTPUTS
    max_kernel_inputs: int = MAX_KERNEL_INPUTS
    small_kernel_numel: int = SMALL_KERNEL_NUMEL
    # `addmm` whose product only feeds pointwise code becomes `mm` + a bias add fused into that code
    # (`matmul_bias.py`): on CUDA, cuBLASLt's bias epilogue picks slower GEMM tiles than plain cuBLAS
    unfuse_matmul_bias: bool = False
    # inference convolution + BatchNorm [+ residual] + ReLU as one cuDNN call with the BatchNorm folded into
    # the weights (`conv_epilogue.py`): cuDNN writes the block's result once, no generated kernel re-reads it
    fold_conv_batchnorm: bool = False
    # inference grouped convolutions of 1 x 1 inputs into 1 x 1 outputs as batched products of their one
    # weight tap (`conv_as_matmul.py`): cuDNN runs them in a slow generic engine
    grouped_convs_as_matmuls: bool = False
    # a small pointwise value read by several consumers is recomputed in each instead of written to memory
    # and read back (`GraphLowering._recomputable`): pays where kernels are memory-bound and launches cheap
    recompute_shared_pointwise: bool = False
    # dropout, rand/randn(_like) and bernoulli as pointwise code on random numbers made in the kernels from a
    # per-call seed (`lowerings_random.py`), fused with their neighbours; off: they run in ATen, with ATen's
    # generator and its values (a target that must reproduce eager's random numbers keeps this off)
    random_in_kernel: bool = False
    # embedding, advanced indexing and index_select as loads at computed positions (`lowerings_gather.py`),
    # fused with their neighbours; off: ATen calls (which raise eager's IndexError on a bad index)
    gather_in_kernel: bool = False
    # `mm`/`addmm` with at most this many (static) rows or columns as a generated reduction over K
    # (`lowerings_matmul.py`), fused with its bias add and consumers; 0: every matrix product is an ATen call
    small_matmul_rows: int = 0

    def fp32_matmul(self, device) -> Any:
        """The target's own op for large float32 `mm`/`bmm`/`addmm` on `device` (`matmul_route.py`:
        `op(a, b, bias=None)`), or None to keep them ATen calls."""
        return None

    # ---- fusion ---------------------------------------------------------------------------------------
    def candidate_order(self, node, candidates: list, shared_reads: Callable[[Any, Any], int]) -> list:
        """Producer groups in the order to try `node` in: the one sharing the most buffers with `node`
        first (most traffic saved)."""
        return sorted(candidates, key=lambda group: -shared_reads(group, node))

    def should_fuse(self, group, node, kernel) -> str | None:
        """None to fuse `node` into `group` (whose merged, legal `kernel` is given), else the reason not to.
        The limits first, then the target's `veto_fusion`."""
        if len(group.members) >= self.max_group_members:
            return f"group already has {len(group.members)} nodes (limit {self.max_group_members})"
        size = sum(len(loop.body) for loop in kernel.loops)
        if size > self.max_kernel_statements:
            return f"fused kernel would have {size} statements (limit {self.max_kernel_statements})"
        return self.veto_fusion(group, node, kernel)

    def veto_fusion(self, group, node, kernel) -> str | None:
        """The target's hook: a reason to keep a legal fusion apart (shown in the fusion report), or None.
        `group` is the producer group (`.members`, `.outer`, `.reduction`), `node` the node joining it,
        `kernel` the `Kernel` they would make together."""
        return None

    # ---- sibling fusion ---------------------------------------------------------------------------------
    def should_fuse_siblings(self, first, second, kernel, shared_bytes: int, numel: int,
                             size_hints: dict | None = None, feed_one_reader: bool = False) -> str | None:
        """None to run the sibling groups `first` and `second` (no dependence between them; `kernel`: the
        legal kernel they make together) as one kernel, else the reason not to. It pays when they read
        common buffers (`shared_bytes`: their size, read once instead of twice, or read back when one reads
        the other's), when both are small (`numel`: the larger one's points, at the size hints) and so
        launch-bound, or when one kernel or ATen call reads both (`feed_one_reader`: their results are
        needed at once, so merging saves a launch and keeps no buffer alive longer). Then the limits, then
        the target's `veto_sibling_fusion`."""
        if not self.sibling_fusion:
            return "the target does not fuse siblings"
        if shared_bytes <= 0 and numel > self.small_kernel_numel and not feed_one_reader:
            return f"no shared reads and not small ({numel} points > {self.small_kernel_numel})"
        members = len(first.members) + len(second.members)
        if members > self.max_group_members:
            return f"merged kernel would have {members} nodes (limit {self.max_group_members})"
        size = sum(len(loop.body) for loop in kernel.loops)
        if size > self.max_kernel_statements:
            return f"fused kernel would have {size} statements (limit {self.max_kernel_statements})"
        if len(kernel.outputs) > self.max_kernel_outputs:
            return f"merged kernel would write {len(kernel.outputs)} buffers (limit {self.max_kernel_outputs})"
        if len(kernel.inputs) > self.max_kernel_inputs:
            return f"merged kernel would read {len(kernel.inputs)} buffers (limit {self.max_kernel_inputs})"
        size_hints = size_hints or {}
        lost = self.split_would_be_lost(kernel, size_hints)
        if lost is not None:
            return lost
        return self.veto_sibling_fusion(first, second, kernel, size_hints)

    def veto_sibling_fusion(self, first, second, kernel, size_hints: dict) -> str | None:
        """The target's hook for sibling fusions: a reason to keep two legal siblings apart, or None."""
        return None

    def split_would_be_lost(self, kernel, size_hints: dict) -> str | None:
        """Where the target splits long reductions over programs (`split_reductions`, column_split.py), the
        reason to keep a fusion apart that leaves `kernel` unsplittable (a reduction phase that only stores
        per-element values, as a softmax's last; `column_split.splittable`) when its reduction would be
        split (or splits are forced, FUSE_ALL_COLUMN_SPLITS); else None."""
        if not self.split_reductions or not kernel.reduction:
            return None
        from .column_split import FORCE_ENV, choose_column_splits, choose_row_splits, splittable
        if splittable(kernel) is None:
            return None
        from .tiling import is_column_reduction
        outer = size_hint(sympy.Mul(*kernel.outer), size_hints, 1024)
        rnumel = size_hint(sympy.Mul(*kernel.reduction), size_hints, 1024)
        choose = choose_column_splits if is_column_reduction(kernel) else choose_row_splits
        if os.environ.get(FORCE_ENV) or choose(outer, rnumel) > 1:
            return "the reduction is split over the GPU's programs, which per-element stores would prevent"
        return None

    # ---- kernel shapes ----------------------------------------------------------------------------------
    def choose_kernel_shape(self, kernel, size_hints: dict | None = None) -> KernelShape:
        """How to run `kernel` (a `Kernel`; `size_hints`: size symbol -> typical value). The renderer of
        the target asks this once per kernel and follows the answer."""
        if not kernel.reduction:
            return KernelShape("pointwise")
        return KernelShape("reduction")


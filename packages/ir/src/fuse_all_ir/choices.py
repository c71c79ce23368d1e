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

from dataclasses import dataclass, field
from typing import Any, Callable

MAX_KERNEL_STATEMENTS = 600   # past this, compile time and register pressure outgrow the saved traffic
MAX_GROUP_MEMBERS = 64


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

    # ---- kernel shapes ----------------------------------------------------------------------------------
    def choose_kernel_shape(self, kernel, size_hints: dict | None = None) -> KernelShape:
        """How to run `kernel` (a `Kernel`; `size_hints`: size symbol -> typical value). The renderer of
        the target asks this once per kernel and follows the answer."""
        if not kernel.reduction:
            return KernelShape("pointwise")
        return KernelShape("reduction")


"""Fusion heuristics: among the legal fusions, which to make, and in which order to try them.

Legality lives in `fusion.py`; this module only decides what pays.
"""
from __future__ import annotations

MAX_KERNEL_STATEMENTS = 600   # past this, compile time and register pressure outgrow the saved traffic
MAX_GROUP_MEMBERS = 64


def candidate_order(node, candidates: list, shared_reads) -> list:
    """Try the producer group that shares the most buffers with `node` first (most traffic saved)."""
    return sorted(candidates, key=lambda group: -shared_reads(group, node))


def should_fuse(group, node, kernel) -> str | None:
    """None to fuse, else the reason not to."""
    if len(group.members) >= MAX_GROUP_MEMBERS:
        return f"group already has {len(group.members)} nodes (limit {MAX_GROUP_MEMBERS})"
    size = sum(len(loop.body) for loop in kernel.loops)
    if size > MAX_KERNEL_STATEMENTS:
        return f"fused kernel would have {size} statements (limit {MAX_KERNEL_STATEMENTS})"
    return None

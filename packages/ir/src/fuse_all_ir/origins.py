"""Where a lowered node came from: the op's name and the user's source line (capture's `source_loc`, else the
innermost frame outside torch in the node's stack trace), for the fusion report, the editor and fallbacks."""
from __future__ import annotations

import os

import torch
import torch.fx

from .program import Origin


def target_name(target) -> str:
    """An op's name as ExternCalls, fallback reasons and the inlined list print it: `aten.relu.default`."""
    name = str(target)
    return name if name.startswith("aten.") or "." in name else f"{getattr(target, '__module__', '')}.{name}"


def origin_of(node: torch.fx.Node) -> Origin:
    loc = node.meta.get("source_loc") or _parse_stack_trace(node.meta.get("stack_trace"))
    target = target_name(node.target)
    if not loc:
        return Origin(target, fx_node=node.name)
    return Origin(target, loc.get("file"), loc.get("line"), loc.get("code"), node.name)


def _parse_stack_trace(trace):
    """Fallback when capture didn't attach `source_loc`: the innermost frame outside torch."""
    if not trace:
        return None
    lines = trace.strip().splitlines()
    torch_dir = os.path.dirname(torch.__file__)
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i].strip()
        if line.startswith('File "'):
            file = line.split('"')[1]
            if file.startswith(torch_dir):
                continue
            try:
                lineno = int(line.split(", line ")[1].split(",")[0])
            except (IndexError, ValueError):
                continue
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            return {"file": file, "line": lineno, "code": code}
    return None

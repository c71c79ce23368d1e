"""Readable text of the IR before fusion (buffers and their expressions) and after (kernels)."""
from __future__ import annotations

from .nodes import E, LoweredGraph, load_parts
from .program import Compute, Const, ExternCall, IndexValue, Kernel, KernelCall, Load, Program, Reduce, Store
from .symbolic import rvar, xvar


def _expr_text(e: E, names: dict, lines: list) -> str:
    if id(e) in names:
        return names[id(e)]
    if e.kind == "const":
        text = repr(e.value)
    elif e.kind == "index":
        text = f"index({e.index})"
    elif e.kind == "load":
        mask, offset = load_parts(e)
        mask = f", mask={_expr_text(mask, names, lines)}" if mask is not None else ""
        at = f"{e.index} + {_expr_text(offset, names, lines)}" if offset is not None else f"{e.index}"
        text = f"load({e.buffer}[{at}]{mask})"
    else:
        args = ", ".join(_expr_text(a, names, lines) for a in e.args)
        text = f"{e.op}({args})"
    if e.kind == "op":
        name = f"v{len(names)}"
        lines.append(f"        {name}: {e.dtype} = {text}")
        names[id(e)] = name
        return name
    return text


def format_lowered(lowered: LoweredGraph) -> str:
    out = [f"graph {lowered.graph_id} on {lowered.device}: {len(lowered.nodes)} buffers (before fusion)", ""]
    for node in lowered.nodes.values():
        spec = node.spec
        layout = f"{spec.dtype}{list(spec.size)} stride {list(spec.stride)}" if spec else "(no result)"
        origin = node.origins[0] if node.origins else None
        where = f"   # {origin.aten_op} at {origin.file}:{origin.line}" if origin and origin.file else ""
        if node.kind in ("input", "extern"):
            extra = f" = {node.extern.target}(...)" if node.kind == "extern" else ""
            out.append(f"{node.name}: {node.kind} {layout}{extra}{where}")
            continue
        out.append(f"{node.name}: {node.kind} {layout}{where}")
        index = [xvar(i) for i in range(len(spec.size))]
        lines, names = [], {}
        if node.kind == "reduction":
            root = node.body(index, [rvar(i) for i in range(len(node.reduction_size))])
            result = _expr_text(root, names, lines)
            out += lines + [f"        {node.reduction_op} over r in {list(node.reduction_size)} of {result}"]
        else:
            result = _expr_text(node.body(index), names, lines)
            out += lines + [f"        store {result}"]
    return "\n".join(out) + "\n"


def format_kernel(kernel: Kernel) -> str:
    out = [f"{kernel.name}: {kernel.kind} outer {list(kernel.outer)}"
           + (f" reduction {list(kernel.reduction)}" if kernel.reduction else "")
           + f"  reads {list(kernel.inputs)} writes {list(kernel.outputs)}"]
    if kernel.tiling is not None:
        out.append(f"    tiling: {kernel.tiling.describe()}")
    for output, source in kernel.in_place:
        out.append(f"    in place: {output} holds {source}'s values until it overwrites them")
    for loop in kernel.loops:
        out.append("    for r:" if loop.over_reduction else "    per x:")
        for s in loop.body:
            out.append("        " + _stmt_text(s))
    return "\n".join(out)


def _stmt_text(s) -> str:
    if isinstance(s, Load):
        mask = f" if {s.mask} else {s.other!r}" if s.mask else ""
        at = f"{s.index} + {s.offset}" if s.offset else f"{s.index}"
        return f"{s.name}: {s.dtype} = {s.buffer}[{at}]{mask}"
    if isinstance(s, Const):
        return f"{s.name}: {s.dtype} = {s.value!r}"
    if isinstance(s, IndexValue):
        return f"{s.name}: {s.dtype} = {s.expr}"
    if isinstance(s, Compute):
        return f"{s.name}: {s.dtype} = {s.op}({', '.join(s.args)})"
    if isinstance(s, Reduce):
        mask = f" where {s.mask}" if s.mask else ""
        return f"{s.name}: {s.dtype} = reduce_{s.op}({s.arg}){mask}"
    if isinstance(s, Store):
        at = f"{s.index} + {s.offset}" if s.offset else f"{s.index}"
        op = "+=" if s.accumulate else "="
        return f"{s.buffer}[{at}] {op} {s.value}" + (f" if {s.mask}" if s.mask else "")
    return repr(s)


def format_program(program: Program) -> str:
    out = [f"graph {program.graph_id} on {program.device}: {len(program.kernels)} kernels (after fusion)", ""]
    for step in program.steps:
        if isinstance(step, KernelCall):
            out.append(format_kernel(program.kernels[step.kernel]))
        elif isinstance(step, ExternCall):
            outs = ", ".join(o or "_" for o in step.outputs)
            out.append(f"{outs} = {step.target}(...)   # ATen: {step.reason}")
        elif getattr(step, "reuse", None) is not None:
            how = " in place: the next kernel reads its values through it" if step.in_place else ""
            out.append(f"alloc {step.buffer} (reusing the memory of {step.reuse}{how})")
        else:
            out.append(f"{type(step).__name__.lower()} {step.buffer}")
    return "\n".join(out) + "\n"


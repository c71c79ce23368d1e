"""A picture of one graph's fusion, as a standalone SVG (pure Python, no graphviz needed).

One box per step of the program, in the order the program runs them: a kernel box holds the ATen ops fused
into it, an ATen-call box (dashed, orange) the op that runs in ATen, and a last grey box the ops that need
no kernel (views and other ops folded into index arithmetic). Each op is a node labelled with its ATen op
and the user source line it came from (hover for the code). Data edges go from producer to consumer; an
edge the fusion pass rejected is red, dashed and labelled with the reason from the fusion report (in a
column on the right, so that no reason covers a node). Edges inside a kernel and edges of folded ops are
not drawn: the boxes say as much, and they would hide the edges between steps.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from html import escape
from typing import Any, Iterable

NODE_W, NODE_H = 168, 38
GAP_X, GAP_Y = 14, 16
BOX_PAD, BOX_HEAD = 12, 30
BOX_GAP = 46
COLUMNS = 6
LEFT = 20
REASON_CHARS = 70


@dataclass
class Group:
    name: str
    kind: str                      # "kernel" | "extern" | "folded"
    title: str
    nodes: list[str] = field(default_factory=list)


@dataclass
class Op:
    name: str
    target: str
    location: str                  # "file.py:12" or ""
    code: str
    file: str = ""                 # absolute path of the source line, for the editor's click-to-jump
    line: int | None = None


def groups_from_program(program: Any, fx_nodes: Iterable[str]) -> list[Group]:
    """Kernel and ATen-call groups in program order from a `fuse_all_ir.Program`, plus the folded ops.

    An ATen call computes exactly the op it names, so it claims its node first; a kernel's origins also
    name ops it only reads through, so a kernel gets the nodes no ATen call and no earlier kernel has."""
    fx_nodes = list(fx_nodes)
    known = set(fx_nodes)
    steps = []
    for step in getattr(program, "steps", ()):
        kernel_name = getattr(step, "kernel", None)
        if isinstance(kernel_name, str) and kernel_name in program.kernels:
            kernel = program.kernels[kernel_name]
            steps.append((Group(kernel_name, "kernel", f"{kernel_name} ({kernel.kind})"), kernel))
        elif hasattr(step, "target") and hasattr(step, "origins"):
            reason = getattr(step, "reason", "") or ""
            title = f"ATen call {step.target}" + (f": {reason}" if reason else "")
            steps.append((Group(f"aten_{len(steps)}", "extern", title), step))
    placed: set[str] = set()
    for claim in ("extern", "kernel"):
        for group, source in steps:
            if group.kind != claim:
                continue
            for origin in getattr(source, "origins", ()):
                node = getattr(origin, "fx_node", None)
                if node and node not in placed and node in known:
                    placed.add(node)
                    group.nodes.append(node)
    groups = [group for group, _ in steps]
    folded = [n for n in fx_nodes if n not in placed]
    if folded:
        groups.append(Group("folded", "folded", "no kernel: views and ops folded into index arithmetic", folded))
    return groups


def ops_from_graph(graph_module: Any) -> tuple[dict[str, Op], list[tuple[str, str]]]:
    """The call_function nodes of an FX graph and the data edges between them."""
    ops: dict[str, Op] = {}
    edges: list[tuple[str, str]] = []
    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        location = node.meta.get("source_loc") or {}
        where = f"{os.path.basename(location.get('file') or '')}:{location.get('line')}" if location else ""
        ops[node.name] = Op(node.name, str(node.target), where, (location.get("code") or "") if location else "",
                            location.get("file") or "", location.get("line"))
        for producer in node.all_input_nodes:
            if producer.op == "call_function":
                edges.append((producer.name, node.name))
    return ops, edges


def rejected_edges(report: Any, edges: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """(producer op, consumer op) -> reason, for the fusion report's rejected pairs. The report names IR
    buffers and lists the origins of the producer, then of the consumer: the pair is the graph edge
    between those origins where there is one, else (first origin, last origin), a dependency that runs
    through ops folded into index arithmetic."""
    edge_set = set(edges)
    found: dict[tuple[str, str], str] = {}
    for entry in getattr(report, "rejected", ()) or ():
        names = [o.fx_node for o in entry.get("origins", ()) if getattr(o, "fx_node", None)]
        if not names:
            continue
        pair = next(((p, c) for p in names for c in names if (p, c) in edge_set), (names[0], names[-1]))
        if pair[0] != pair[1] and pair not in found:
            found[pair] = entry.get("reason", "")
    return found


def render(graph_id: str, ops: dict[str, Op], edges: list[tuple[str, str]], groups: list[Group],
           rejected: dict[tuple[str, str], str]) -> str:
    position: dict[str, tuple[float, float]] = {}
    boxes = []
    y = 60.0
    width = 0.0
    for group in groups:
        nodes = [n for n in group.nodes if n in ops]
        if not nodes:
            continue
        columns = min(COLUMNS, len(nodes))
        rows = (len(nodes) + columns - 1) // columns
        box_w = 2 * BOX_PAD + columns * NODE_W + (columns - 1) * GAP_X
        box_w = max(box_w, 8 * len(group.title) + 2 * BOX_PAD if len(group.title) < 90 else 720)
        box_h = BOX_HEAD + BOX_PAD + rows * NODE_H + (rows - 1) * GAP_Y
        for index, name in enumerate(nodes):
            row, column = divmod(index, columns)
            position[name] = (LEFT + BOX_PAD + column * (NODE_W + GAP_X), y + BOX_HEAD + row * (NODE_H + GAP_Y))
        boxes.append((group, LEFT, y, box_w, box_h))
        width = max(width, LEFT + box_w)
        y += box_h + BOX_GAP
    width += 480   # room for the reasons of rejected edges routed on the right
    height = y + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="Helvetica, Arial, sans-serif" font-size="11">',
           "<defs><marker id='arrow' viewBox='0 0 10 10' refX='10' refY='5' markerWidth='6' markerHeight='6' "
           "orient='auto-start-reverse'><path d='M 0 0 L 10 5 L 0 10 z' fill='#555'/></marker>"
           "<marker id='arrow-red' viewBox='0 0 10 10' refX='10' refY='5' markerWidth='6' markerHeight='6' "
           "orient='auto-start-reverse'><path d='M 0 0 L 10 5 L 0 10 z' fill='#c62828'/></marker></defs>",
           f'<text x="{LEFT}" y="28" font-size="16" font-weight="bold">fuse-all fusion of {escape(graph_id)}</text>',
           f'<text x="{LEFT}" y="46" fill="#555">{sum(1 for g in groups if g.kind == "kernel")} kernels, '
           f'{sum(1 for g in groups if g.kind == "extern")} ATen calls, {len(ops)} ATen ops; '
           f'edges between steps; red dashed: not fused, reason on the right</text>']
    style = {"kernel": ("#e3f2fd", "#1565c0", ""), "extern": ("#fff3e0", "#ef6c00", ' stroke-dasharray="6 3"'),
             "folded": ("#f5f5f5", "#9e9e9e", ' stroke-dasharray="2 3"')}
    for group, x, top, w, h in boxes:
        fill, stroke, dash = style[group.kind]
        out.append(f'<g class="{group.kind}" id="{escape(group.name)}"><title>{escape(group.title)}</title>'
                   f'<rect x="{x}" y="{top}" width="{w}" height="{h}" rx="6" fill="{fill}" stroke="{stroke}"'
                   f' stroke-width="1.5"{dash}/>'
                   f'<text x="{x + BOX_PAD}" y="{top + 19}" font-weight="bold" fill="{stroke}">'
                   f'{escape(_clip(group.title, 110))}</text></g>')
    group_of = {name: group.name for group in groups for name in group.nodes}
    # Edges inside a kernel are implied by the box, and the folded ops (views) are a list at the end;
    # drawing those edges would only hide the ones between steps.
    folded = {name for group in groups if group.kind == "folded" for name in group.nodes}
    drawn = [(p, c) for p, c in dict.fromkeys([*edges, *rejected])
             if p in position and c in position and group_of[p] != group_of[c] and not {p, c} & folded]
    label_y: dict[tuple[str, str], float] = {}
    next_free = 0.0
    for pair in sorted((e for e in drawn if e in rejected), key=lambda e: position[e[0]][1] + position[e[1]][1]):
        wanted_y = (position[pair[0]][1] + NODE_H + position[pair[1]][1]) / 2
        label_y[pair] = max(wanted_y, next_free)      # labels in the gutter never overlap each other
        next_free = label_y[pair] + 13
    for pair in drawn:
        out.append(_edge(position[pair[0]], position[pair[1]], rejected.get(pair), width, label_y.get(pair)))
    for name, (x, top) in position.items():
        op = ops[name]
        short = op.target.removeprefix("aten.").removesuffix(".default")
        tooltip = f"{op.name} = {op.target}\n{op.location}  {op.code}".strip()
        jump = (f' data-file="{escape(op.file)}" data-line="{int(op.line)}"'
                if op.file and isinstance(op.line, int) else "")
        out.append(f'<g class="op node" id="op-{escape(name)}"{jump}><title>{escape(tooltip)}</title>'
                   f'<rect x="{x}" y="{top}" width="{NODE_W}" height="{NODE_H}" rx="4" fill="white" stroke="#607d8b"/>'
                   f'<text x="{x + 6}" y="{top + 15}" font-weight="bold">{escape(_clip(short, 26))}</text>'
                   f'<text x="{x + 6}" y="{top + 30}" fill="#455a64">{escape(_clip(op.location or op.name, 28))}</text></g>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _edge(start: tuple[float, float], end: tuple[float, float], reason: str | None, width: float,
          label_y: float | None = None) -> str:
    x1, y1 = start[0] + NODE_W / 2, start[1] + NODE_H
    x2, y2 = end[0] + NODE_W / 2, end[1]
    if reason is None:
        bend = max(20.0, abs(y2 - y1) / 3)
        return (f'<path d="M {x1:.0f} {y1:.0f} C {x1:.0f} {y1 + bend:.0f}, {x2:.0f} {y2 - bend:.0f}, {x2:.0f} {y2:.0f}"'
                f' fill="none" stroke="#90a4ae" stroke-width="1" marker-end="url(#arrow)"/>')
    mid_y = (y1 + y2) / 2
    label_y = mid_y if label_y is None else label_y
    label_x = width - 470   # the right-hand gutter: reasons never cover a node
    return (f'<g class="rejected"><title>not fused: {escape(reason)}</title>'
            f'<path d="M {x1:.0f} {y1:.0f} C {x1:.0f} {mid_y:.0f}, {x2:.0f} {mid_y:.0f}, {x2:.0f} {y2:.0f}" fill="none"'
            f' stroke="#c62828" stroke-width="1.5" stroke-dasharray="5 3" marker-end="url(#arrow-red)"/>'
            f'<path d="M {(x1 + x2) / 2:.0f} {mid_y:.0f} L {label_x - 4:.0f} {label_y:.0f}" stroke="#ef9a9a"'
            f' stroke-width="0.6" fill="none"/>'
            f'<text x="{label_x:.0f}" y="{label_y + 4:.0f}" fill="#c62828">{escape(_clip(reason, REASON_CHARS))}</text></g>')


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fusion_svg(graph: Any, program: Any | None) -> str:
    """The SVG of `graph` (a CapturedGraph) as `program` (None: the graph ran in ATen) fused it."""
    ops, edges = ops_from_graph(graph.graph_module)
    if program is None:
        groups = [Group("aten", "extern", "the whole graph runs in ATen (fallback)", list(ops))]
        rejected: dict[tuple[str, str], str] = {}
    else:
        groups = groups_from_program(program, ops)
        rejected = rejected_edges(program.report, edges)
    return render(graph.graph_id, ops, edges, groups, rejected)

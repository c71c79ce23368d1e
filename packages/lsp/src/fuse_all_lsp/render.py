"""Text the editor shows: hover markdown, code lens titles, inlay hint labels, diagnostic messages."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from .index import LineHit, Shown
from .records import Kernel, Record, SourceLine

MAX_CODE_LINES = 40
MAX_LINE_CHARS = 200
MAX_RECORDS = 3
MAX_KERNELS = 6
MAX_SOURCE_LINES = 6
STALE = "⚠ stale"


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def code_span(text: str) -> str:
    text = text.replace("\n", " ")
    ticks = "`"
    while ticks in text:
        ticks += "`"
    padding = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{padding}{text}{padding}{ticks}"


def milliseconds(records: list[Record]) -> str:
    return f"{sum(r.compile_time_s or 0.0 for r in records) * 1000:.0f} ms"


def fenced(source: str, language: str, max_lines: int = MAX_CODE_LINES) -> str:
    """A fenced block of at most `max_lines` lines, the rest counted after it; `language` is the fence's
    language id ("cpp", "python", or "" for none)."""
    lines = source.rstrip("\n").split("\n")
    shown = [line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " …" for line in lines[:max_lines]]
    fence = "```"
    while any(fence in line for line in shown):
        fence += "`"
    block = f"{fence}{language}\n" + "\n".join(shown) + f"\n{fence}"
    if len(lines) > max_lines:
        block += f"\n… ({plural(len(lines) - max_lines, 'more line')})"
    return block


def lines_list(source_lines: tuple[SourceLine, ...], limit: int = MAX_SOURCE_LINES) -> str:
    unique: dict[tuple[str, int], SourceLine] = {}
    for source_line in source_lines:
        unique.setdefault((source_line.file, source_line.line), source_line)
    ordered = sorted(unique.values(), key=lambda s: (s.file, s.line))
    parts = [
        f"line {s.line} {code_span(s.code.strip())}" if s.code.strip() else f"line {s.line}" for s in ordered[:limit]
    ]
    if len(ordered) > limit:
        parts.append(f"{len(ordered) - limit} more")
    return ", ".join(parts)


def output_code_link(record: Record, line: int | None = None) -> str:
    if record.output_code is None:
        return ""
    uri = Path(record.output_code).as_uri() + (f"#L{line}" if line else "")
    return f"[{Path(record.output_code).name}]({uri})"


def fusion_link(record: Record) -> str:
    """A command link VS Code opens in a webview (the client trusts this one command)."""
    arguments = quote(json.dumps([record.fusion_svg, record.graph_id]))
    return f"[{Path(record.fusion_svg or '').name}](command:fuse-all.showFusion?{arguments})"


def kernel_section(record: Record, kernel: Kernel) -> str:
    facts = [f"**{code_span(kernel.name)}**", *(fact for fact in (kernel.kind, kernel.language) if fact)]
    if kernel.aten_ops:
        facts.append("fuses " + ", ".join(code_span(op) for op in kernel.aten_ops))
    parts = [" · ".join(facts)]
    if kernel.source_lines:
        parts.append("from " + lines_list(kernel.source_lines))
    parts.append(fenced(kernel.source, kernel.fence_language))
    return "\n\n".join(parts)


def summary(records: list[Record], stale: bool) -> str:
    kernels = sum(len(r.kernels) for r in records)
    parts = [
        plural(kernels, "kernel"),
        plural(sum(r.fused_op_count for r in records), "fused op"),
        f"compile {milliseconds(records)}",
    ]
    return " · ".join([STALE, *parts] if stale else parts)


def lens_title(shown: list[Shown]) -> str:
    return summary([s.record for s in shown], any(s.stale for s in shown))


def record_section(item: Shown, with_summary: bool) -> str:
    record = item.record
    heading = [f"graph {code_span(record.graph_id)}"]
    heading += [fact for fact in (record.device, record.graph_kind, record.mode and f"mode {record.mode}") if fact]
    if with_summary:
        heading.append(summary([record], False))
    parts = [" · ".join(heading)]
    if item.stale:
        parts.append(
            f"{STALE}: {Path(record.function.file).name} changed since this compile; compile again to refresh."
        )
    from .profile_view import function_section  # it builds on this module

    timing = function_section(record)
    if timing:
        parts.append(timing)
    if record.output_code:
        parts.append("Generated code: " + output_code_link(record))
    if record.fusion_svg:
        parts.append("Fusion picture: " + fusion_link(record))
    for kernel in record.kernels[:MAX_KERNELS]:
        parts.append(kernel_section(record, kernel))
    if len(record.kernels) > MAX_KERNELS:
        parts.append(f"… and {plural(len(record.kernels) - MAX_KERNELS, 'more kernel')} in {output_code_link(record)}")
    parts.extend(notes(record))
    return "\n\n".join(parts)


def notes(record: Record) -> list[str]:
    lines = []
    for extern in record.externs:
        where = f" ({lines_list(extern.source_lines)})" if extern.source_lines else ""
        lines.append(
            f"- runs in ATen: {code_span(extern.target)}{where}" + (f" — {extern.reason}" if extern.reason else "")
        )
    for rejected in record.rejected_fusions:
        where = f" ({lines_list(rejected.source_lines)})" if rejected.source_lines else ""
        lines.append(
            f"- not fused: {code_span(rejected.producer)} → {code_span(rejected.consumer)}{where} — {rejected.reason}"
        )
    for graph_break in record.graph_breaks:
        lines.append(f"- graph break at line {graph_break.line}: {graph_break.reason}")
    if record.cudagraphs is not None:
        state = "on" if record.cudagraphs.enabled else "off"
        lines.append(
            f"- CUDA graphs {state}" + (f": {record.cudagraphs.decision}" if record.cudagraphs.decision else "")
        )
    return ["\n".join(lines)] if lines else []


def function_hover(title: str, shown: list[Shown]) -> str:
    records = [s.record for s in shown]
    parts = [f"**fuse-all** · {code_span(title)} · {summary(records, any(s.stale for s in shown))}"]
    for item in shown[-MAX_RECORDS:]:
        parts.append("---\n\n" + record_section(item, with_summary=len(shown) > 1))
    if len(shown) > MAX_RECORDS:
        parts.append(f"… and {plural(len(shown) - MAX_RECORDS, 'older graph')} of this function")
    return "\n\n".join(parts)


def not_compiled_hover(title: str, backend: str | None) -> str:
    text = f"**fuse-all** · {code_span(title)} · no artifact records yet."
    if backend is not None and backend != "fuse_all":
        return text + f' It compiles with backend {code_span(backend)}; fuse-all records need `backend="fuse_all"`.'
    return text + " Run the file (or **fuse-all: Compile this file**) to compile it."


def line_hover(line: int, hits: list[LineHit]) -> str | None:
    kernels: dict[tuple[str, str], LineHit] = {}
    for hit in hits:
        if hit.kernel is not None:
            kernels.setdefault((hit.shown.record.graph_id, hit.kernel.name), hit)
    parts = []
    if kernels:
        names = ", ".join(code_span(hit.kernel.name) for hit in kernels.values() if hit.kernel)
        stale = any(hit.shown.stale for hit in kernels.values())
        parts.append(f"**fuse-all** · line {line} → {names}" + (f" · {STALE}" if stale else ""))
        for hit in list(kernels.values())[:MAX_KERNELS]:
            assert hit.kernel is not None
            parts.append(
                f"graph {code_span(hit.shown.record.graph_id)} · " + kernel_section(hit.shown.record, hit.kernel)
            )
    other = [message for hit in hits if (message := hit_message(hit)) is not None]
    if other:
        if not parts:
            parts.append(f"**fuse-all** · line {line}")
        parts.append("\n".join(f"- {message}" for message in dict.fromkeys(other)))
    return "\n\n".join(parts) if parts else None


def hit_message(hit: LineHit) -> str | None:
    """The one-line message of a hit that is not a kernel (diagnostics and hover share it)."""
    if hit.extern is not None:
        return f"runs in ATen: {hit.extern.target}" + (f" — {hit.extern.reason}" if hit.extern.reason else "")
    if hit.rejected is not None:
        return f"not fused: {hit.rejected.producer} → {hit.rejected.consumer} — {hit.rejected.reason}"
    if hit.graph_break is not None:
        return f"graph break: {hit.graph_break.reason}"
    return None


def inlay_label(hits: list[LineHit]) -> str | None:
    names = list(dict.fromkeys(hit.kernel.name for hit in hits if hit.kernel is not None))
    externs = list(dict.fromkeys(hit.extern.target for hit in hits if hit.extern is not None))
    targets = names + [f"ATen {target}" for target in externs]
    return "→ " + ", ".join(targets) if targets else None


def inlay_tooltip(hits: list[LineHit]) -> str:
    ops = []
    for hit in hits:
        if hit.kernel is not None:
            ops += [f"{hit.kernel.name}: {', '.join(hit.kernel.aten_ops)}"]
    return "\n".join(dict.fromkeys(ops))


def cudagraph_fallback(record: Record) -> str | None:
    """The one-line reason when CUDA graphs were asked for but not used."""
    cudagraphs = record.cudagraphs
    if cudagraphs is None or cudagraphs.enabled or record.mode not in ("reduce-overhead", "max-autotune"):
        return None
    graph = f"{record.graph_kind or 'graph'} {record.graph_id}"
    return f"CUDA graphs not used ({graph}): {cudagraphs.decision or 'no reason given'}"

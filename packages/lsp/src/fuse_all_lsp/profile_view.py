"""Text for the `profile` section of records: per-line inlay hints, the hover's time table, lens titles."""

from __future__ import annotations

from dataclasses import dataclass

from .index import LineHit, Shown
from .records import Record
from .render import code_span, plural

HOT_SHARE = 0.10  # a line at or above this share of its graph's time is marked hot
MAX_ROWS = 8


def duration(us: float) -> str:
    """Microseconds as a person reads them: 0.42 µs, 14.7 µs, 312 µs, 1.25 ms, 2.50 s."""
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    if us >= 100:
        return f"{us:.0f} µs"
    if us >= 1:
        return f"{us:.1f} µs"
    return f"{us:.2f} µs"


def percent(share: float) -> str:
    return f"{share * 100:.0f}%" if share >= 0.01 or share == 0 else "<1%"


def bandwidth(gbps: float) -> str:
    return f"{gbps:.1f} GB/s" if gbps >= 1 else f"{gbps * 1000:.0f} MB/s"


def size(count: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


@dataclass(frozen=True)
class LineCost:
    """What one line costs per call, over every profiled graph its ops ran in."""

    us: float
    share: float  # of the time of the graphs involved
    kernels: int
    aten_calls: int
    graphs: tuple[Shown, ...]

    @property
    def hot(self) -> bool:
        return self.share >= HOT_SHARE

    def count_text(self) -> str:
        if self.kernels and self.aten_calls:  # short: VS Code cuts hints at 43 characters
            return f"{plural(self.kernels, 'kernel')}+{self.aten_calls} ATen"
        if self.aten_calls:
            return plural(self.aten_calls, "ATen call")
        return plural(self.kernels, "kernel")


def line_cost(hits: list[LineHit]) -> LineCost | None:
    timed = [hit for hit in hits if hit.time is not None and hit.shown.record.profile is not None]
    if not timed:
        return None
    us = sum(hit.time.us for hit in timed if hit.time)
    graphs = tuple({id(hit.shown.record): hit.shown for hit in timed}.values())
    total = sum(shown.record.profile.graph_us for shown in graphs if shown.record.profile)
    kernels = {(hit.shown.record.graph_id, name) for hit in timed if hit.time for name in hit.time.kernels}
    externs = {(hit.shown.record.graph_id, index) for hit in timed if hit.time for index in hit.time.externs}
    return LineCost(us, us / total if total > 0 else 0.0, len(kernels), len(externs), graphs)


HOT_MARK = "▲"  # in every common monospace font, unlike the emoji a timer or flame would need


def inlay_label(cost: LineCost) -> str:
    label = f"{duration(cost.us)}/call · {percent(cost.share)} · {cost.count_text()}"
    return f"{HOT_MARK} {label}" if cost.hot else label


def basis_text(record: Record) -> str:
    profile = record.profile
    assert profile is not None
    kind = "GPU time" if profile.basis == "device" else "CPU time"
    warmup = f", first {plural(profile.warmup_calls, 'call')} left out" if profile.warmup_calls else ""
    return f"{kind}, mean of {plural(profile.calls, 'call')}{warmup}"


def inlay_tooltip(cost: LineCost) -> str:
    lines = []
    for shown in cost.graphs:
        profile = shown.record.profile
        assert profile is not None
        lines.append(f"graph {shown.record.graph_id}: {duration(profile.graph_us)} per call ({basis_text(shown.record)})")
    return "\n".join(lines)


def _kernel_ops(record: Record, name: str) -> str:
    kernel = next((k for k in record.kernels if k.name == name), None)
    if kernel is None or not kernel.aten_ops:
        return ""
    ops = [op.removeprefix("aten.").split(".")[0] for op in kernel.aten_ops]
    return " (" + ", ".join(dict.fromkeys(ops)) + ")"


def hover_section(line: int, hits: list[LineHit]) -> str | None:
    """Per graph: what this line costs, and a table of the kernels and ATen calls its ops ran in."""
    cost = line_cost(hits)
    if cost is None:
        return None
    heading = f"**fuse-all profile** · line {line} · {duration(cost.us)} per call · {percent(cost.share)}"
    parts = [heading + (" of its graphs' time" if len(cost.graphs) > 1 else " of its graph's time")]
    for hit in hits:
        if hit.time is None or hit.shown.record.profile is None:
            continue
        record, profile, time = hit.shown.record, hit.shown.record.profile, hit.time
        parts.append(
            f"graph {code_span(record.graph_id)} ({record.graph_kind or 'graph'}): "
            f"{duration(profile.graph_us)} per call · {basis_text(record)}"
            + (" · ⚠ stale" if hit.shown.stale else "")
        )
        rows = ["| ran in | time per call | share of graph | achieved bandwidth |", "|---|--:|--:|--:|"]
        for name in time.kernels[:MAX_ROWS]:
            measured = profile.kernel(name)
            if measured is None:
                continue
            traffic = (
                f"{bandwidth(measured.gbps)} ({size(measured.bytes)} moved)"
                if measured.gbps is not None and measured.bytes
                else "—"
            )
            rows.append(
                f"| {code_span(name)}{_kernel_ops(record, name)} | {duration(measured.us)} | "
                f"{percent(measured.share)} | {traffic} |"
            )
        for index in time.externs[:MAX_ROWS]:
            measured_extern = profile.extern(index)
            if measured_extern is None:
                continue
            rows.append(
                f"| ATen {code_span(measured_extern.target)} | {duration(measured_extern.us)} | "
                f"{percent(measured_extern.share)} | — |"
            )
        parts.append("\n".join(rows))
        shared = [
            k for k in record.kernels if k.name in time.kernels and len({(s.file, s.line) for s in k.source_lines}) > 1
        ]
        if shared:
            parts.append(
                "A fused kernel's time is measured; this line's part of it is its share of the kernel's ops."
            )
    return "\n\n".join(parts)


def graph_time(shown: list[Shown]) -> str | None:
    """`31.5 µs/call` over the profiled graphs of a function, or None when none is profiled."""
    profiled = [s.record.profile for s in shown if s.record.profile is not None]
    if not profiled:
        return None
    return f"{duration(sum(p.graph_us for p in profiled))}/call"


def function_section(record: Record) -> str | None:
    """The hottest lines of one profiled graph, for the function hover."""
    profile = record.profile
    if profile is None:
        return None
    hottest = sorted(profile.lines, key=lambda entry: -entry.us)[:3]
    where = ", ".join(f"line {entry.line} {duration(entry.us)} ({percent(entry.share)})" for entry in hottest)
    text = f"Profile: {duration(profile.graph_us)} per call ({basis_text(record)})"
    return text + (f" · hottest: {where}" if where else "")

"""Two backends' kernels of one step side by side, between the library calls both make (issue 11: "where a row
misses, the note says where its time goes").

A whole-model gap spread over a hundred generated kernels has no culprit in a per-kernel table, and the two
backends' generated kernels cannot be matched by name (`triton_red_fused__native_batch_norm_legit_...` against
`kernel_12`). Their cuDNN and cuBLAS kernels can: both backends run the model's convolutions and products in
program order. So each backend's step, as the profiler saw it on the device in start order, is cut at those
library kernels (the anchors); the two anchor sequences are matched (difflib: one backend may replace or drop a
few, as fuse_all's bmm for grouped convolutions does), and the kernels between two matched anchors form one
region per backend. Regions are compared by device time; the report lists the regions where the second
backend loses most, each with both sides' kernels: Inductor's names say what a region computes.

    python bench/profile_kernels.py --device cuda --workloads train_resnet50_32x224 --backends inductor,fuse_all --regions 15

A kernel that runs on the other side of an anchor in one backend (a weight conversion at the graph's start
instead of just before its convolution) counts in the region where it ran: compare neighbouring regions too.
"""
from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Callable, Iterable, Sequence


@dataclasses.dataclass(frozen=True)
class Launch:
    name: str
    us: float


@dataclasses.dataclass
class Region:
    """The kernels each backend ran after the previous matched anchor, up to the anchor that closes the region
    (`closing`: the two backends' anchor launches; None for the step's tail)."""
    index: int
    first: list[Launch]
    second: list[Launch]
    closing: tuple[Launch, Launch] | None

    @property
    def first_us(self) -> float:
        return sum(launch.us for launch in self.first)

    @property
    def second_us(self) -> float:
        return sum(launch.us for launch in self.second)


def step_launches(events: Iterable[Any], steps: int) -> tuple[list[Launch], bool]:
    """One step's device kernels in start order, from torch.profiler's events over `steps` profiled steps:
    each kernel's time is its mean over the steps when every step launched the same kernels in the same order
    (True), else the first step's (False)."""
    ordered = sorted(((event.time_range.start, event.name, float(event.device_time)) for event in events
                      if str(getattr(event, "device_type", "")).endswith("CUDA")), key=lambda item: item[0])
    per_step = len(ordered) // max(steps, 1)
    chunks = [ordered[i * per_step:(i + 1) * per_step] for i in range(steps)] if per_step else []
    if not chunks:
        return [], True
    same = len(ordered) % steps == 0 and all(
        [name for _, name, _ in chunk] == [name for _, name, _ in chunks[0]] for chunk in chunks)
    if not same:
        return [Launch(name, us) for _, name, us in chunks[0]], False
    return [Launch(name, sum(chunk[i][2] for chunk in chunks) / steps)
            for i, (_, name, _) in enumerate(chunks[0])], True


def regions(first: Sequence[Launch], second: Sequence[Launch], is_anchor: Callable[[str], bool]) -> list[Region]:
    """Both steps cut at their matched anchors (library kernels with the same name, in the same order)."""
    first_anchors = [i for i, launch in enumerate(first) if is_anchor(launch.name)]
    second_anchors = [i for i, launch in enumerate(second) if is_anchor(launch.name)]
    matcher = difflib.SequenceMatcher(None, [first[i].name for i in first_anchors],
                                      [second[i].name for i in second_anchors], autojunk=False)
    pairs = [(first_anchors[block.a + k], second_anchors[block.b + k])
             for block in matcher.get_matching_blocks() for k in range(block.size)]
    found, start_first, start_second = [], 0, 0
    for index, (end_first, end_second) in enumerate(pairs):
        found.append(Region(index, list(first[start_first:end_first]), list(second[start_second:end_second]),
                            (first[end_first], second[end_second])))
        start_first, start_second = end_first + 1, end_second + 1
    found.append(Region(len(pairs), list(first[start_first:]), list(second[start_second:]), None))
    return found


MAX_LISTED = 12   # a longer region (an optimizer step's 160 copies) is listed by name, the largest totals first


def _kernels(launches: list[Launch], width: int = 70) -> str:
    if len(launches) <= MAX_LISTED:
        return ", ".join(f"{launch.name[:width]} {launch.us:.1f}" for launch in launches) or "-"
    totals: dict[str, list[float]] = {}
    for launch in launches:
        totals.setdefault(launch.name[:width], []).append(launch.us)
    ranked = sorted(totals.items(), key=lambda item: -sum(item[1]))
    listed = [f"{name} {len(times)}x {sum(times):.1f}" for name, times in ranked[:MAX_LISTED]]
    rest = ranked[MAX_LISTED:]
    if rest:
        listed.append(f"{sum(len(t) for _, t in rest)} more launches of {len(rest)} kernels "
                      f"{sum(sum(t) for _, t in rest):.1f}")
    return ", ".join(listed)


def report(first_name: str, second_name: str, found: list[Region], top: int) -> list[str]:
    """Totals (between anchors, matched anchors), then the regions where the second backend spends the most
    more, then those where it spends the most less: ms per step, each region's kernels with µs."""
    between = (sum(r.first_us for r in found), sum(r.second_us for r in found))
    closing = [r.closing for r in found if r.closing is not None]
    anchored = (sum(a.us for a, _ in closing), sum(b.us for _, b in closing))
    lines = [f"regions: {len(closing)} matched library kernels; between them {first_name} "
             f"{between[0] / 1000:.3f} ms, {second_name} {between[1] / 1000:.3f} ms per step; the matched "
             f"kernels themselves {anchored[0] / 1000:.3f} / {anchored[1] / 1000:.3f} ms"]
    by_gap = sorted(found, key=lambda r: r.second_us - r.first_us)
    for title, chosen in ((f"{second_name} slower", [r for r in reversed(by_gap) if r.second_us > r.first_us]),
                          (f"{second_name} faster", [r for r in by_gap if r.second_us < r.first_us])):
        lines.append(f"  regions where {title}, by the difference (of {len(chosen)}):")
        for region in chosen[:top]:
            anchor = region.closing[0].name[:60] if region.closing else "end of step"
            lines.append(f"    #{region.index:<4d} {(region.second_us - region.first_us) / 1000:+.4f} ms, before "
                         f"{anchor}")
            lines.append(f"        {first_name:9s} {region.first_us:7.1f} us: {_kernels(region.first)}")
            lines.append(f"        {second_name:9s} {region.second_us:7.1f} us: {_kernels(region.second)}")
    return lines

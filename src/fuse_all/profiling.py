"""`python -m fuse_all.profiling [options] SCRIPT [args]`: where the time of each compiled graph goes.

Runs a script (or `-m module`) under torch.profiler (CPU, plus CUDA when it is available) and writes, into
the artifact record of every graph that ran, a `profile` section (docs/artifact-record.md, schema 2): time
per call of the graph, of each kernel and ATen call, and of each source line, so the editor shows them
next to the code without importing torch.

The host program of every graph runs its steps inside profiler ranges while a profiler is active
(`fuse_all_ir.graph_range_name` and friends): `fuse_all::<graph_id>` around a call,
`fuse_all::<graph_id>::<kernel>` around a launch, `fuse_all::<graph_id>::extern_<i>::<target>` around the
i-th ATen call. A kernel's time goes to the source lines whose ops it fused, split by how many of its ops
each line contributed (a line's share of a fused kernel is an estimate; the kernel's own time is measured).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import runpy
import sys
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from . import artifacts

log = logging.getLogger("fuse_all")

PREFIX = "fuse_all::"


@dataclass
class StepCall:
    """One kernel launch or ATen call inside one call of a graph."""
    key: str                 # the kernel's name, or "extern_<i>"
    cpu_us: float
    device_us: float
    aten_ops: dict[str, tuple[float, float]] = field(default_factory=dict)  # ATen op -> (cpu_us, device_us)


@dataclass
class GraphCall:
    cpu_us: float
    device_us: float
    steps: list[StepCall]


def _device_time(event: Any) -> float:
    value = getattr(event, "device_time_total", None)
    if value is None:  # torch < 2.4 named it after CUDA
        value = getattr(event, "cuda_time_total", 0.0)
    return float(value or 0.0)


def _is_cpu(event: Any) -> bool:
    return str(getattr(event, "device_type", "DeviceType.CPU")).endswith("CPU")


def graph_calls(events: Iterable[Any]) -> dict[str, list[GraphCall]]:
    """Per graph id, its calls in the order they ran, from torch.profiler's FunctionEvents."""
    calls: dict[str, list[tuple[float, GraphCall]]] = defaultdict(list)
    for event in events:
        name = event.name
        if not name.startswith(PREFIX) or not _is_cpu(event):
            continue
        parts = name[len(PREFIX):].split("::")
        if len(parts) != 1:
            continue
        graph_id = parts[0]
        steps = []
        for child in event.cpu_children:
            child_parts = child.name[len(PREFIX):].split("::") if child.name.startswith(PREFIX) else []
            if len(child_parts) < 2 or child_parts[0] != graph_id:
                continue
            aten: dict[str, tuple[float, float]] = {}
            for op in child.cpu_children:
                if not op.name.startswith("aten::"):  # runtime calls such as cudaLaunchKernel
                    continue
                cpu, device = aten.get(op.name, (0.0, 0.0))
                aten[op.name] = (cpu + float(op.cpu_time_total), device + _device_time(op))
            steps.append(StepCall(child_parts[1], float(child.cpu_time_total), _device_time(child), aten))
        call = GraphCall(float(event.cpu_time_total), _device_time(event), steps)
        calls[graph_id].append((float(event.time_range.start), call))
    return {graph_id: [call for _, call in sorted(found, key=lambda pair: pair[0])]
            for graph_id, found in calls.items()}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _line_weights(source_lines: list[dict[str, Any]]) -> dict[tuple[str, int], float]:
    """Each line's share of a kernel or ATen call: the fraction of its ops that came from that line."""
    counts: dict[tuple[str, int], int] = defaultdict(int)
    for entry in source_lines:
        counts[(entry["file"], entry["line"])] += 1
    total = sum(counts.values())
    return {key: count / total for key, count in counts.items()} if total else {}


def profile_section(record: dict[str, Any], calls: list[GraphCall], warmup: int = 1,
                    activities: Iterable[str] = ("cpu",)) -> dict[str, Any]:
    """The record's `profile` section from the calls of its graph (docs/artifact-record.md)."""
    skipped = warmup if len(calls) > warmup else 0
    measured = calls[skipped:]
    device = str(record.get("device") or "cpu")
    on_device = device.startswith(("cuda", "xpu")) and any(call.device_us > 0 for call in measured)
    basis = "device" if on_device else "cpu"

    def time_of(item: Any) -> float:
        return item.device_us if on_device else item.cpu_us

    graph_us = _mean([time_of(call) for call in measured])
    per_step: dict[str, list[float]] = defaultdict(list)
    launches: dict[str, int] = defaultdict(int)
    aten_ops: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for call in measured:
        totals: dict[str, float] = defaultdict(float)
        for step in call.steps:
            totals[step.key] += time_of(step)
            launches[step.key] += 1
            for op, times in step.aten_ops.items():
                aten_ops[step.key][op] += (times[1] if on_device else times[0]) / len(measured)
        for key in set(totals) | set(per_step):
            per_step[key].append(totals.get(key, 0.0))

    def share(us: float) -> float:
        return us / graph_us if graph_us > 0 else 0.0

    kernels, externs = [], []
    line_us: dict[tuple[str, int], float] = defaultdict(float)
    line_kernels: dict[tuple[str, int], list[str]] = defaultdict(list)
    line_externs: dict[tuple[str, int], list[int]] = defaultdict(list)
    for kernel in record.get("kernels", []):
        name = kernel["name"]
        if name not in per_step:
            continue
        us = _mean(per_step[name])
        entry: dict[str, Any] = {"name": name, "us": us, "share": share(us),
                                 "launches_per_call": launches[name] / len(measured)}
        traffic = kernel.get("bytes")
        if isinstance(traffic, int) and traffic > 0 and us > 0:
            entry["bytes"] = traffic
            entry["gbps"] = traffic / (us * 1e-6) / 1e9
        kernels.append(entry)
        for key, weight in _line_weights(kernel.get("source_lines", [])).items():
            line_us[key] += us * weight
            line_kernels[key].append(name)
    for index, extern in enumerate(record.get("externs", [])):
        key_name = f"extern_{index}"
        if key_name not in per_step:
            continue
        us = _mean(per_step[key_name])
        externs.append({"index": index, "target": extern["target"], "us": us, "share": share(us),
                        "aten_ops": [{"name": op, "us": op_us} for op, op_us in
                                     sorted(aten_ops[key_name].items(), key=lambda pair: -pair[1])]})
        for key, weight in _line_weights(extern.get("source_lines", [])).items():
            line_us[key] += us * weight
            line_externs[key].append(index)
    steps_us = sum(entry["us"] for entry in kernels) + sum(entry["us"] for entry in externs)
    lines = [{"file": file, "line": line, "us": us, "share": share(us),
              "kernels": line_kernels.get((file, line), []), "externs": line_externs.get((file, line), [])}
             for (file, line), us in sorted(line_us.items())]
    return {
        "created": time.time(),
        "activities": sorted(set(activities)),
        "basis": basis,
        "calls": len(measured),
        "warmup_calls": skipped,
        "graph_us": graph_us,
        "host_us": _mean([call.cpu_us for call in measured]),
        "other_us": max(graph_us - steps_us, 0.0),
        "kernels": kernels,
        "externs": externs,
        "lines": lines,
    }


def write_profiles(calls: dict[str, list[GraphCall]], directory: str | os.PathLike[str] | None = None,
                   warmup: int = 1, activities: Iterable[str] = ("cpu",)) -> dict[str, dict[str, Any]]:
    """Add a `profile` section to the record of every graph in `calls`; returns graph id -> section.
    Graphs without a readable record (no source location, written elsewhere) are skipped with a log line."""
    folder = Path(directory) if directory is not None else artifacts.default_artifact_dir()
    written = {}
    for graph_id, graph_calls_ in calls.items():
        if not artifacts.GRAPH_ID.match(graph_id) or not graph_calls_:
            continue
        path = folder / f"{graph_id}.json"
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            log.info("fuse-all: no record to profile for %s: %s", graph_id, error)
            continue
        if not isinstance(record, dict) or record.get("schema") != artifacts.SCHEMA:
            continue
        section = profile_section(record, graph_calls_, warmup, activities)
        record["profile"] = section
        record["schema_version"] = max(int(record.get("schema_version") or 1), 2)
        if artifacts.write_record(record, folder) is not None:
            written[graph_id] = section
    return written


def _activities(choice: str):
    import torch
    from torch.profiler import ProfilerActivity

    wanted = {"cpu"}
    if choice in ("cuda", "all") or (choice == "auto" and torch.cuda.is_available()):
        wanted.add("cuda")
    names = {"cpu": ProfilerActivity.CPU, "cuda": ProfilerActivity.CUDA}
    return wanted, [names[name] for name in sorted(wanted)]


def run_under_profiler(target: str, arguments: list[str], module: bool = False, activities: str = "auto"):
    """Run a script or module as `__main__` under torch.profiler; returns (exit code, events, activities)."""
    import torch.profiler

    wanted, kinds = _activities(activities)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [target, *arguments]
    if not module:
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
    code = 0
    with torch.profiler.profile(activities=kinds) as profiler:
        try:
            if module:
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(target, run_name="__main__")
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        except BaseException:  # noqa: BLE001 - the user's error is reported; what ran is still profiled
            traceback.print_exc()
            code = 1
        finally:
            sys.argv, sys.path[:] = saved_argv, saved_path
    return code, profiler.events(), wanted


def summary_lines(written: dict[str, dict[str, Any]]) -> list[str]:
    lines = []
    for graph_id, section in sorted(written.items()):
        unit = "GPU" if section["basis"] == "device" else "CPU"
        lines.append(f"fuse-all profile: {graph_id}: {section['calls']} calls, {section['graph_us']:.1f} µs/call "
                     f"({unit})")
        hot = sorted(section["lines"], key=lambda entry: -entry["us"])[:3]
        for entry in hot:
            lines.append(f"    {Path(entry['file']).name}:{entry['line']}  {entry['us']:.1f} µs "
                         f"({entry['share']:.0%})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fuse_all.profiling",
        description="Run a script under torch.profiler and write where each compiled graph's time goes "
                    "into its artifact record (shown by the fuse-all editor extension).")
    parser.add_argument("-m", dest="module", action="store_true", help="run a module (like python -m)")
    parser.add_argument("--activities", choices=("auto", "cpu", "cuda", "all"), default="auto",
                        help="what to profile: auto = CPU, plus CUDA when torch.cuda is available")
    parser.add_argument("--warmup", type=int, default=1,
                        help="calls of each graph left out of the averages (kept when a graph ran no more often)")
    parser.add_argument("--artifact-dir", help="where the records are (default: the compiler's rule)")
    parser.add_argument("target", help="the script (or module with -m)")
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help="arguments for the script")
    options = parser.parse_args(argv)
    if options.artifact_dir:  # the compiles in this process must write where we read
        os.environ[artifacts.DIR_VARIABLE] = options.artifact_dir
    code, events, wanted = run_under_profiler(options.target, options.arguments, options.module,
                                              options.activities)
    calls = graph_calls(events)
    written = write_profiles(calls, options.artifact_dir, max(options.warmup, 0), wanted)
    for line in summary_lines(written):
        print(line, file=sys.stderr)
    if not calls:
        print("fuse-all profile: no graph compiled with backend=\"fuse_all\" ran", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())

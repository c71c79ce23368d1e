"""From what one compile produced to its artifact record: kernels, ATen calls and fusions, each with the
user source lines it came from.

The IR hands provenance over as `Origin`s (aten_op, file, line, code) on kernels, extern calls and the
fusion report; this module turns them into the record's entries and writes the record. It reads the
compile result by attribute (duck typing), so a stage can add fields without touching this file.
"""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

from . import artifacts

log = logging.getLogger("fuse_all")


def _unique(values: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(v for v in values if v is not None))


def output_code_lines(output_code: str | None, names: Iterable[str]) -> dict[str, int]:
    """1-based line of each kernel name's first whole-word mention in output_code.py: its definition,
    since the host program defines every kernel (or embeds its source) before launching it."""
    if not output_code:
        return {}
    try:
        text = Path(output_code).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    wanted = set(names)
    found: dict[str, int] = {}
    for index, line in enumerate(text.splitlines(), 1):   # one pass over the words, not one per kernel
        for word in _WORD.findall(line):
            if word in wanted and word not in found:
                found[word] = index
        if len(found) == len(wanted):
            break
    return found


_WORD = re.compile(r"[A-Za-z0-9_]+")


def kernel_bytes(program: Any, kernel: Any) -> int | None:
    """Bytes one launch of `kernel` reads and writes: each distinct buffer it takes, whole (twice for one it
    updates in place: read, then written), at the sizes the graph was compiled for (size hints for dynamic
    sizes). The denominator of achieved bandwidth; None when a size is unknown."""
    return kernels_bytes(program, [kernel])[kernel.name]


def kernels_bytes(program: Any, kernels: Iterable[Any]) -> dict[str, int | None]:
    """`kernel_bytes` of each kernel by name, the program's buffers looked up once for all of them."""
    specs = _buffer_specs(program)
    hints = getattr(program, "size_hints", {})
    numels: dict[Any, int] = {}
    return {kernel.name: _kernel_bytes(kernel, specs, hints, numels) for kernel in kernels}


def _buffer_specs(program: Any) -> dict[str, Any]:
    specs = {inp.name: inp.spec for inp in getattr(program, "inputs", ()) if getattr(inp, "spec", None)}
    for step in getattr(program, "steps", ()):  # ATen results are buffers no Alloc step lists
        for name, spec in zip(getattr(step, "outputs", ()), getattr(step, "out_specs", ())):
            if name and spec is not None:
                specs[name] = spec
    specs.update(getattr(program, "buffers", {}))
    return specs


def _kernel_bytes(kernel: Any, specs: Mapping[str, Any], hints: Mapping, numels: dict) -> int | None:
    from fuse_all_ir import torch_dtype

    total = 0
    # an output written in place of an input is read (the input's values) and written: it counts twice
    in_place = [output for output, _ in getattr(kernel, "in_place", ())]
    for name in [*dict.fromkeys([*kernel.inputs, *kernel.outputs]), *in_place]:
        spec = specs.get(name)
        if spec is None:
            continue  # a constant embedded in the host program: small
        try:
            total += _numel(tuple(spec.size), hints, numels) * torch_dtype(spec.dtype).itemsize
        except (TypeError, ValueError, KeyError, AttributeError):
            return None
    return total


def _numel(size: tuple, hints: Mapping, numels: dict) -> int:
    """The number of elements of `size` (symbolic extents at their hints); memoized per size."""
    numel = numels.get(size)
    if numel is None:
        import sympy
        numel = 1
        for extent in size:
            numel *= int(extent) if isinstance(extent, int) else int(sympy.sympify(extent).subs(hints))
        numels[size] = numel
    return numel


def kernel_entries(kernels: Iterable[Any], sources: Mapping[str, str], language: str,
                   output_code: str | None, traffic: Mapping[str, int | None] | None = None) -> list[dict[str, Any]]:
    """Record kernels from IR kernels (name, kind, origins), their rendered sources and bytes moved."""
    kernels = list(kernels)
    traffic = traffic or {}
    lines = output_code_lines(output_code, [k.name for k in kernels])
    return [{
        "name": kernel.name,
        "language": language,
        "kind": getattr(kernel, "kind", None),
        "source": sources.get(kernel.name, ""),
        "aten_ops": _unique(getattr(o, "aten_op", None) for o in getattr(kernel, "origins", ())),
        "source_lines": artifacts.source_lines(getattr(kernel, "origins", ())),
        "output_code_line": lines.get(kernel.name),
        "bytes": traffic.get(kernel.name),
    } for kernel in kernels]


def extern_entries(externs: Iterable[Any]) -> list[dict[str, Any]]:
    """Record extern calls from the IR's ExternCall steps (target, reason, origins)."""
    return [{
        "target": str(extern.target),
        "reason": getattr(extern, "reason", None) or None,
        "source_lines": artifacts.source_lines(getattr(extern, "origins", ())),
    } for extern in externs]


def fusion_entries(report: Any) -> dict[str, Any]:
    """The record's `fusion` object from a fusion report (`to_json()` or a dict of the same shape)."""
    if report is None:
        return {"groups": [], "rejected": []}
    document = report.to_json() if hasattr(report, "to_json") else dict(report)
    return {"groups": document.get("groups", []), "rejected": document.get("rejected", [])}


def cudagraphs_entry(state: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """{"enabled", "decision"}; a list of `decisions` (one per fallback) is joined into one line."""
    if not state:
        return None
    decision = state.get("decision")
    if decision is None and state.get("decisions"):
        decision = "; ".join(str(d) for d in state["decisions"])
    return {"enabled": bool(state.get("enabled", False)), "decision": decision}


def record_for_compile(graph: Any, compiled: Any, mode: str | None) -> dict[str, Any]:
    """The record of one compiled graph.

    `graph` is the CapturedGraph (graph_id, kind, device, function); `compiled` what the backend made of
    it: kernels, kernel_sources, language, externs, report, output_code, compile_time_s, cudagraphs and,
    when the graph fell back to ATen, fallback_reason (kept as an extra field).
    """
    from fuse_all_capture import graph_breaks

    output_code = getattr(compiled, "output_code", None)
    record = artifacts.build_record(
        graph_id=graph.graph_id,
        function=graph.function,
        device=str(graph.device),
        mode=mode,
        graph_kind=graph.kind,
        compile_time_s=float(getattr(compiled, "compile_time_s", 0.0)),
        kernels=kernel_entries(getattr(compiled, "kernels", ()), getattr(compiled, "kernel_sources", {}),
                               getattr(compiled, "language", ""), output_code,
                               getattr(compiled, "kernel_bytes", None)),
        externs=extern_entries(getattr(compiled, "externs", ())),
        fusion=fusion_entries(getattr(compiled, "report", None)),
        graph_breaks=graph_breaks(graph.function) if graph.function else [],
        cudagraphs=cudagraphs_entry(getattr(compiled, "cudagraphs", None)),
        output_code=os.path.abspath(output_code) if output_code else None,
    )
    if getattr(compiled, "fallback_reason", None):
        record["fallback_reason"] = str(compiled.fallback_reason)
    # Optional fields (schema 1 readers ignore unknown fields): where the tools can find more.
    if getattr(compiled, "compile_id", None):
        record["compile_id"] = str(compiled.compile_id)
    for name in ("fusion_svg", "debug_dir"):
        path = getattr(compiled, name, None)
        if isinstance(path, (str, os.PathLike)) and path:
            record[name] = os.path.abspath(path)
    return record


def write_compiled(graph: Any, compiled: Any, mode: str | None,
                   directory: str | os.PathLike[str] | None = None) -> Path | None:
    """Build and write the record of one compile; never raises (the editor's record must not break a
    compile). A graph whose function is unknown gets no record: the editor could not place it."""
    if getattr(graph, "function", None) is None:
        log.debug("fuse-all: no artifact record for %s: its source function is unknown", graph.graph_id)
        return None
    try:
        return artifacts.write_record(record_for_compile(graph, compiled, mode), directory)
    except Exception as error:  # noqa: BLE001 - see the docstring
        log.warning("fuse-all: no artifact record for %s: %s: %s", graph.graph_id, type(error).__name__, error)
        return None

"""Artifact records: one JSON document per compiled graph for the editor (docs/artifact-record.md).

Every compile leaves one, no flag needed. `build_record` checks the document against schema version 2,
`write_record` writes it atomically under the size limit the language server enforces. Writing is best
effort: a failure is a logged warning, never a failed compile.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from fuse_all_ir import UnsafeDirectory, atomic_write, make_private, registered_targets, user_cache_dir

from .__about__ import __version__

log = logging.getLogger("fuse_all")

SCHEMA = "fuse-all-artifact"
SCHEMA_VERSION = 2  # 2: kernel `bytes`, the `profile` section (fuse_all.profiling)
MAX_RECORD_BYTES = 8 * 1024 * 1024
DIR_VARIABLE = "FUSE_ALL_ARTIFACT_DIR"
GRAPH_ID = re.compile(r"[A-Za-z0-9_-]+\Z")
GRAPH_KINDS = ("inference", "forward", "backward")
KERNEL_KINDS = ("pointwise", "reduction")

# Kernel sources are what grows without bound (one per fused group); they are cut first, to this many
# characters each at the least, with a marker saying so. The full sources stay in output_code.py.
_MIN_KEPT_SOURCE = 2048
_TRUNCATION_MARK = "\n/* fuse-all: source truncated to keep the record under 8 MiB ({kept} of {total} characters) */\n"


class RecordError(ValueError):
    """A record field that does not follow the contract; the message names the field."""


def default_artifact_dir(env: Mapping[str, str] | None = None, platform: str | None = None) -> Path:
    """`$FUSE_ALL_ARTIFACT_DIR`, else `<user cache dir>/fuse-all/artifacts` (the rule the server shares;
    `fuse_all_lsp.records` has its own copy since the server imports neither torch nor the compiler).

    Not under `$FUSE_ALL_CACHE_DIR`: the editor, started without that variable, must find the records."""
    env = os.environ if env is None else env
    override = env.get(DIR_VARIABLE)
    if override:
        return Path(override)
    return user_cache_dir(env, platform) / "fuse-all" / "artifacts"


# ---- building --------------------------------------------------------------------------------------

def build_record(
    *,
    graph_id: str,
    function: Any,
    device: str,
    mode: str | None,
    graph_kind: str,
    compile_time_s: float,
    kernels: Iterable[Mapping[str, Any]],
    externs: Iterable[Mapping[str, Any]],
    fusion: Mapping[str, Any] | None,
    graph_breaks: Iterable[Mapping[str, Any]],
    cudagraphs: Mapping[str, Any] | None,
    output_code: str | os.PathLike[str] | None,
    created: float | None = None,
) -> dict[str, Any]:
    """A schema-2 record; raises RecordError for a field of the wrong type.

    `function` is a FunctionInfo (name, file, first_line, last_line) or a dict with those keys; a missing
    last_line is found with `ast`. Source lines without an absolute file and a line >= 1 are dropped rather
    than refused: the server rejects a whole record for one bad line, and an unknown location is no error.
    """
    if not isinstance(graph_id, str) or not GRAPH_ID.match(graph_id):
        raise RecordError(f"graph_id: {graph_id!r} is not [A-Za-z0-9_-]+")
    if graph_kind not in GRAPH_KINDS:
        raise RecordError(f"graph_kind: expected one of {GRAPH_KINDS}, got {graph_kind!r}")
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "graph_id": graph_id,
        "created": _number("created", time.time() if created is None else created),
        "fuse_all_version": __version__,
        "torch_version": _torch_version(),
        "device": _text("device", device),
        "mode": None if mode is None else _text("mode", mode),
        "graph_kind": graph_kind,
        "compile_time_s": _number("compile_time_s", compile_time_s),
        "function": _function(function),
        "kernels": [_kernel(k, f"kernels[{i}]") for i, k in enumerate(_list("kernels", kernels))],
        "externs": [_extern(e, f"externs[{i}]") for i, e in enumerate(_list("externs", externs))],
        "fusion": _fusion(fusion),
        "graph_breaks": [b for b in (_graph_break(b) for b in _list("graph_breaks", graph_breaks)) if b],
        "cudagraphs": None if cudagraphs is None else {
            "enabled": _flag("cudagraphs.enabled", cudagraphs.get("enabled", False)),
            "decision": _optional_text("cudagraphs.decision", cudagraphs.get("decision")),
        },
        "output_code": _absolute_or_none("output_code", output_code),
    }


def _text(where: str, value: Any) -> str:
    if not isinstance(value, str):
        raise RecordError(f"{where}: expected a string, got {type(value).__name__}")
    return value


def _optional_text(where: str, value: Any) -> str | None:
    return None if value is None else _text(where, value)


def _flag(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise RecordError(f"{where}: expected true or false, got {type(value).__name__}")
    return value


def _number(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RecordError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def _line(value: Any) -> int | None:
    """An int >= 1 (numpy and sympy integers included), else None."""
    if isinstance(value, bool):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number >= 1 and number == value else None


def _list(where: str, value: Any) -> list[Any]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise RecordError(f"{where}: expected a list, got {type(value).__name__}")
    return list(value)


def _texts(where: str, values: Any) -> list[str]:
    return [_text(f"{where}[{i}]", v) for i, v in enumerate(_list(where, values))]


def _field(item: Any, key: str, default: Any = None) -> Any:
    """`item[key]` for mappings, `item.key` for objects (the IR's Origin dataclasses)."""
    if isinstance(item, Mapping):
        return item.get(key, default)
    return getattr(item, key, default)


def _absolute_or_none(where: str, value: Any) -> str | None:
    if value is None:
        return None
    path = os.fspath(value)
    if not os.path.isabs(path):
        raise RecordError(f"{where}: expected an absolute path, got {path!r}")
    return path


def source_lines(items: Iterable[Any]) -> list[dict[str, Any]]:
    """Record source lines from dicts or objects with file/line/code/aten_op; unlocated ones dropped,
    duplicates merged (an op repeated on one line, e.g. in a loop, is one line for the editor)."""
    lines, seen = [], set()
    for item in items or ():
        file, line = _field(item, "file"), _line(_field(item, "line"))
        if not isinstance(file, str) or not os.path.isabs(file) or line is None:
            continue
        code = _field(item, "code") or ""
        aten_op = _field(item, "aten_op")
        entry = {"file": file, "line": line, "code": str(code), "aten_op": None if aten_op is None else str(aten_op)}
        key = tuple(entry.values())
        if key not in seen:
            seen.add(key)
            lines.append(entry)
    return lines


def _kernel(kernel: Mapping[str, Any], where: str) -> dict[str, Any]:
    language = kernel.get("language")
    targets = registered_targets()     # `language` is the target's registered name (fuse_all_ir.targets)
    if language not in targets:
        raise RecordError(f"{where}.language: expected a registered target ({', '.join(sorted(targets))}), "
                          f"got {language!r}")
    kind = kernel.get("kind")
    if kind is not None and kind not in KERNEL_KINDS:
        raise RecordError(f"{where}.kind: expected one of {KERNEL_KINDS} or null, got {kind!r}")
    output_code_line = kernel.get("output_code_line")
    if output_code_line is not None and _line(output_code_line) is None:
        raise RecordError(f"{where}.output_code_line: expected a line number or null, got {output_code_line!r}")
    return {
        "name": _text(f"{where}.name", kernel.get("name")),
        "language": language,
        # (2) the source's language id for editors and Markdown fences, from the target's registration
        "source_language": targets[language].source_language or None,
        "kind": kind,
        "source": _text(f"{where}.source", kernel.get("source")),
        "aten_ops": _texts(f"{where}.aten_ops", kernel.get("aten_ops", [])),
        "source_lines": source_lines(kernel.get("source_lines", [])),
        "output_code_line": _line(output_code_line),
        "bytes": _bytes(f"{where}.bytes", kernel.get("bytes")),
    }


def _bytes(where: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RecordError(f"{where}: expected a byte count (int >= 0) or null, got {value!r}")
    return value


def _extern(extern: Mapping[str, Any], where: str) -> dict[str, Any]:
    return {
        "target": _text(f"{where}.target", extern.get("target")),
        "reason": _optional_text(f"{where}.reason", extern.get("reason")),
        "source_lines": source_lines(extern.get("source_lines", [])),
    }


def _fusion(fusion: Mapping[str, Any] | None) -> dict[str, Any]:
    fusion = fusion or {}
    groups = [{
        "kernel": _text(f"fusion.groups[{i}].kernel", g.get("kernel")),
        "nodes": _texts(f"fusion.groups[{i}].nodes", g.get("nodes", [])),
        "why": _optional_text(f"fusion.groups[{i}].why", g.get("why")),
    } for i, g in enumerate(_list("fusion.groups", fusion.get("groups", [])))]
    rejected = [{
        "producer": _text(f"fusion.rejected[{i}].producer", r.get("producer")),
        "consumer": _text(f"fusion.rejected[{i}].consumer", r.get("consumer")),
        "reason": _text(f"fusion.rejected[{i}].reason", r.get("reason")),
        "source_lines": source_lines(r.get("source_lines", [])),
    } for i, r in enumerate(_list("fusion.rejected", fusion.get("rejected", [])))]
    return {"groups": groups, "rejected": rejected}


def _graph_break(entry: Mapping[str, Any]) -> dict[str, Any] | None:
    located = source_lines([entry])
    if not located:
        return None
    return {"file": located[0]["file"], "line": located[0]["line"], "reason": str(entry.get("reason") or "")}


def _function(function: Any) -> dict[str, Any]:
    if function is None:
        raise RecordError("function: unknown (a record without a source location is of no use to the editor)")
    name, file = _field(function, "name"), _field(function, "file")
    first_line, last_line = _line(_field(function, "first_line")), _line(_field(function, "last_line"))
    if not isinstance(name, str) or not isinstance(file, str) or not os.path.isabs(file) or first_line is None:
        raise RecordError(f"function: needs a name, an absolute file and a first_line, got {function!r}")
    if last_line is None:
        last_line = _last_line(file, name, first_line)
    return {"name": name, "file": file, "first_line": first_line, "last_line": max(last_line, first_line),
            "source_sha256": _sha256(file)}


def _last_line(file: str, name: str, first_line: int) -> int:
    from fuse_all_capture import function_span

    span = function_span(file, name, first_line)
    return span[2] if span else first_line


def _sha256(file: str) -> str | None:
    try:
        with open(file, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None  # a notebook cell or a deleted file: the server then cannot call it stale


def _torch_version() -> str | None:
    torch = sys.modules.get("torch")
    if torch is not None:
        return str(torch.__version__)
    try:
        from importlib.metadata import version

        return version("torch")
    except Exception:  # noqa: BLE001 - metadata lookups fail in odd installs; the field is optional
        return None


# ---- writing ---------------------------------------------------------------------------------------

def encode(record: Mapping[str, Any]) -> bytes:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def fit_to_limit(record: dict[str, Any], limit: int = MAX_RECORD_BYTES) -> bytes | None:
    """The encoded record, kernel sources truncated (the longest the most) until it fits; None if even
    empty sources do not fit. Truncated kernels get `"source_truncated": true` and the record `"truncated": true`
    (extra fields, which readers of schema 1 ignore)."""
    data = encode(record)
    if len(data) <= limit:
        return data
    record = dict(record, kernels=[dict(k) for k in record.get("kernels", [])])  # the caller's stays whole
    kernels = record["kernels"]
    originals = [k["source"] for k in kernels]
    budget = max(limit - (len(data) - sum(len(s.encode("utf-8")) for s in originals)) - 1024, 0)
    # Fair share: short sources stay whole, the long ones split what is left.
    keep = _water_level([len(s.encode("utf-8")) for s in originals], budget)
    for cap in (max(keep, _MIN_KEPT_SOURCE), 0):
        for kernel, source in zip(kernels, originals):
            if len(source) > cap:
                mark = _TRUNCATION_MARK.format(kept=cap, total=len(source))
                kernel["source"] = source[:cap] + mark
                kernel["source_truncated"] = True
        record["truncated"] = True
        data = encode(record)
        if len(data) <= limit:
            return data
    return None


def _water_level(sizes: list[int], budget: int) -> int:
    """The largest per-source cap c with sum(min(size, c)) <= budget."""
    remaining, count = budget, len(sizes)
    for size in sorted(sizes):
        if size * count > remaining:
            return remaining // count
        remaining -= size
        count -= 1
    return max(sizes, default=0)


def write_record(record: dict[str, Any], directory: str | os.PathLike[str] | None = None) -> Path | None:
    """Write `record` to `<directory>/<graph_id>.json` atomically (a temp file in the same folder, then
    `os.replace`), so the server never reads half a record. Returns the path, or None on failure (logged)."""
    graph_id = record.get("graph_id")
    if not isinstance(graph_id, str) or not GRAPH_ID.match(graph_id):
        log.warning("fuse-all: not writing an artifact record with graph_id %r", graph_id)
        return None
    try:
        data = fit_to_limit(record)
    except (TypeError, ValueError) as error:
        log.warning("fuse-all: artifact record %s is not JSON: %s", graph_id, error)
        return None
    if data is None:
        log.warning("fuse-all: artifact record %s exceeds %d bytes even without kernel sources; not written",
                    graph_id, MAX_RECORD_BYTES)
        return None
    folder = Path(directory) if directory is not None else default_artifact_dir()
    target = folder / f"{graph_id}.json"
    try:
        # Private like the caches (0700, ours, not writable by others); the default one's parent is the
        # user's fuse-all cache folder, checked too.
        default = directory is None and not os.environ.get(DIR_VARIABLE)
        make_private(folder, below=folder.parent if default else None, tighten=default)
        # The temp name ends in .tmp: the server lists only *.json files, so it never sees it.
        atomic_write(target, data)
    except UnsafeDirectory as error:
        log.warning("fuse-all: not writing artifact record %s: %s (chmod 700 it, or set $%s)", target, error,
                    DIR_VARIABLE)
        return None
    except OSError as error:
        log.warning("fuse-all: cannot write artifact record %s: %s", target, error)
        return None
    return target

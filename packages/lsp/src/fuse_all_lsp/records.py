"""Artifact records (docs/artifact-record.md): locate, read, validate.

Every record is untrusted input. A record that is not what the contract says is skipped with a
reason; nothing here raises for a bad record.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = "fuse-all-artifact"
SCHEMA_VERSION = 2
MAX_RECORD_BYTES = 8 * 1024 * 1024
GRAPH_ID = re.compile(r"[A-Za-z0-9_-]+\Z")


def default_artifact_dir(env: dict[str, str] | None = None, platform: str | None = None) -> Path:
    """The directory the compiler writes records to, by the rule both sides share."""
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    if env.get("FUSE_ALL_ARTIFACT_DIR"):
        return Path(env["FUSE_ALL_ARTIFACT_DIR"])
    if platform == "win32":
        cache = Path(env["LOCALAPPDATA"]) if env.get("LOCALAPPDATA") else Path.home() / "AppData" / "Local"
    elif platform == "darwin":
        cache = Path.home() / "Library" / "Caches"
    else:
        cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return cache / "fuse-all" / "artifacts"


class RecordError(ValueError):
    """A record that does not follow the contract; the message says where and why."""


@dataclass(frozen=True)
class SourceLine:
    file: str
    line: int
    code: str
    aten_op: str | None


@dataclass(frozen=True)
class Kernel:
    name: str
    language: str
    kind: str | None
    source: str
    aten_ops: tuple[str, ...]
    source_lines: tuple[SourceLine, ...]
    output_code_line: int | None
    bytes: int | None = None
    source_language: str | None = None   # the target's language id for the source ("cpp", "python")

    @property
    def fence_language(self) -> str:
        """The Markdown fence's language: the record's `source_language`, else the one the two first
        targets had before records carried it (records written by older versions)."""
        return self.source_language or _LEGACY_SOURCE_LANGUAGE.get(self.language, "")


# Records written before kernels carried `source_language` (schema 2 without the field).
_LEGACY_SOURCE_LANGUAGE = {"cpp": "cpp", "triton": "python"}
_LANGUAGE_ID = re.compile(r"[A-Za-z0-9_.+#-]{1,32}\Z")


@dataclass(frozen=True)
class Extern:
    target: str
    reason: str | None
    source_lines: tuple[SourceLine, ...]


@dataclass(frozen=True)
class FusionGroup:
    kernel: str
    nodes: tuple[str, ...]
    why: str | None


@dataclass(frozen=True)
class RejectedFusion:
    producer: str
    consumer: str
    reason: str
    source_lines: tuple[SourceLine, ...]


@dataclass(frozen=True)
class GraphBreak:
    file: str
    line: int
    reason: str


@dataclass(frozen=True)
class CudaGraphs:
    enabled: bool
    decision: str | None


@dataclass(frozen=True)
class CompiledFunction:
    name: str
    file: str
    first_line: int
    last_line: int
    source_sha256: str | None


@dataclass(frozen=True)
class KernelTime:
    name: str
    us: float
    share: float
    launches_per_call: float | None
    bytes: int | None
    gbps: float | None


@dataclass(frozen=True)
class AtenTime:
    name: str
    us: float


@dataclass(frozen=True)
class ExternTime:
    index: int
    target: str
    us: float
    share: float
    aten_ops: tuple[AtenTime, ...]


@dataclass(frozen=True)
class LineTime:
    file: str
    line: int
    us: float
    share: float
    kernels: tuple[str, ...]
    externs: tuple[int, ...]


@dataclass(frozen=True)
class Profile:
    """Where a graph's time went, per call (`python -m fuse_all.profiling`; docs/artifact-record.md)."""

    created: float
    basis: str  # "cpu" | "device"
    calls: int
    warmup_calls: int
    graph_us: float
    host_us: float | None
    other_us: float | None
    kernels: tuple[KernelTime, ...]
    externs: tuple[ExternTime, ...]
    lines: tuple[LineTime, ...]

    def kernel(self, name: str) -> KernelTime | None:
        return next((k for k in self.kernels if k.name == name), None)

    def extern(self, index: int) -> ExternTime | None:
        return next((e for e in self.externs if e.index == index), None)


@dataclass(frozen=True)
class Record:
    path: str
    graph_id: str
    created: float
    fuse_all_version: str | None
    torch_version: str | None
    device: str | None
    mode: str | None
    graph_kind: str | None
    compile_time_s: float | None
    function: CompiledFunction
    kernels: tuple[Kernel, ...]
    externs: tuple[Extern, ...]
    fusion_groups: tuple[FusionGroup, ...]
    rejected_fusions: tuple[RejectedFusion, ...]
    graph_breaks: tuple[GraphBreak, ...]
    cudagraphs: CudaGraphs | None
    output_code: str | None
    profile: Profile | None = None
    fusion_svg: str | None = None

    @property
    def fused_op_count(self) -> int:
        return sum(len(kernel.aten_ops) for kernel in self.kernels)


_MISSING = object()


class _Fields:
    """Typed access to one JSON object; every failure names the field's path."""

    def __init__(self, value: Any, where: str):
        if not isinstance(value, dict):
            raise RecordError(f"{where or 'record'}: expected an object, got {type(value).__name__}")
        self.value = value
        self.where = where

    def _path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def _get(self, key: str, check: Callable[[Any], bool], expected: str, required: bool, default: Any) -> Any:
        value = self.value.get(key, _MISSING)
        if value is _MISSING or (value is None and not required):
            if required:
                raise RecordError(f"{self._path(key)}: missing")
            return default
        if not check(value):
            raise RecordError(f"{self._path(key)}: expected {expected}, got {type(value).__name__}")
        return value

    def text(self, key: str, required: bool = True) -> Any:
        return self._get(key, lambda v: isinstance(v, str), "a string", required, None)

    def check(self, key: str, valid, what: str) -> Any:
        """An optional field that must pass `valid` when present (None when absent or null)."""
        return self._get(key, valid, what, False, None)

    def line(self, key: str, required: bool = True) -> Any:
        return self._get(key, _is_line, "a line number (int >= 1)", required, None)

    def number(self, key: str, required: bool = True) -> Any:
        value = self._get(key, _is_finite_number, "a finite number", required, None)
        return None if value is None else float(value)

    def flag(self, key: str) -> bool:
        return self._get(key, lambda v: isinstance(v, bool), "true or false", True, False)

    def count(self, key: str, required: bool = True) -> Any:
        return self._get(key, _is_count, "an integer >= 0", required, None)

    def texts(self, key: str) -> tuple[str, ...]:
        items = self._get(key, lambda v: isinstance(v, list), "a list", False, [])
        for index, item in enumerate(items):
            if not isinstance(item, str):
                raise RecordError(f"{self._path(key)}[{index}]: expected a string, got {type(item).__name__}")
        return tuple(items)

    def objects(self, key: str, parse: Callable[[_Fields], Any], required: bool = False) -> tuple[Any, ...]:
        items = self._get(key, lambda v: isinstance(v, list), "a list", required, [])
        return tuple(parse(_Fields(item, f"{self._path(key)}[{index}]")) for index, item in enumerate(items))

    def object(self, key: str, required: bool = True) -> _Fields | None:
        value = self._get(key, lambda v: isinstance(v, dict), "an object", required, None)
        return None if value is None else _Fields(value, self._path(key))


def _is_line(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _absolute(fields: _Fields, key: str) -> str:
    path = fields.text(key)
    if not os.path.isabs(path):
        raise RecordError(f"{fields._path(key)}: expected an absolute path, got {path!r}")
    return path


def _source_line(fields: _Fields) -> SourceLine:
    return SourceLine(
        file=_absolute(fields, "file"),
        line=fields.line("line"),
        code=fields.text("code", required=False) or "",
        aten_op=fields.text("aten_op", required=False),
    )


def _kernel(fields: _Fields) -> Kernel:
    return Kernel(
        name=fields.text("name"),
        language=fields.text("language"),
        kind=fields.text("kind", required=False),
        source=fields.text("source"),
        aten_ops=fields.texts("aten_ops"),
        source_lines=fields.objects("source_lines", _source_line),
        output_code_line=fields.line("output_code_line", required=False),
        bytes=fields.count("bytes", required=False),
        source_language=fields.check("source_language", lambda v: isinstance(v, str) and _LANGUAGE_ID.match(v),
                                     "a language id such as \"cpp\" or \"python\""),
    )


def _extern(fields: _Fields) -> Extern:
    return Extern(
        target=fields.text("target"),
        reason=fields.text("reason", required=False),
        source_lines=fields.objects("source_lines", _source_line),
    )


def _group(fields: _Fields) -> FusionGroup:
    return FusionGroup(
        kernel=fields.text("kernel"), nodes=fields.texts("nodes"), why=fields.text("why", required=False)
    )


def _rejected(fields: _Fields) -> RejectedFusion:
    return RejectedFusion(
        producer=fields.text("producer"),
        consumer=fields.text("consumer"),
        reason=fields.text("reason"),
        source_lines=fields.objects("source_lines", _source_line),
    )


def _graph_break(fields: _Fields) -> GraphBreak:
    return GraphBreak(file=_absolute(fields, "file"), line=fields.line("line"), reason=fields.text("reason"))


def _kernel_time(fields: _Fields) -> KernelTime:
    return KernelTime(
        name=fields.text("name"),
        us=fields.number("us"),
        share=fields.number("share"),
        launches_per_call=fields.number("launches_per_call", required=False),
        bytes=fields.count("bytes", required=False),
        gbps=fields.number("gbps", required=False),
    )


def _aten_time(fields: _Fields) -> AtenTime:
    return AtenTime(name=fields.text("name"), us=fields.number("us"))


def _extern_time(fields: _Fields) -> ExternTime:
    return ExternTime(
        index=fields.count("index"),
        target=fields.text("target"),
        us=fields.number("us"),
        share=fields.number("share"),
        aten_ops=fields.objects("aten_ops", _aten_time),
    )


def _line_time(fields: _Fields) -> LineTime:
    externs = fields._get("externs", lambda v: isinstance(v, list) and all(map(_is_count, v)), "a list of indices",
                          False, [])
    return LineTime(
        file=_absolute(fields, "file"),
        line=fields.line("line"),
        us=fields.number("us"),
        share=fields.number("share"),
        kernels=fields.texts("kernels"),
        externs=tuple(externs),
    )


def _profile(fields: _Fields) -> Profile:
    basis = fields.text("basis")
    if basis not in ("cpu", "device"):
        raise RecordError(f"{fields._path('basis')}: expected \"cpu\" or \"device\", got {basis!r}")
    return Profile(
        created=fields.number("created", required=False) or 0.0,
        basis=basis,
        calls=fields.count("calls"),
        warmup_calls=fields.count("warmup_calls", required=False) or 0,
        graph_us=fields.number("graph_us"),
        host_us=fields.number("host_us", required=False),
        other_us=fields.number("other_us", required=False),
        kernels=fields.objects("kernels", _kernel_time),
        externs=fields.objects("externs", _extern_time),
        lines=fields.objects("lines", _line_time),
    )


def _function(fields: _Fields) -> CompiledFunction:
    function = CompiledFunction(
        name=fields.text("name"),
        file=_absolute(fields, "file"),
        first_line=fields.line("first_line"),
        last_line=fields.line("last_line"),
        source_sha256=fields.text("source_sha256", required=False),
    )
    if function.last_line < function.first_line:
        raise RecordError(f"{fields.where}: last_line {function.last_line} is before first_line {function.first_line}")
    return function


def parse_record(document: Any, path: str = "") -> Record:
    """Validate one decoded JSON document; raises RecordError naming the first problem."""
    top = _Fields(document, "")
    if top.value.get("schema") != SCHEMA:
        raise RecordError(f"schema: expected {SCHEMA!r}, got {top.value.get('schema')!r} (not a fuse-all record)")
    version = top.value.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise RecordError(f"schema_version: expected an integer, got {version!r}")
    if version > SCHEMA_VERSION:
        raise RecordError(
            f"schema_version {version} is newer than this server reads ({SCHEMA_VERSION}); update fuse-all-lsp"
        )
    if version < 1:
        raise RecordError(f"schema_version {version} is not a known version")
    graph_id = top.text("graph_id")
    if not GRAPH_ID.match(graph_id):
        raise RecordError(f"graph_id: {graph_id!r} is not [A-Za-z0-9_-]+")
    fusion = top.object("fusion", required=False)
    cudagraphs = top.object("cudagraphs", required=False)
    output_code = top.text("output_code", required=False)
    if output_code is not None and not os.path.isabs(output_code):
        raise RecordError(f"output_code: expected an absolute path, got {output_code!r}")
    fusion_svg = top.text("fusion_svg", required=False)
    if fusion_svg is not None and not os.path.isabs(fusion_svg):
        raise RecordError(f"fusion_svg: expected an absolute path, got {fusion_svg!r}")
    profile = top.object("profile", required=False)
    return Record(
        path=path,
        graph_id=graph_id,
        created=top.number("created", required=False) or 0.0,
        fuse_all_version=top.text("fuse_all_version", required=False),
        torch_version=top.text("torch_version", required=False),
        device=top.text("device", required=False),
        mode=top.text("mode", required=False),
        graph_kind=top.text("graph_kind", required=False),
        compile_time_s=top.number("compile_time_s", required=False),
        function=_function(top.object("function")),
        kernels=top.objects("kernels", _kernel, required=True),
        externs=top.objects("externs", _extern),
        fusion_groups=fusion.objects("groups", _group) if fusion else (),
        rejected_fusions=fusion.objects("rejected", _rejected) if fusion else (),
        graph_breaks=top.objects("graph_breaks", _graph_break),
        cudagraphs=CudaGraphs(cudagraphs.flag("enabled"), cudagraphs.text("decision", required=False))
        if cudagraphs
        else None,
        output_code=output_code,
        profile=_profile(profile) if profile else None,
        fusion_svg=fusion_svg,
    )


def read_record(path: str | os.PathLike[str]) -> Record:
    """Read and validate one record file; raises RecordError for anything unusable."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_RECORD_BYTES + 1)
    except OSError as error:
        raise RecordError(f"cannot read: {error.strerror or error}") from None
    if len(data) > MAX_RECORD_BYTES:
        raise RecordError(f"larger than {MAX_RECORD_BYTES // (1024 * 1024)} MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RecordError(f"not UTF-8 (byte {error.start})") from None
    try:
        document = json.loads(text)
    except RecursionError:
        raise RecordError("JSON nested too deeply") from None
    except ValueError as error:
        raise RecordError(f"not valid JSON: {error}") from None
    return parse_record(document, path)

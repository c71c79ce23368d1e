"""Which records are current, and where in the user's files they point."""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from stat import S_ISREG

from .pysource import FunctionInfo, SourceScan
from .records import Extern, GraphBreak, Kernel, LineTime, Record, RejectedFusion


@lru_cache(maxsize=4096)
def normalize(path: str) -> str:
    return os.path.normcase(os.path.realpath(path))


MAX_SOURCE_BYTES = 64 * 1024 * 1024


class SourceHashes:
    """sha256 of source files on disk, cached by (mtime, size).

    Paths come from untrusted records: only regular files of a source file's size are read
    (a record naming /dev/zero must not hang the server).
    """

    def __init__(self) -> None:
        self._cache: dict[str, tuple[tuple[int, int], str | None]] = {}

    def sha256(self, path: str) -> str | None:
        try:
            stat = os.stat(path)
        except OSError:
            return None
        if not S_ISREG(stat.st_mode) or stat.st_size > MAX_SOURCE_BYTES:
            return None
        key = (stat.st_mtime_ns, stat.st_size)
        cached = self._cache.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            with open(path, "rb") as handle:
                digest: str | None = hashlib.sha256(handle.read()).hexdigest()
        except OSError:
            digest = None
        self._cache[path] = (key, digest)
        return digest


@dataclass(frozen=True)
class Shown:
    """A record as the editor shows it: stale when its source file changed since the compile."""

    record: Record
    stale: bool


@dataclass(frozen=True)
class LineHit:
    shown: Shown
    kernel: Kernel | None = None
    extern: Extern | None = None
    rejected: RejectedFusion | None = None
    graph_break: GraphBreak | None = None
    time: LineTime | None = None


def _content_key(record: Record) -> tuple:
    return (
        record.function.file,
        record.function.name,
        record.function.first_line,
        record.graph_kind,
        record.device,
        tuple(kernel.source for kernel in record.kernels),
        tuple(extern.target for extern in record.externs),
    )


def select_current(records: Iterable[Record], hashes: SourceHashes) -> list[Shown]:
    """Per compiled function, the records of one source version, duplicates dropped.

    The version is the file as it is on disk when any record was compiled from it, else the
    version of the newest record (shown as stale). Records of one compile that differ in content
    (forward and backward, recompiles for new shapes, graph breaks) are all kept.
    """
    groups: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for record in records:
        groups[(record.function.file, record.function.name)].append(record)
    shown: list[Shown] = []
    for (file, _), group in groups.items():
        on_disk = hashes.sha256(file)
        fresh = [r for r in group if r.function.source_sha256 is None or r.function.source_sha256 == on_disk]
        if fresh and on_disk is not None:
            chosen, stale = fresh, False
        else:
            newest = max(group, key=lambda r: r.created)
            chosen = [r for r in group if r.function.source_sha256 == newest.function.source_sha256]
            stale = True
        latest: dict[tuple, Record] = {}
        for record in sorted(chosen, key=lambda r: r.created):
            latest[_content_key(record)] = record
        shown.extend(Shown(record, stale) for record in latest.values())
    return sorted(shown, key=lambda s: (s.record.created, s.record.graph_id))


class RecordIndex:
    """Current records by the file of their compiled function and by the user lines they name."""

    def __init__(self, shown: list[Shown]):
        self.shown = shown
        self._by_function_file: dict[str, list[Shown]] = defaultdict(list)
        self._hits: dict[str, dict[int, list[LineHit]]] = defaultdict(lambda: defaultdict(list))
        for item in shown:
            record = item.record
            self._by_function_file[normalize(record.function.file)].append(item)
            for kernel in record.kernels:
                for file, line in {(s.file, s.line) for s in kernel.source_lines}:
                    self._hits[normalize(file)][line].append(LineHit(item, kernel=kernel))
            for extern in record.externs:
                for file, line in {(s.file, s.line) for s in extern.source_lines}:
                    self._hits[normalize(file)][line].append(LineHit(item, extern=extern))
            for rejected in record.rejected_fusions:
                for file, line in {(s.file, s.line) for s in rejected.source_lines}:
                    self._hits[normalize(file)][line].append(LineHit(item, rejected=rejected))
            for graph_break in record.graph_breaks:
                self._hits[normalize(graph_break.file)][graph_break.line].append(LineHit(item, graph_break=graph_break))
            for time in record.profile.lines if record.profile else ():
                self._hits[normalize(time.file)][time.line].append(LineHit(item, time=time))

    def of_file(self, path: str) -> list[Shown]:
        """Records whose compiled function lives in `path`."""
        return list(self._by_function_file.get(normalize(path), ()))

    def hits(self, path: str) -> dict[int, list[LineHit]]:
        """Line number -> what the records say about that line of `path`."""
        return self._hits.get(normalize(path), {})


def assign_to_functions(shown: list[Shown], scan: SourceScan) -> dict[FunctionInfo, list[Shown]]:
    """Attribute each record of one file to the innermost function holding its first line.

    Dynamo's resume functions after a graph break carry another name but lines inside the
    original function, so lines decide, and a matching name only breaks ties.
    """
    assigned: dict[FunctionInfo, list[Shown]] = defaultdict(list)
    for item in shown:
        function = item.record.function
        holding = scan.functions_at(function.first_line)
        if not holding:
            continue
        same_name = [f for f in holding if f.name == function.name]
        assigned[same_name[0] if same_name else holding[0]].append(item)
    return assigned

"""The records of one artifact directory, re-read only when a file changes."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from .records import Record, RecordError, read_record


def load_records(directory: str | os.PathLike[str], on_skip: Callable[[str, str], None] | None = None) -> list[Record]:
    """All valid records in `directory`, newest first; `on_skip(path, reason)` hears about the rest."""
    store = RecordStore(directory, on_skip=on_skip)
    store.refresh()
    return store.records()


class RecordStore:
    """The records of one directory, re-read only for files whose (mtime, size, inode) changed.

    The inode is in the key because records are replaced atomically (a new file renamed over the
    old one) and coarse file-system clocks can give the new file the old one's mtime.
    """

    def __init__(self, directory: str | os.PathLike[str], on_skip: Callable[[str, str], None] | None = None):
        self.directory = Path(directory)
        self.on_skip = on_skip or (lambda path, reason: None)
        self._entries: dict[str, tuple[tuple[int, int, int], Record | None]] = {}
        self._records: list[Record] = []
        self.skipped: dict[str, str] = {}
        self.generation = 0

    def refresh(self) -> bool:
        """Re-scan the directory; True when the set of valid records changed."""
        seen: dict[str, tuple[tuple[int, int, int], Record | None]] = {}
        changed = False
        for path, key in self._listing():
            previous = self._entries.get(path)
            if previous is not None and previous[0] == key:
                seen[path] = previous
                continue
            changed = True
            try:
                record: Record | None = read_record(path)
                self.skipped.pop(path, None)
            except RecordError as error:
                record = None
                self.skipped[path] = str(error)
                self.on_skip(path, str(error))
            seen[path] = (key, record)
        if set(seen) != set(self._entries):
            changed = True
            for gone in set(self._entries) - set(seen):
                self.skipped.pop(gone, None)
        self._entries = seen
        if changed:
            valid = [record for _, record in seen.values() if record is not None]
            self._records = sorted(valid, key=lambda record: (-record.created, record.graph_id))
            self.generation += 1
        return changed

    def records(self) -> list[Record]:
        return list(self._records)

    def _listing(self) -> list[tuple[str, tuple[int, int, int]]]:
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return []
        listing = []
        for entry in entries:
            if entry.name.startswith(".") or not entry.name.endswith(".json"):
                continue
            try:
                stat = entry.stat()
            except OSError:
                continue
            if entry.is_file():
                listing.append((entry.path, (stat.st_mtime_ns, stat.st_size, stat.st_ino)))
        return listing

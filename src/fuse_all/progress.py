"""A progress line for long compiles: `fuse-all: graph 3 (forward) · fusing · kernels 12/40 · 4.1 s`.

Shown on stderr once a graph has been compiling for `DELAY_S` seconds, repainted in place (`\\r`) a few
times a second, and cleared when the graph is done. Only on a terminal, unless FUSE_ALL_PROGRESS=1 (or
`options={"progress": True}`) asks for it anyway; FUSE_ALL_PROGRESS=0 or `options={"progress": False}` turns
it off. On a non-terminal, when asked, each change of phase is one plain line instead of a repaint.

The line covers the whole of a Dynamo graph's compile: Dynamo hands the graph to the backend, AOTAutograd
traces it ("tracing"), then each ATen graph is lowered, fused, rendered and compiled. A backward graph
compiled later (at the first `.backward()`) gets a line of its own.

"graph n" counts the graphs this process has compiled (Dynamo finds them one at a time, so their total is
not known in advance). "kernels k/K" counts kernel sources rendered; the Triton compiles that follow run
in parallel and show as the "compiling K kernels" phase.
"""
from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import time
from typing import IO

from . import config

DELAY_S = 2.0
REFRESH_S = 0.25

_graph_counter = itertools.count(1)
_active = threading.local()


@contextlib.contextmanager
def for_graph(kind: str, option: bool | None = None):
    """The progress of the Dynamo graph being compiled on this thread, or a new one (a lazy backward)."""
    current = getattr(_active, "bar", None)
    if current is not None:
        current.kind = kind
        yield current
        return
    with Progress(kind, option) as bar:
        yield bar


def wanted(option: bool | None, stream: IO[str] | None = None) -> tuple[bool, bool]:
    """(show at all, as an in-place repaint)."""
    stream = sys.stderr if stream is None else stream
    is_terminal = bool(getattr(stream, "isatty", lambda: False)())
    choice = option if option is not None else config.flag("FUSE_ALL_PROGRESS")
    if choice is False:
        return False, False
    if choice is None:
        return is_terminal, is_terminal
    return True, is_terminal


class Progress:
    """The progress of one graph's compile; a context manager. Cheap when never shown."""

    def __init__(self, kind: str, option: bool | None = None, stream: IO[str] | None = None,
                 delay_s: float | None = None, refresh_s: float | None = None):
        self.stream = sys.stderr if stream is None else stream
        self.show, self.repaint = wanted(option, self.stream)
        self.number = next(_graph_counter)
        self.kind = kind
        self.phase = "capturing"
        self.done_kernels = 0
        self.total_kernels: int | None = None
        self.delay_s = DELAY_S if delay_s is None else delay_s
        self.refresh_s = REFRESH_S if refresh_s is None else refresh_s
        self._start = time.perf_counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._visible = False
        self._last_plain = ""
        self._lock = threading.Lock()

    def __enter__(self) -> Progress:
        if getattr(_active, "bar", None) is None:
            _active.bar = self
        if self.show:
            self._thread = threading.Thread(target=self._run, name="fuse-all-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if getattr(_active, "bar", None) is self:
            _active.bar = None
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self._visible and self.repaint:
                self.stream.write("\r\033[K")
                self.stream.flush()

    def set_phase(self, phase: str, total_kernels: int | None = None) -> None:
        self.phase = phase
        if total_kernels is not None:
            self.total_kernels = total_kernels
            self.done_kernels = 0

    def kernel_done(self) -> None:
        self.done_kernels += 1

    def line(self) -> str:
        elapsed = time.perf_counter() - self._start
        parts = [f"fuse-all: graph {self.number} ({self.kind})", self.phase]
        if self.total_kernels:
            parts.append(f"kernels {self.done_kernels}/{self.total_kernels}")
        parts.append(f"{elapsed:.1f} s")
        return " · ".join(parts)

    def _run(self) -> None:
        if self._stop.wait(self.delay_s):
            return
        while True:
            self._paint()
            if self._stop.wait(self.refresh_s):
                return

    def _paint(self) -> None:
        with self._lock:
            if self._stop.is_set():
                return
            text = self.line()
            try:
                if self.repaint:
                    self.stream.write("\r\033[K" + text)
                else:
                    key = text.rsplit(" · ", 1)[0]   # one plain line per change, not per tick
                    if key == self._last_plain:
                        return
                    self._last_plain = key
                    self.stream.write(text + "\n")
                self.stream.flush()
                self._visible = True
            except (OSError, ValueError):   # a closed stream: stop quietly
                self._stop.set()

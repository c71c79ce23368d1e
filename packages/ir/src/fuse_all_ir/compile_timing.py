"""Where a compile's seconds go: a cheap per-phase timer shared by every stage.

`phase("lowering")` is a context manager that adds the seconds spent inside it to a per-process table.
Phases nest *exclusively*: while an inner phase runs, the outer one's clock is paused, so the phases of a
thread add up to the wall time of the outermost one (host-program load minus the C++ compile it runs,
and so on). Each thread has its own stack; work in background threads (Triton compiles in a pool) is
recorded under its own name and overlaps the main thread's phases, so it is reported beside them.

Cost: two `perf_counter()` calls, a thread-local lookup and a dict update per phase (~1 µs); the phases
are coarse (a few per graph, one per kernel compile), so it is always on. `snapshot()` reads the table,
`reset()` clears it; `bench/bench.py` prints it per workload, the backend copies a graph's own phases
into its record (`CompiledGraph.phases_s`).

Phase names used by the stages (in the order a first call meets them):
    aot_trace          AOTAutograd tracing inside the backend (Dynamo's own tracing comes before)
    graph_cache        looking the whole compiled graph up / storing it (warm start)
    layout             the channels-last decision and rewrite (`layout.py`: fake-tensor propagation)
    lowering           ATen graph -> IR nodes
    fusion_schedule    fusion, kernel building, scheduling (and validation when on)
    render             kernel sources and the host program
    host_load          writing and importing the host program (minus what it runs below)
    cpp_compile        C++ compiler calls (wall time of the caller)
    cpp_load           loading a cached C++ library (hash check and dlopen)
    triton_compile_bg  Triton compiles, summed over the pool's workers (overlaps the main thread)
    triton_compile_wait  time the main thread waited for Triton compiles
    autotune           benchmarking Triton configs at the first launch
    first_launch       the first call of each graph's host program, minus the above
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager

_lock = threading.Lock()
_totals: dict[str, float] = {}
_counts: dict[str, int] = {}
_local = threading.local()
_clock = time.perf_counter


def _stack() -> list:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def add(name: str, seconds: float, count: int = 1) -> None:
    with _lock:
        _totals[name] = _totals.get(name, 0.0) + seconds
        _counts[name] = _counts.get(name, 0) + count


@contextmanager
def phase(name: str):
    """Time the block under `name`, pausing the enclosing phase of this thread meanwhile."""
    stack = _stack()
    now = _clock()
    if stack:
        outer = stack[-1]
        add(outer[0], now - outer[1], count=0)
    entry = [name, now]
    stack.append(entry)
    try:
        yield
    finally:
        end = _clock()
        stack.pop()
        add(name, end - entry[1])
        if stack:
            stack[-1][1] = end      # the outer phase resumes now


def current() -> str | None:
    """The innermost phase running on this thread."""
    stack = _stack()
    return stack[-1][0] if stack else None


def snapshot() -> dict[str, float]:
    """{phase: seconds} recorded since the last `reset()`."""
    with _lock:
        return dict(_totals)


def counts() -> dict[str, int]:
    """{phase: how many times it was entered} since the last `reset()`."""
    with _lock:
        return dict(_counts)


def reset() -> None:
    with _lock:
        _totals.clear()
        _counts.clear()


def since(before: dict[str, float]) -> dict[str, float]:
    """The phases' growth since `before` (a `snapshot()`)."""
    now = snapshot()
    return {k: v - before.get(k, 0.0) for k, v in now.items() if v - before.get(k, 0.0) > 0}

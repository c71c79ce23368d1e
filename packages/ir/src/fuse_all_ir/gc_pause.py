"""Python's cyclic garbage collector paused while fuse-all compiles a graph.

Lowering, fusion and rendering allocate a few hundred thousand objects (sympy expressions, IR values,
kernels) that outlive the young generations, so CPython runs full collections meanwhile, and each walks
every object of the process: with a model, Dynamo's and AOTAutograd's state that is about a million
objects and 0.3-0.5 s per collection, a third to a half of fuse-all's own compile time on a ResNet-50
training step (measured with `bench/compile_profile.py`). Nothing a compile builds needs the cycle
collector to be freed in time: what it drops is freed by reference counting, and the few cycles it leaves
(closures of the lowering that refer back to it) are found by the next automatic collection after the
pause. The same pause as torch's `distributed.checkpoint.state_dict` takes around its own allocation-heavy
step. The backend holds it over its whole call, AOTAutograd's tracing included (ResNet-50 training step
on a CPU: 1116 collections and 1.55 s of the first call's 12.8 CPU s without it, 281 and 0.75 s with it;
peak memory 1060 -> 1078 MB).

`paused()` nests and is safe from several threads at once: the collector is switched back on when the last
pause ends, and only if it was on when the first began (a program that turned it off keeps it off).
`FUSE_ALL_GC_PAUSE=0` leaves the collector alone.
"""
from __future__ import annotations

import gc
import os
import threading
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = False


def _wanted() -> bool:
    return os.environ.get("FUSE_ALL_GC_PAUSE", "1").strip() != "0"


@contextmanager
def paused():
    """Run the block with the cyclic garbage collector off (see the module docstring)."""
    global _depth, _was_enabled
    if not _wanted():
        yield
        return
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()

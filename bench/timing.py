"""How times are taken: steady-state medians, first-call (compile) times, and a per-backend time limit."""
from __future__ import annotations

import contextlib
import signal
import time
from typing import Any, Callable

import torch


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def first_call(fn: Callable[[], Any], device: str) -> tuple[float, Any]:
    """Seconds from calling a freshly compiled function until its results exist (compile + one run)."""
    sync(device)
    start = time.perf_counter()
    result = fn()
    sync(device)
    return time.perf_counter() - start, result


MIN_SAMPLES = 8


def median_ms(fn: Callable[[], Any], device: str, quick: bool = False) -> float:
    """Median runtime of `fn` in milliseconds, warmed up.

    CUDA: `triton.testing.do_bench` (CUDA events, L2 flushed between calls), as the anchors were measured.
    CPU: `torch.utils.benchmark.Timer.blocked_autorange` (blocks of calls, median over blocks) after a few
    warm-up calls, so the first-touch and allocator effects of the first calls are not counted.
    """
    if device == "cuda":
        import triton.testing
        warmup, rep = (5, 20) if quick else (25, 100)
        # do_bench times max(1, rep / (one call's ms)) calls: a 12 ms training step under --quick was one
        # sample; ask for enough milliseconds to take at least MIN_SAMPLES
        one_call_ms = 1e3 * first_call(fn, device)[0]
        rep = max(rep, MIN_SAMPLES * one_call_ms)
        try:
            return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))
        except TypeError:  # tritons without return_mode
            return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, quantiles=[0.5]))
    from torch.utils.benchmark import Timer
    start = time.perf_counter()
    for i in range(10):
        fn()
        if i >= 2 and time.perf_counter() - start > 0.3:
            break
    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=0.2 if quick else 1.0).median * 1e3


class BackendTimeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float | None):
    """Raise BackendTimeout in the main thread after `seconds` (SIGALRM), so one hung compile cannot eat the
    whole unattended run. Python-level waits (including subprocess waits) are interrupted; a long C call
    without a Python callback is interrupted only when it returns."""
    if not seconds or not hasattr(signal, "SIGALRM"):
        yield
        return

    def expire(signum, frame):
        raise BackendTimeout(f"took longer than {seconds:g} s (--backend-timeout)")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)

"""Compiling kernel variants ahead of their first call, in parallel.

Compile time is a headline metric, so every kernel of a graph is compiled as soon as its `TritonKernel`
is created (when the host program is imported), on a shared thread pool. Triton releases the GIL in its
MLIR pass pipelines and LLVM/ptxas steps (the pybind bindings carry `gil_scoped_release`), but not in its
Python front end (AST -> TTIR), so by default each thread hands the compile to a worker process
(compile_worker.py: Triton only, no torch, started once per process) that fills Triton's cache, and then
loads it from there; `FUSE_ALL_COMPILE_WORKERS=threads` compiles in the threads themselves. Triton's own
on-disk cache makes warm starts cheap: a cached compile is a hash and a file read.

A variant is (config, int64 indexing?, pointers 16-byte aligned?, size arguments multiples of 16?). The
last two are Triton's usual specialisations: without them loads and masks are not vectorised. The
signature is known from dtypes, so no tensor is needed to compile.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

from fuse_all_ir import compile_timing

from . import _triton_compat as compat
from .configs import BLOCK_NAMES

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def compile_threads() -> int:
    configured = os.environ.get("FUSE_ALL_COMPILE_THREADS")
    if configured:
        return max(1, int(configured))
    return max(1, min(32, os.cpu_count() or 4))


def compile_pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            compat.secure_cache_dir()   # Triton loads kernels from its cache: not from a folder others write
            compat.warm_driver()   # Triton's lazy driver set-up is not thread-safe: do it here, once
            _POOL = ThreadPoolExecutor(compile_threads(), thread_name_prefix="fuse-all-triton-compile")
        return _POOL


class Compiled(NamedTuple):
    kernel: Any        # triton CompiledKernel
    runner: Any        # kernel.run: the launcher
    function: Any      # CUfunction handle
    metadata: Any      # packed launch metadata


class VariantKey(NamedTuple):
    config: int        # index into spec["configs"]
    int64: bool        # int64 index arithmetic (sizes past 2**31)
    aligned: bool      # every pointer 16-byte aligned
    div16: bool = False  # every size argument a multiple of 16


def signature(fn, spec: dict, int64: bool) -> dict:
    """{param name: Triton type} in parameter order. Names are `fn`'s own: a kernel sharing another's
    function (kernel_sharing) passes its size arguments by position under other names (`seed_index16` for
    the function's `seed_index0`)."""
    names = list(fn.arg_names)
    n_ptr, n_sizes = len(spec["pointers"]), len(spec["sizes"])
    sig = dict(zip(names[:n_ptr], spec["pointers"]))
    size_type = "i64" if int64 else spec["size_type"]
    sig.update({name: size_type for name in names[n_ptr:n_ptr + n_sizes]})
    sig.update({name: "constexpr" for name in names[n_ptr + n_sizes:]})
    return sig


def constexpr_values(fn, config: dict) -> dict:
    return {name: config[name] for name in fn.arg_names if name in BLOCK_NAMES}


def divisible_params(spec: dict, key: VariantKey) -> tuple[int, ...]:
    n_ptr, n_size = len(spec["pointers"]), len(spec["sizes"])
    return (tuple(range(n_ptr)) if key.aligned else ()) + \
        (tuple(range(n_ptr, n_ptr + n_size)) if key.div16 else ())


def compile_only(fn, spec: dict, key: VariantKey, device_index: int | None = None, target=None):
    """Compile one variant (not loaded). With worker processes on, a worker compiles it into Triton's
    cache first and the `triton.compile` here finds it there (compile_worker.py)."""
    config = spec["configs"][key.config]
    args = (fn, signature(fn, spec, key.int64), constexpr_values(fn, config), divisible_params(spec, key),
            config["num_warps"], config.get("num_stages", 1))
    fp_fusion = spec.get("fp_fusion", True)
    compat.installation_key()   # once per process, shared with the workers (their jobs carry it)
    pool = worker_pool()
    if pool is not None:
        pool.compile(*args, target or compat.get_target(device_index), compat.cache_dir(), fp_fusion)
    return compat.compile_kernel(*args, device_index, target, fp_fusion)


_WORKERS = None


def use_workers() -> bool:
    """FUSE_ALL_COMPILE_WORKERS: `processes` (default) or `threads`."""
    choice = os.environ.get("FUSE_ALL_COMPILE_WORKERS", "processes").strip().lower()
    if choice not in ("processes", "threads"):
        raise ValueError(f"FUSE_ALL_COMPILE_WORKERS={choice!r}: expected 'processes' or 'threads'")
    return choice == "processes" and not compat.interpret_mode()


def worker_pool():
    """The compile worker processes (started on first use), or None when compiles run in threads."""
    global _WORKERS
    if not use_workers():
        return None
    with _POOL_LOCK:
        if _WORKERS is None:
            import atexit

            from .compile_worker import WorkerPool
            _WORKERS = WorkerPool(compile_threads())
            atexit.register(_WORKERS.close)
        return _WORKERS


_KEY_WARMED = threading.Event()


def start_workers() -> None:
    """Start the worker processes early (they import Triton while the graph is lowered and rendered), and
    compute Triton's installation key in the background (`_triton_compat.installation_key`: hashing
    `libtriton.so` releases the GIL), for this process's own `triton.compile` calls and for the workers,
    which take it from their jobs instead of hashing the library each."""
    pool = worker_pool()
    if pool is not None:
        threading.Thread(target=pool.start, name="fuse-all-start-compile-workers", daemon=True).start()
    if not _KEY_WARMED.is_set():
        _KEY_WARMED.set()
        threading.Thread(target=_warm_compile_key, name="fuse-all-triton-key", daemon=True).start()


def _warm_compile_key() -> None:
    try:
        compat.installation_key()
    except Exception as error:  # noqa: BLE001 - only a head start: the first compile computes it again
        import logging
        logging.getLogger("fuse_all").debug("fuse-all: Triton key not computed ahead: %s", error)


def compile_variant(fn, spec: dict, key: VariantKey, device_index: int) -> Compiled:
    with compile_timing.phase("triton_compile_bg"):
        kernel = compile_only(fn, spec, key, device_index)
        runner, function, metadata = compat.load_compiled(kernel, device_index)
    return Compiled(kernel, runner, function, metadata)


def submit(fn, spec: dict, key: VariantKey, device_index: int) -> TimedFuture:
    """Compile a variant in the background. Kernels that share a JIT function (the same code,
    `fuse_all_ir.kernel_sharing`) share its compiles: the future is kept on the function."""
    config = spec["configs"][key.config]
    identity = (key.int64, key.aligned, key.div16, device_index, tuple(sorted(config.items())),
                tuple(spec["pointers"]), spec["size_type"], len(spec["sizes"]))
    with _POOL_LOCK:
        shared = fn.__dict__.setdefault("_fuse_all_compiles", {})
        future = shared.get(identity)
    if future is None:
        future = TimedFuture(compile_pool().submit(compile_variant, fn, spec, key, device_index))
        with _POOL_LOCK:
            future = shared.setdefault(identity, future)
    return future


class TimedFuture:
    """A compile's Future whose `result()` counts the caller's wait as the `triton_compile_wait` phase."""
    __slots__ = ("future",)

    def __init__(self, future: Future):
        self.future = future

    def result(self, timeout: float | None = None):
        if self.future.done():
            return self.future.result()
        with compile_timing.phase("triton_compile_wait"):
            return self.future.result(timeout)

    def done(self) -> bool:
        return self.future.done()

    def exception(self, timeout: float | None = None):
        return self.future.exception(timeout)


def wait_all(futures) -> list:
    """Results of `futures`; the first compile error is raised (after all finished)."""
    results, error = [], None
    for f in futures:
        try:
            results.append(f.result())
        except Exception as e:  # noqa: BLE001 - re-raised below
            error = error or e
            results.append(None)
    if error is not None:
        raise error
    return results

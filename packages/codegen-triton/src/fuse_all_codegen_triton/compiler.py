"""Compiling kernel variants ahead of their first call, in parallel.

Compile time is a headline metric, so every kernel of a graph is compiled as soon as its `TritonKernel`
is created (when the host program is imported), on a shared thread pool. Threads work because Triton
releases the GIL in its MLIR pass pipelines and LLVM/ptxas steps (checked on 3.6 and 3.8: the pybind
bindings carry `gil_scoped_release`), and they avoid the seconds a subprocess pool needs to import torch
and triton. Triton's own on-disk cache makes warm starts cheap: a cached compile is a hash and a file read.

A variant is (config, int64 indexing?, pointers 16-byte aligned?, size arguments multiples of 16?). The
last two are Triton's usual specialisations: without them loads and masks are not vectorised. The
signature is known from dtypes, so no tensor is needed to compile.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

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
    """{param name: Triton type} in parameter order."""
    names = list(fn.arg_names)
    n_ptr = len(spec["pointers"])
    sig = dict(zip(names[:n_ptr], spec["pointers"]))
    size_type = "i64" if int64 else spec["size_type"]
    sig.update({name: size_type for name in spec["sizes"]})
    sig.update({name: "constexpr" for name in names[n_ptr + len(spec["sizes"]):]})
    return sig


def constexpr_values(fn, config: dict) -> dict:
    return {name: config[name] for name in fn.arg_names if name in BLOCK_NAMES}


def divisible_params(spec: dict, key: VariantKey) -> tuple[int, ...]:
    n_ptr, n_size = len(spec["pointers"]), len(spec["sizes"])
    return (tuple(range(n_ptr)) if key.aligned else ()) + \
        (tuple(range(n_ptr, n_ptr + n_size)) if key.div16 else ())


def compile_only(fn, spec: dict, key: VariantKey, device_index: int | None = None, target=None):
    config = spec["configs"][key.config]
    return compat.compile_kernel(fn, signature(fn, spec, key.int64), constexpr_values(fn, config),
                                 divisible_params(spec, key), config["num_warps"], config.get("num_stages", 1),
                                 device_index, target)


def compile_variant(fn, spec: dict, key: VariantKey, device_index: int) -> Compiled:
    kernel = compile_only(fn, spec, key, device_index)
    runner, function, metadata = compat.load_compiled(kernel, device_index)
    return Compiled(kernel, runner, function, metadata)


def submit(fn, spec: dict, key: VariantKey, device_index: int) -> Future:
    return compile_pool().submit(compile_variant, fn, spec, key, device_index)


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

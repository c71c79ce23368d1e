"""Triton compiles in worker processes: the Python half of a compile (AST -> TTIR) holds the GIL, so
threads alone serialise it; processes do not.

A worker is `python -m fuse_all_codegen_triton.compile_worker`, started by the parent (never by
`multiprocessing`, whose spawn/forkserver modes re-import the user's `__main__`). It reads jobs from stdin
and answers on stdout, each a length-prefixed pickle exchanged only with the process that started it.
A job carries a kernel's *source text*, not a path: the worker writes it into a private folder of its own
(`tempfile.mkdtemp`, 0700) and imports it from there, padded so that the function starts on the line it
starts on in the host program, since Triton's cache key includes that line. The worker compiles into
Triton's cache folder (the parent's, passed with each job: `secure_cache_dir` checked it is private);
the parent then runs the same `triton.compile`, which finds the entry and only loads it. On Triton 3.6 the
worker also builds the kernel's C launcher into that cache (`_triton_compat.prebuild_launcher`), which the
parent would otherwise build with the C compiler at the kernel's first launch.

Parent side: `WorkerPool.compile(fn, signature, ...)` (used by `compiler.compile_variant`). Any failure of
the worker machinery (a worker that does not start or dies) is logged once and the compile runs in the
parent's thread as before, so at worst it is as slow as threads, never wrong.
"""
from __future__ import annotations

import logging
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from typing import Any

log = logging.getLogger("fuse_all")

_HEADER = ("import triton; import triton.language as tl; "
           "from fuse_all_codegen_triton._triton_compat import libdevice; "
           "from fuse_all_codegen_triton import helpers as fa\n")


def _send(stream, value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError("compile worker closed its pipe")
    (size,) = struct.unpack("<Q", head)
    return pickle.loads(stream.read(size))   # noqa: S301 - our own parent / our own worker, over a pipe


def module_text(raw_source: str, start_line: int) -> str:
    """The worker's module: imports, then the kernel's source starting at `start_line` (1-based)."""
    padding = start_line - 1 - _HEADER.count("\n")
    if padding < 0:
        raise ValueError(f"kernel starts on line {start_line}, before the worker's imports end")
    return _HEADER + "\n" * padding + raw_source


# ---- the worker process ----------------------------------------------------------------------------------

_KEY_ADOPTED = False


def _compile_job(job: dict, folder: str, modules: dict) -> str:
    import importlib.util

    from triton.backends.compiler import GPUTarget

    from . import _triton_compat as compat
    compat._set_triton_cache_dir(job["cache_dir"])
    global _KEY_ADOPTED
    if not _KEY_ADOPTED and "triton_key" in job:
        _KEY_ADOPTED = True     # tried once: where it is refused, Triton computes its own key, as before
        compat.adopt_installation_key(job["triton_key"], job["triton_key_origin"])
    text = module_text(job["raw_source"], job["start_line"])
    module = modules.get(text)
    if module is None:
        path = os.path.join(folder, f"kernel_{len(modules)}.py")
        with open(path, "x") as f:        # a new file in our own private folder
            f.write(text)
        spec = importlib.util.spec_from_file_location(f"fuse_all_worker_kernel_{len(modules)}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules[text] = module
    fn = getattr(module, job["name"])
    target = GPUTarget(*job["target"])
    kernel = compat.compile_kernel(fn, job["signature"], job["constexprs"], job["divisible"], job["num_warps"],
                                   job["num_stages"], target=target, fp_fusion=job["fp_fusion"])
    compat.prebuild_launcher(kernel)
    return kernel.hash


def _warm_up() -> None:
    """What every first compile needs, done at start (the parent starts workers before it lowers the graph,
    so this runs while it does): Triton's imports and the kernels' header imports, else paid by the first
    job of each worker. Triton's key of its own installation is not computed here: each job carries the
    parent's (`_triton_compat.adopt_installation_key`). A failure here is left for that job to report."""
    try:
        from . import _triton_compat  # noqa: F401 - imports Triton
        from . import helpers  # noqa: F401 - the header of every kernel module imports it
    except Exception as error:  # noqa: BLE001
        print(f"fuse-all compile worker: warm-up failed: {type(error).__name__}: {error}", file=sys.stderr)


def main() -> None:
    import tempfile
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr           # anything printed while compiling must not corrupt the protocol
    folder = tempfile.mkdtemp(prefix="fuse_all_compile_worker_")
    modules: dict = {}
    _warm_up()
    _send(stdout, ("ready", os.getpid()))
    try:
        while True:
            try:
                job = _receive(stdin)
            except EOFError:
                return
            try:
                _send(stdout, ("ok", _compile_job(job, folder, modules)))
            except Exception as error:  # noqa: BLE001 - reported to the parent, which compiles itself
                _send(stdout, ("error", f"{type(error).__name__}: {error}"))
    finally:
        import shutil
        shutil.rmtree(folder, ignore_errors=True)


# ---- the parent's side -----------------------------------------------------------------------------------

class _Worker:
    def __init__(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)   # the parent's imports, same trust
        env.pop("TRITON_INTERPRET", None)
        self.proc = subprocess.Popen([sys.executable, "-m", "fuse_all_codegen_triton.compile_worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.ready = False

    def run(self, job: dict) -> str:
        if not self.ready:
            status, _ = _receive(self.proc.stdout)
            self.ready = status == "ready"
        _send(self.proc.stdin, job)
        status, value = _receive(self.proc.stdout)
        if status != "ok":
            raise RuntimeError(value)
        return value

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001
            self.proc.kill()


class WorkerPool:
    """`size` worker processes, each used by one compile at a time."""

    def __init__(self, size: int):
        self.size = size
        self._idle: queue.Queue = queue.Queue()
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self.broken: str | None = None
        self.jobs_run = 0     # compiles the workers did (a warm start does none, whether or not they started)

    def start(self) -> None:
        """Start every worker now (they import Triton in parallel while the parent lowers and renders)."""
        with self._lock:
            while len(self._workers) < self.size and self.broken is None:
                try:
                    worker = _Worker()
                except OSError as error:
                    self._break(f"cannot start a compile worker: {error}")
                    break
                self._workers.append(worker)
                self._idle.put(worker)

    def compile(self, fn, signature: dict, constexprs: dict, divisible: tuple, num_warps: int, num_stages: int,
                target, cache_dir: str, fp_fusion: bool = True) -> bool:
        """Compile in a worker (filling Triton's cache); False when the workers are unusable. A variant a
        worker compiled before into this cache folder (a marker in our private cache says so; a warm
        start) is left to the parent's compile, which finds it in Triton's cache without a worker."""
        raw_source = "".join(fn.raw_src) if isinstance(fn.raw_src, list) else fn.raw_src
        job = {"raw_source": raw_source, "start_line": fn.starting_line_number, "name": fn.__name__,
               "signature": signature, "constexprs": constexprs, "divisible": tuple(divisible),
               "num_warps": num_warps, "num_stages": num_stages, "fp_fusion": fp_fusion,
               "target": (target.backend, target.arch, target.warp_size), "cache_dir": cache_dir}
        marker = _marker(job)
        if marker is not None and marker.exists():
            return True
        from . import _triton_compat as compat
        job["triton_key"], job["triton_key_origin"] = compat.installation_key(), compat.key_origin()
        if not self._workers:
            self.start()
        if self.broken is not None or not self._workers:
            return False
        worker = self._idle.get()
        try:
            worker.run(job)
            with self._lock:
                self.jobs_run += 1
            if marker is not None:
                _touch(marker)
            return True
        except RuntimeError as error:     # the compile itself failed: the parent's compile reports it
            log.debug("fuse-all: worker compile of %s failed: %s", fn.__name__, error)
            return False
        except (EOFError, OSError, pickle.PickleError) as error:
            self._break(f"compile worker died ({type(error).__name__}: {error})")
            return False
        finally:
            self._idle.put(worker)

    def _break(self, why: str) -> None:
        if self.broken is None:
            self.broken = why
            log.warning("fuse-all: %s; compiling Triton kernels in threads", why)

    def close(self) -> None:
        for worker in self._workers:
            worker.close()
        self._workers.clear()


def _marker(job: dict):
    """Where we note that a worker compiled `job` into Triton's cache (a private folder of ours)."""
    import hashlib
    try:
        import triton

        from fuse_all_ir import private_dir
        key = hashlib.sha256(repr((sorted(job.items()), triton.__version__)).encode()).hexdigest()[:40]
        return private_dir("triton", "compiled") / key
    except Exception:  # noqa: BLE001 - only a shortcut
        return None


def _touch(path) -> None:
    try:
        from fuse_all_ir import atomic_write
        atomic_write(path, b"")
    except OSError:
        pass


if __name__ == "__main__":
    main()

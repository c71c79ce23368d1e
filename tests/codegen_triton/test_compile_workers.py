"""Triton compiles in worker processes (fuse_all_codegen_triton/compile_worker.py): the real compiler,
for sm_90 on this GPU-less machine. A worker fills Triton's cache with exactly the entry the parent's
own compile then finds (same key: the kernel's source, its starting line, the options), so processes and
threads give the same kernels and the parent never compiles twice; a worker that cannot start or dies
leaves the compile to the parent's thread."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

PROBE = Path(__file__).with_name("compile_workers_probe.py")


def _probe(tmp_path, mode: str, kernels: int = 4) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(FUSE_ALL_COMPILE_WORKERS=mode, TRITON_CACHE_DIR=str(tmp_path / mode),
               FUSE_ALL_CACHE_DIR=str(tmp_path / "fa"))
    proc = subprocess.run([sys.executable, str(PROBE), str(kernels)], env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_workers_fill_the_cache_the_parent_then_loads(tmp_path):
    threads, processes = _probe(tmp_path, "threads"), _probe(tmp_path, "processes")
    assert threads["workers"] == 0 and processes["workers"] >= 1 and processes["broken"] is None
    assert processes["hashes"] == threads["hashes"]                 # the same compiled kernels
    assert len(processes["entries"]) == len(set(processes["hashes"])) == len(processes["entries"])
    assert processes["entries"] == threads["entries"]               # no second entry: the parent hit it


def test_module_text_starts_the_kernel_on_its_line():
    from fuse_all_codegen_triton.compile_worker import module_text
    text = module_text("@triton.jit\ndef k(x):\n    pass\n", 12)
    assert text.splitlines()[11] == "@triton.jit"
    with pytest.raises(ValueError):
        module_text("@triton.jit\n", 1)


def test_a_worker_that_cannot_start_leaves_the_compile_to_the_thread(monkeypatch, caplog, tmp_path):
    from fuse_all_codegen_triton import compile_worker

    def no_worker():
        raise OSError("no processes here")
    monkeypatch.setattr(compile_worker, "_Worker", no_worker)
    monkeypatch.setenv("FUSE_ALL_CACHE_DIR", str(tmp_path))
    pool = compile_worker.WorkerPool(2)
    fn = SimpleNamespace(raw_src=["@triton.jit\n", "def k(x):\n", "    pass\n"], starting_line_number=20,
                         __name__="k")
    target = SimpleNamespace(backend="cuda", arch=90, warp_size=32)
    with caplog.at_level(logging.WARNING, logger="fuse_all"):
        assert pool.compile(fn, {"x": "i32"}, {}, (), 4, 1, target, str(tmp_path)) is False
    assert "compiling Triton kernels in threads" in caplog.text and pool.broken


def test_the_switch_is_checked(monkeypatch):
    from fuse_all_codegen_triton import compiler
    monkeypatch.setenv("FUSE_ALL_COMPILE_WORKERS", "fibers")
    with pytest.raises(ValueError, match="processes"):
        compiler.use_workers()
    monkeypatch.setenv("FUSE_ALL_COMPILE_WORKERS", "threads")
    assert compiler.use_workers() is False


def test_a_warm_start_needs_no_worker(tmp_path):
    """No compile job goes to a worker on a warm start. (On a machine with a GPU, rendering starts the
    workers early, before anything is known to be cached: started, but given nothing to do.)"""
    first = _probe(tmp_path, "processes", kernels=2)
    again = _probe(tmp_path, "processes", kernels=2)      # same caches: Triton's entries are there
    assert first["worker_jobs"] >= 1 and again["worker_jobs"] == 0
    assert again["hashes"] == first["hashes"] and again["entries"] == first["entries"]


def test_a_worker_takes_its_parents_triton_key_instead_of_hashing_triton():
    """A worker's warm-up imports Triton but does not hash its installation (~500 MB of libtriton.so, in each
    of 16 workers while the parent lowers); its first job carries the parent's key, which it adopts only
    for the same installation. (That the adopted key is the right one: the test above, where the parent
    finds exactly the worker's cache entries.)"""
    code = ("from fuse_all_codegen_triton import compile_worker, _triton_compat as compat\n"
            "from triton.runtime import cache\n"
            "compile_worker._warm_up()\n"
            "assert cache.triton_key.cache_info().currsize == 0, 'the warm-up hashed Triton'\n"
            "origin = compat.key_origin()\n"
            "assert not compat.adopt_installation_key('x', origin)              # not this version's key\n"
            "assert not compat.adopt_installation_key(compat.TRITON_VERSION + '-k', origin + 'elsewhere')\n"
            "assert compat.adopt_installation_key(compat.TRITON_VERSION + '-parent', origin)\n"
            "assert compat.installation_key() == cache.triton_key() == compat.TRITON_VERSION + '-parent'\n"
            "print('ok')\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "ok"


def test_the_parent_computes_tritons_key_once_for_all_its_threads(monkeypatch):
    """`installation_key` is what the key thread and every compile thread ask for: one computation (Triton's
    lru cache alone would let each thread that asks before the first finishes hash the library again)."""
    import threading
    import time

    from fuse_all_codegen_triton import _triton_compat
    calls = []

    def slow_key():
        calls.append(1)
        time.sleep(0.2)
        return "key"
    cached = __import__("functools").lru_cache(None)(slow_key)
    monkeypatch.setattr(_triton_compat, "_key_function", lambda: cached)
    threads = [threading.Thread(target=_triton_compat.installation_key) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and _triton_compat.installation_key() == "key"


def test_a_failed_warm_up_leaves_the_worker_running(monkeypatch, capsys):
    from fuse_all_codegen_triton import compile_worker

    monkeypatch.setitem(sys.modules, "fuse_all_codegen_triton.helpers", None)   # its import fails
    compile_worker._warm_up()          # reports, does not raise: the first job will report its own error
    assert "warm-up failed: ModuleNotFoundError" in capsys.readouterr().err

"""Compile, cache and load: cache hits across processes, corrupt entries, the directory check, errors,
concurrent compiles, and the compile time of a realistic translation unit."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import kernel_examples as ke
from fuse_all_codegen_cpp import (
    CppCompileError, CppCompilerNotFound, UnsafeCacheDir, cache_dir, load_library, render_translation_unit,
)

SOURCE = render_translation_unit(ke.cos_sin("cpu").program)

# Load SOURCE in a new process (no torch: it starts in a fraction of a second), run the kernel on 1000
# floats, check it against math.sin(math.cos(x)) and print how many times it compiled (0: a cache hit).
CHILD = """
import ctypes, math, sys
import fuse_all_codegen_cpp.compiler as c
compiled = []
original = c.compile_library
def counting(*args, **kwargs):
    compiled.append(1)
    return original(*args, **kwargs)
c.compile_library = counting
lib = c.load_library(sys.stdin.read())
n = 1000
x = (ctypes.c_float * n)(*[i * 0.013 - 6.5 for i in range(n)])
out = (ctypes.c_float * n)()
lib.kernel("kernel_0", 2, 1)(ctypes.addressof(x), ctypes.addressof(out), n)
assert all(abs(out[i] - math.sin(math.cos(x[i]))) < 1e-5 for i in range(n)), "wrong result"
print(len(compiled))
"""


def child(source=SOURCE) -> int:
    """Number of compiles a new process needed to load `source` (and run it correctly)."""
    result = subprocess.run([sys.executable, "-c", CHILD], input=source, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return int(result.stdout)


def entry(directory, suffix):
    (path,) = [p for p in directory.iterdir() if p.name.endswith(suffix)]
    return path


def test_cache_hit_in_a_new_process(fresh_cache):
    assert child() == 1
    assert child() == 0
    mode = fresh_cache.stat().st_mode & 0o777
    assert mode == 0o700, oct(mode)


def test_corrupt_entries_are_rebuilt_not_loaded(fresh_cache):
    assert child() == 1
    so, checksum = entry(fresh_cache, ".so"), entry(fresh_cache, ".sha256")
    data = so.read_bytes()
    damages = {
        "truncated library": lambda: so.write_bytes(data[: len(data) // 3]),
        "flipped byte": lambda: so.write_bytes(data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]),
        "wrong checksum": lambda: checksum.write_text("0" * 64),
        "missing checksum": checksum.unlink,
    }
    for name, damage in damages.items():
        damage()
        assert child() == 1, f"{name}: the damaged entry was loaded"
        assert child() == 0, f"{name}: the rebuilt entry does not hit"
    assert so.read_bytes() == data           # the build is reproducible


def test_concurrent_processes_compiling_the_same_source(fresh_cache):
    procs = [subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        p.stdin.write(SOURCE)
        p.stdin.close()
    compiles = []
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()
        compiles.append(int(p.stdout.read()))
    assert sum(compiles) == 1                # the per-key lock: one compiles, the others wait and load
    assert len([p for p in fresh_cache.iterdir() if p.name.endswith(".so")]) == 1
    assert not [p for p in fresh_cache.iterdir() if p.name.endswith(".tmp")]


def test_cache_dir_writable_by_others_is_refused(fresh_cache):
    cache_dir()
    fresh_cache.chmod(0o777)
    with pytest.raises(UnsafeCacheDir, match="writable by group/others"):
        cache_dir()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give the directory to another user")
def test_cache_dir_owned_by_someone_else_is_refused(fresh_cache):
    cache_dir()
    os.chown(fresh_cache, 12345, 12345)
    with pytest.raises(UnsafeCacheDir, match="owned by uid 12345"):
        cache_dir()


def test_missing_compiler(monkeypatch, tmp_path):
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with pytest.raises(CppCompilerNotFound, match="C\\+\\+ compiler not found"):
        load_library(SOURCE + "// missing compiler\n")
    monkeypatch.delenv("CXX")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CppCompilerNotFound):
        load_library(SOURCE + "// missing compiler\n")


def test_compile_error_carries_the_compiler_output(fresh_cache):
    with pytest.raises(CppCompileError, match="C\\+\\+ compile failed") as info:
        load_library('extern "C" void broken() { this is not C++; }\n')
    assert "error" in str(info.value)
    assert len(str(info.value).splitlines()) <= 21
    assert not [p for p in fresh_cache.iterdir() if p.name.endswith((".so", ".tmp"))]


def test_twenty_kernel_translation_unit_compiles_quickly(fresh_cache):
    """The compile budget is 0.25x Inductor's (~16 s for cos->sin on 2 cores): ~4 s for a whole graph."""
    source = render_translation_unit(ke.twenty_kernels("cpu").program)
    start = time.perf_counter()
    load_library(source)
    elapsed = time.perf_counter() - start
    print(f"20-kernel TU: {elapsed:.2f} s cold")
    assert elapsed < 4.0
    start = time.perf_counter()
    load_library(source)
    assert time.perf_counter() - start < 0.01     # loaded in this process: a dict lookup


def test_threads_compile_different_sources_in_parallel(fresh_cache):
    """Graphs compiled from several threads: each source compiles once, none waits on another's compile."""
    from concurrent.futures import ThreadPoolExecutor
    sources = [render_translation_unit(ke.cos_sin("cpu").program) + f"// variant {i}\n" for i in range(3)]
    with ThreadPoolExecutor(4) as pool:
        libs = list(pool.map(load_library, sources + sources))
    assert len({id(lib) for lib in libs}) == 3
    assert len([p for p in fresh_cache.iterdir() if p.name.endswith(".so")]) == 3


def test_program_without_kernels_compiles_nothing():
    from fuse_all_codegen_cpp import CppTarget
    program = ke.cos_sin("cpu").program
    program.kernels.clear()
    assert "load_library" not in CppTarget().render_prelude(program)

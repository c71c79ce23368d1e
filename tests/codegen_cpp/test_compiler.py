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
    CppCompileError, CppCompilerNotFound, cache_dir, load_library, render_translation_unit,
)
from fuse_all_codegen_cpp.compiler import compile_library

SOURCE = render_translation_unit(ke.cos_sin("cpu").program)

# Load SOURCE in a new process (it imports torch through fuse_all_ir, a few seconds), run the kernel on 1000
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


def child_run(source=SOURCE, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD], input=source, capture_output=True, text=True,
                          timeout=300, env=env)


def plant_wrong_library(directory):
    """Replace SOURCE's cached library by one computing cos(cos(x)), with a matching checksum: what an
    attacker who can write to the folder would leave there."""
    import hashlib
    so, checksum = entry(directory, ".so"), entry(directory, ".sha256")
    planted = directory.parent / "planted"
    planted.mkdir(mode=0o700)
    compile_library(SOURCE.replace("sinf(v_b)", "cosf(v_b)"), planted / "evil.so")
    data = (planted / "evil.so").read_bytes()
    so.write_bytes(data)
    checksum.write_text(hashlib.sha256(data).hexdigest())
    return so, checksum


def test_cache_dir_writable_by_others_is_refused_and_nothing_is_loaded_from_it(fresh_cache):
    assert child() == 1
    plant_wrong_library(fresh_cache)
    fresh_cache.chmod(0o777)
    result = child_run()                 # the child checks sin(cos(x)): the planted cos(cos(x)) would fail
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == 1       # compiled in a private folder of its own
    assert "writable by group/others" in result.stderr and "private temporary folder" in result.stderr
    assert fresh_cache.stat().st_mode & 0o777 == 0o777      # refused, not silently "fixed"


def test_planted_library_file_writable_by_others_is_rebuilt(fresh_cache):
    assert child() == 1
    so, checksum = plant_wrong_library(fresh_cache)
    so.chmod(0o666)
    assert child() == 1                  # not loaded: rebuilt (and the child checked the results)
    assert child() == 0


def test_cache_dir_readable_by_others_is_tightened(fresh_cache):
    cache_dir()
    fresh_cache.chmod(0o755)
    assert cache_dir() == fresh_cache
    assert fresh_cache.stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give the directory to another user")
def test_cache_dir_owned_by_someone_else_is_refused(fresh_cache, caplog):
    cache_dir()
    os.chown(fresh_cache, 12345, 12345)
    assert cache_dir() != fresh_cache
    assert "owned by uid 12345" in caplog.text


def test_cache_follows_the_one_cache_root(tmp_path, monkeypatch):
    """No FUSE_ALL_CACHE_DIR: the C++ cache goes where host programs go, under $XDG_CACHE_HOME/fuse-all."""
    import fuse_all_ir
    monkeypatch.delenv("FUSE_ALL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "fuse-all" / "cpp" == fuse_all_ir.cache_root() / "cpp"
    assert (tmp_path / "xdg" / "fuse-all").stat().st_mode & 0o777 == 0o700


def _key(source=SOURCE):
    from fuse_all_codegen_cpp.compiler import cache_key, compile_flags, find_compiler
    return cache_key(source, find_compiler(), compile_flags())


# Holds the per-key lock the way load_library does (flock, pid in the file), then stops or sleeps.
HOLDER = """
import fcntl, os, signal, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0); os.pwrite(fd, f"{os.getpid()}\\n".encode(), 0)
print("locked", flush=True)
if sys.argv[2] == "stop":
    os.kill(os.getpid(), signal.SIGSTOP)
time.sleep(600)
"""


def _hold_lock(lock_path, how):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_path), how], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    if how == "stop":
        for _ in range(200):
            with open(f"/proc/{holder.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "T":
                    break
            time.sleep(0.01)
    return holder


@pytest.mark.parametrize("how, message", [("stop", "is stopped"), ("sleep", "waited")])
def test_a_stopped_or_stuck_lock_holder_does_not_block_forever(fresh_cache, caplog, how, message):
    source = SOURCE + f"// lock test {how}\n"
    cache_dir()
    holder = _hold_lock(fresh_cache / f"{_key(source)}.lock", how)
    try:
        start = time.perf_counter()
        lib = load_library(source, lock_timeout_s=1.0)
        waited = time.perf_counter() - start
    finally:
        holder.kill()
        holder.wait()
    assert lib.path.exists()
    assert message in caplog.text and f"pid {holder.pid}" in caplog.text
    assert waited < 30
    if how == "stop":
        assert "waited" not in caplog.text       # a stopped holder is not waited for at all


def test_temp_files_of_killed_compiles_are_swept(fresh_cache):
    """kill -9 in the middle of a compile leaves `<key>.so.<pid>.XXXX.tmp`; the next process removes it."""
    cache_dir()
    key = _key()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    leftover = fresh_cache / f"{key}.so.{dead}.abcd1234.tmp"
    leftover.write_bytes(b"half a library")
    alive = fresh_cache / f"{key}.so.{os.getpid()}.efgh5678.tmp"      # a live writer's: kept
    alive.write_bytes(b"being written")
    ancient = fresh_cache / f"{key}.so.zzzz.tmp"                        # old naming, old file: removed
    ancient.write_bytes(b"x")
    os.utime(ancient, (time.time() - 7200, time.time() - 7200))
    assert child() == 1
    assert not leftover.exists() and not ancient.exists() and alive.exists()


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
    first, *rest = str(info.value).splitlines()
    assert ".cpp:1:" in first and "error:" in first      # the compiler's first error, on the first line
    assert rest[0].startswith("command: ") and len(rest) <= 21
    assert not [p for p in fresh_cache.iterdir() if p.name.endswith((".so", ".tmp"))]


def test_failed_compile_warning_shows_the_compiler_error(fresh_cache, monkeypatch, caplog):
    """The one-line fallback warning a user sees names the compiler's error, not only its command."""
    import torch
    import fuse_all
    monkeypatch.setenv("FUSE_ALL_CXXFLAGS", "-include /no/such/header_fa.h")
    torch._dynamo.reset()
    fn = torch.compile(lambda x: torch.sin(x) + 1, backend="fuse_all")
    x = torch.randn(8)
    torch.testing.assert_close(fn(x), torch.sin(x) + 1)
    record = fuse_all.compiled_graphs()[-1]
    assert "header_fa.h" in record.fallback_reason and "error" in record.fallback_reason
    assert "runs in ATen" in caplog.text and "header_fa.h: No such file" in caplog.text
    torch._dynamo.reset()


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

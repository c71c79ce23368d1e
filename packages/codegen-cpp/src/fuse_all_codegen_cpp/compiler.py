"""Compile a translation unit with one compiler call, cache the shared library by content hash, load it.

Cache entries live in a private directory (`cache_dir()`): ``<key>.cpp`` (the source, for reading),
``<key>.so`` and ``<key>.sha256`` (the library's checksum). The key hashes the source, the flags, the
compiler's `--version`, the link flags and the CPU (``-march=native`` code must not be loaded on another CPU). Every
file is written to an O_EXCL temporary name and renamed, so readers never see half a file (leftovers of
killed processes are swept, `fuse_all_ir.sweep_stale_temps`); a per-key lock keeps concurrent processes
from compiling the same source twice, and a waiter gives up on a stopped or stuck holder; an entry that is
not a regular file of this user, whose checksum does not match or that the dynamic loader rejects is
rebuilt, never loaded.
"""
from __future__ import annotations

import ctypes
import functools
import logging
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import threading
from pathlib import Path

from fuse_all_ir import compile_timing
from fuse_all_ir import (
    LockWaitAbandoned, UnsafeDirectory, atomic_write, caches_disabled, exclusive_lock, portable_caches, private_dir,
    read_regular_file, temp_file,
)

from . import rules

log = logging.getLogger("fuse_all")

# -O2, not -O3: every hot loop carries `omp simd`, which GCC vectorises at -O2 too; -O3 doubled the compile
# time of a 20-kernel TU (full unrolling of constant-trip loops) for no measured speed-up (README).
# -fno-math-errno lets libm calls be vectorised (libmvec) and sqrt inlined; no -ffast-math: it breaks
# NaN/inf semantics and, in GCC < 13, links crtfastmath.o, which flips the whole process to flush-to-zero.
BASE_FLAGS = ("-O2", "-march=native", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-shared", "-fPIC")
COMPILE_TIMEOUT_S = 600


class CppCompilerNotFound(RuntimeError):
    """No C++ compiler: set $CXX or install g++ (callers may fall back to eager/another backend)."""


class CppCompileError(RuntimeError):
    """The compiler rejected a generated translation unit."""


UnsafeCacheDir = UnsafeDirectory   # the folder check lives with the other caches' (fuse_all_ir.cache_dirs)


# ---- compiler and flags -----------------------------------------------------------------------------------

def find_compiler() -> list[str]:
    """The compiler command: $CXX (may carry arguments, e.g. "ccache g++"), else g++, c++ or clang++."""
    env = os.environ.get("CXX")
    if env:
        cmd = shlex.split(env)
        if cmd and shutil.which(cmd[0]):
            return cmd
        raise CppCompilerNotFound(f"C++ compiler not found: $CXX={env!r} is not an executable")
    for name in ("g++", "c++", "clang++"):
        path = shutil.which(name)
        if path:
            return [path]
    raise CppCompilerNotFound("C++ compiler not found: install g++ (or clang++) or set $CXX")


def compile_flags() -> list[str]:
    return (list(BASE_FLAGS) + vector_width_flags() + gcc_flags()
            + shlex.split(os.environ.get("FUSE_ALL_CXXFLAGS", "")))


def gcc_flags() -> list[str]:
    """-fno-tree-pre: GCC's partial redundancy elimination threads a NaN test of a select's result through
    the select (`isnan(relu(x))` becomes `x > 0 ? isnan(x) : false`, `valid & m` over a loop-invariant
    window test becomes `valid ? m : false`). GCC 12's vectoriser cannot widen such a select of a mask
    whose masks differ in precision and leaves the whole `omp simd` loop scalar: BatchNorm + ReLU +
    3x3 max-pool ran 9x slower than Inductor's kernels. The IR already shares values, so PRE has little
    left to remove: the generated-kernel time of resnet50, mobilenet v2/v3, bert and add+LayerNorm+GELU
    did not grow without it (bench/profile_cpu.py, RESULTS.md)."""
    try:
        identity = _compiler_identity(tuple(find_compiler()))
    except CppCompilerNotFound:
        return []
    is_gcc = "Free Software Foundation" in identity and "clang" not in identity.lower()
    return ["-fno-tree-pre"] if is_gcc else []


def vector_width_flags() -> list[str]:
    """512-bit vectors where the CPU has AVX-512, as ATen's and Inductor's kernels use there. GCC and
    Clang default to 256 bits even with `-march=native` (a guard against the clock drop of early AVX-512
    Intel parts); at 512 the libmvec math and our inline expf do twice the work per instruction (AMD EPYC,
    1 thread, 4096 floats in L1: tanhf 0.48 -> 0.17 ns, expf 0.49 -> 0.25 ns per element)."""
    return ["-mprefer-vector-width=512"] if "avx512f" in _cpu_flags() else []


@functools.lru_cache(None)
def _cpu_flags() -> frozenset[str]:
    for line in _cpu_identity().splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def link_flags() -> list[str]:
    return ["-lmvec"] if rules.libmvec_functions() else []


KEY_FORMAT = "fuse-all-cpp-2"   # bump when the meaning of a cached entry changes


@functools.lru_cache(None)
def _compiler_identity(compiler: tuple[str, ...]) -> str:
    """What the compiler says it is (`--version`: name, version, build), so that the key survives a copy
    to another machine with the same compiler and changes with an upgrade; the binary's path, size and
    mtime where it does not answer."""
    try:
        proc = subprocess.run([*compiler, "--version"], capture_output=True, text=True, timeout=30)
        if proc.returncode == 0 and proc.stdout.strip():
            return proc.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    path = os.path.realpath(shutil.which(compiler[0]) or compiler[0])
    try:
        st = os.stat(path)
    except OSError:
        return path
    return f"{path}:{st.st_size}:{st.st_mtime_ns}"


@functools.lru_cache(None)
def _cpu_identity() -> str:
    try:
        with open("/proc/cpuinfo", "rb") as f:
            head = f.read(16384).decode(errors="replace")
        keep = [ln for ln in head.split("\n\n")[0].splitlines()
                if ln.startswith(("vendor_id", "model name", "flags"))]
        return "\n".join(keep)
    except OSError:
        import platform
        return platform.machine() + platform.processor()


def cache_key(source: str, compiler: list[str], flags: list[str], libraries: list[str] | None = None) -> str:
    """Everything that changes the library: the source (the prelude is inlined in it), the compiler
    (`--version`), the compile and link flags, the CPU (`-march=native`: vendor, model and ISA flags)."""
    libraries = link_flags() if libraries is None else libraries
    h = hashlib.sha256()
    for part in (KEY_FORMAT, source, os.path.basename(compiler[-1]), _compiler_identity(tuple(compiler)),
                 " ".join(flags), " ".join(libraries), _cpu_identity()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


# ---- the cache directory ----------------------------------------------------------------------------------

def cache_dir() -> Path:
    """`<cache root>/cpp` (`fuse_all_ir.cache_root`), private: created 0700, refused with a warning (and
    replaced by a private folder of this process) when another user owns it or others may write to it,
    since they could plant a library that we would load."""
    return private_dir("cpp")


def _write_atomic(path: Path, data: bytes) -> None:
    atomic_write(path, data)


def _unlink(path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# ---- loading ---------------------------------------------------------------------------------------------

class CppLibrary:
    """A loaded translation unit. `kernel(name, n_pointers, n_sizes)` gives a ctypes function taking
    `n_pointers` addresses (`tensor.data_ptr()`) then `n_sizes` int64 sizes."""

    def __init__(self, cdll: ctypes.CDLL, path: Path, key: str):
        self.cdll, self.path, self.key = cdll, path, key

    def kernel(self, name: str, n_pointers: int, n_sizes: int):
        fn = getattr(self.cdll, name)
        fn.argtypes = [ctypes.c_void_p] * n_pointers + [ctypes.c_int64] * n_sizes
        fn.restype = None
        return fn

    def launcher(self, name: str, n_pointers: int, n_sizes: int):
        """`kernel`, called with the tensors themselves then the sizes: the launcher extension's object
        (`launcher.py`: no per-argument Python work) when it is available, else the ctypes function on
        `data_ptr()`s."""
        from .launcher import kernel_launcher
        fast = kernel_launcher(self.cdll, name, n_pointers, n_sizes)
        if fast is not None:
            return fast
        fn = self.kernel(name, n_pointers, n_sizes)

        def launch(*args):
            if len(args) != n_pointers + n_sizes:
                raise TypeError(f"kernel {name} takes {n_pointers} tensors and {n_sizes} sizes, got "
                                f"{len(args)} arguments")
            fn(*(t.data_ptr() for t in args[:n_pointers]), *args[n_pointers:])
        launch.__name__ = name
        return launch

    def __repr__(self):
        return f"<CppLibrary {self.path}>"


_LOADED: dict[str, CppLibrary] = {}
_KEY_LOCKS: dict[str, threading.Lock] = {}   # threads compiling different sources don't wait for each other
_LOCK = threading.Lock()                      # guards the two dicts


def _try_load(so: Path, checksum: Path, key: str) -> CppLibrary | None:
    """The cached library, or None when the entry is missing, is not a regular file of this user, fails
    its checksum or cannot be loaded."""
    expected, data = read_regular_file(checksum), read_regular_file(so)
    if expected is None or data is None:
        return None
    if hashlib.sha256(data).hexdigest() != expected.decode(errors="replace").strip():
        return None
    try:
        return CppLibrary(ctypes.CDLL(str(so)), so, key)
    except OSError:
        return None


def load_library(source: str, lock_timeout_s: float | None = None) -> CppLibrary:
    with compile_timing.phase("cpp_load"):     # the compiler call inside is its own phase, `cpp_compile`
        return _load_library(source, lock_timeout_s)


def _load_library(source: str, lock_timeout_s: float | None = None) -> CppLibrary:
    """Compile `source` (or take it from the cache) and load it into this process.

    Processes compiling the same source take turns through a per-key lock, so it compiles once. A waiter
    gives up on a holder that is stopped (Ctrl-Z) or that holds the lock past `lock_timeout_s` (default
    `fuse_all_ir.cache_dirs.LOCK_TIMEOUT_S`): it says so and compiles the entry itself."""
    compiler = find_compiler()
    flags = compile_flags()
    key = cache_key(source, compiler, flags)
    remember = not caches_disabled()     # disabled: every call compiles, for measuring
    with _LOCK:
        lib = _LOADED.get(key) if remember else None
        if lib is not None:
            return lib
        key_lock = _KEY_LOCKS.setdefault(key, threading.Lock())
    with key_lock:
        lib = _LOADED.get(key) if remember else None
        if lib is not None:
            return lib
        directory = cache_dir()
        so, checksum = directory / f"{key}.so", directory / f"{key}.sha256"
        lib = _try_load(so, checksum, key)
        if lib is None:
            try:
                with exclusive_lock(directory / f"{key}.lock", lock_timeout_s, what=f"C++ library {key}"):
                    lib = _try_load(so, checksum, key)     # another process may have just compiled it
                    if lib is None:
                        lib = _build(source, so, checksum, key, compiler, flags)
            except LockWaitAbandoned as why:
                log.warning("fuse-all: %s; compiling it in this process", why)
                lib = _build(source, so, checksum, key, compiler, flags)
        _record_artifact(so, key)
        if remember:
            with _LOCK:
                _LOADED[key] = lib
        return lib


def _record_artifact(so: Path, key: str) -> None:
    """Let `torch.compiler.save_cache_artifacts()` carry the library (`fuse_all_ir.portable_caches`)."""
    data = read_regular_file(so)
    if data is not None:
        portable_caches.record_library(key, data)


def _build(source: str, so: Path, checksum: Path, key: str, compiler: list[str], flags: list[str]) -> CppLibrary:
    with compile_timing.phase("cpp_compile"):
        compile_library(source, so, compiler, flags)
    _write_atomic(checksum, _sha256_file(so).encode())
    lib = _try_load(so, checksum, key)
    if lib is None:
        raise CppCompileError(f"compiled {so} but it does not load")
    return lib


def compile_library(source: str, so: Path, compiler: list[str] | None = None,
                    flags: list[str] | None = None) -> None:
    """One compiler call: `source` -> shared library at `so` (written atomically)."""
    compiler = compiler or find_compiler()
    flags = compile_flags() if flags is None else flags
    src = so.with_suffix(".cpp")
    _write_atomic(src, source.encode())
    fd, tmp = temp_file(so.parent, so.name)
    os.close(fd)
    cmd = [*compiler, *flags, "-o", tmp, str(src), *link_flags()]
    try:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        except FileNotFoundError as e:
            raise CppCompilerNotFound(f"C++ compiler not found: {e}") from None
        except subprocess.TimeoutExpired:
            raise CppCompileError(f"compiler timed out after {COMPILE_TIMEOUT_S} s: {shlex.join(cmd)}") from None
        if proc.returncode != 0:
            output = (proc.stderr or proc.stdout or "").splitlines()
            head = "\n".join(output[:20])
            raise CppCompileError(f"C++ compile failed: {first_error_line(output)}\n"
                                  f"command: {shlex.join(cmd)}\n{head}")
        os.replace(tmp, so)
    finally:
        _unlink(tmp)


def first_error_line(output: list[str]) -> str:
    """The line a one-line warning should show: the compiler's first `file:line:col: error: ...`, else
    the first line that mentions an error other than collect2's summary (a linker message), else the
    first non-empty line."""
    lines = [line.strip() for line in output if line.strip()]
    for line in lines:
        if _SOURCE_ERROR.search(line):
            return line
    for line in lines:
        if "error" in line.lower() and not line.startswith("collect2"):
            return line
    return lines[0] if lines else "(no compiler output)"


_SOURCE_ERROR = re.compile(r":\d+:(\d+:)? (fatal )?error:")

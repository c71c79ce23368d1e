"""Compile a translation unit with one compiler call, cache the shared library by content hash, load it.

Cache entries live in a private directory (`cache_dir()`): ``<key>.cpp`` (the source, for reading),
``<key>.so`` and ``<key>.sha256`` (the library's checksum). The key hashes the source, the flags, the
compiler binary's identity and the CPU (``-march=native`` code must not be loaded on another CPU). Every
file is written to a temporary name and renamed, so readers never see half a file; a per-key lock keeps
concurrent processes from compiling the same source twice; an entry whose checksum does not match or
that the dynamic loader rejects is rebuilt, never loaded.
"""
from __future__ import annotations

import ctypes
import fcntl
import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from . import rules

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


class UnsafeCacheDir(PermissionError):
    """The cache directory is owned by another user or writable by others: loading code from it is unsafe."""


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
    return list(BASE_FLAGS) + shlex.split(os.environ.get("FUSE_ALL_CXXFLAGS", ""))


def link_flags() -> list[str]:
    return ["-lmvec"] if rules.libmvec_functions() else []


@functools.lru_cache(None)
def _compiler_identity(path: str) -> str:
    st = os.stat(os.path.realpath(path))
    return f"{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}"


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


def cache_key(source: str, compiler: list[str], flags: list[str]) -> str:
    h = hashlib.sha256()
    for part in (source, " ".join(compiler), _compiler_identity(shutil.which(compiler[0]) or compiler[0]),
                 " ".join(flags), _cpu_identity()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


# ---- the cache directory ----------------------------------------------------------------------------------

def cache_dir() -> Path:
    """`$FUSE_ALL_CACHE_DIR/cpp` or `~/.cache/fuse-all/cpp`, created 0700; refused when another user owns it
    or others may write to it (they could plant a library that we would load)."""
    base = os.environ.get("FUSE_ALL_CACHE_DIR")
    root = Path(base) if base else Path.home() / ".cache" / "fuse-all"
    path = root / "cpp"
    if not path.is_dir():
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid():
        raise UnsafeCacheDir(f"refusing C++ cache dir {path}: owned by uid {st.st_uid}, not {os.getuid()}")
    if st.st_mode & 0o022:
        raise UnsafeCacheDir(f"refusing C++ cache dir {path}: writable by group/others "
                             f"(mode {st.st_mode & 0o777:o}); chmod 700 it or set $FUSE_ALL_CACHE_DIR")
    return path


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


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

    def __repr__(self):
        return f"<CppLibrary {self.path}>"


_LOADED: dict[str, CppLibrary] = {}
_KEY_LOCKS: dict[str, threading.Lock] = {}   # threads compiling different sources don't wait for each other
_LOCK = threading.Lock()                      # guards the two dicts


def _try_load(so: Path, checksum: Path, key: str) -> CppLibrary | None:
    """The cached library, or None when the entry is missing, fails its checksum or cannot be loaded."""
    try:
        expected = checksum.read_text().strip()
        if _sha256_file(so) != expected:
            return None
        return CppLibrary(ctypes.CDLL(str(so)), so, key)
    except OSError:
        return None


def load_library(source: str) -> CppLibrary:
    """Compile `source` (or take it from the cache) and load it into this process."""
    compiler = find_compiler()
    flags = compile_flags()
    key = cache_key(source, compiler, flags)
    with _LOCK:
        lib = _LOADED.get(key)
        if lib is not None:
            return lib
        key_lock = _KEY_LOCKS.setdefault(key, threading.Lock())
    with key_lock:
        lib = _LOADED.get(key)
        if lib is not None:
            return lib
        directory = cache_dir()
        so, checksum = directory / f"{key}.so", directory / f"{key}.sha256"
        lib = _try_load(so, checksum, key)
        if lib is None:
            with open(directory / f"{key}.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)     # another process may be compiling this very source
                try:
                    lib = _try_load(so, checksum, key)
                    if lib is None:
                        compile_library(source, so, compiler, flags)
                        _write_atomic(checksum, _sha256_file(so).encode())
                        lib = _try_load(so, checksum, key)
                        if lib is None:
                            raise CppCompileError(f"compiled {so} but it does not load")
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
        with _LOCK:
            _LOADED[key] = lib
        return lib


def compile_library(source: str, so: Path, compiler: list[str] | None = None,
                    flags: list[str] | None = None) -> None:
    """One compiler call: `source` -> shared library at `so` (written atomically)."""
    compiler = compiler or find_compiler()
    flags = compile_flags() if flags is None else flags
    src = so.with_suffix(".cpp")
    _write_atomic(src, source.encode())
    fd, tmp = tempfile.mkstemp(dir=so.parent, prefix=so.name + ".", suffix=".tmp")
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
            head = "\n".join((proc.stderr or proc.stdout).splitlines()[:20])
            raise CppCompileError(f"C++ compile failed ({shlex.join(cmd)}):\n{head}")
        os.replace(tmp, so)
    finally:
        _unlink(tmp)

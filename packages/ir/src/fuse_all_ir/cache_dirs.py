"""Every directory fuse-all writes to: one cache root, private folders, atomic writes, a compile lock.

Code is loaded from the caches (shared libraries, host programs), so a folder that another user owns or
may write to is never used: a planted file would run as the victim. The rules, for every cache:

- one root, resolved here only: `$FUSE_ALL_CACHE_DIR`, else `<user cache dir>/fuse-all`, where the user
  cache dir is `$XDG_CACHE_HOME` or `~/.cache` (Linux), `~/Library/Caches` (macOS), `%LOCALAPPDATA%`
  (Windows);
- folders are created 0700; an existing one must be owned by the current user and not writable by group
  or others (one that others may only read is tightened to 0700). Otherwise it is refused with a
  warning and a fresh private folder of this process (`tempfile.mkdtemp`) is used instead: no cache, but
  no failed compile either;
- files are written to an O_EXCL temporary name (`tempfile.mkstemp`) in the same private folder, then
  renamed: readers never see half a file and no name is followed through a symlink. Temporary names carry
  the writer's pid so that leftovers of a killed process can be told apart from a live writer's;
- `$FUSE_ALL_FORCE_DISABLE_CACHES=1` (or torch's `$TORCHINDUCTOR_FORCE_DISABLE_CACHES=1`) turns every cache
  off, for measuring compile time: each `private_dir` call then gives a fresh private folder of this
  process, so nothing is read that an earlier compile wrote, and everything still compiles.
"""
from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator, Mapping

log = logging.getLogger("fuse_all")

CACHE_DIR_VARIABLE = "FUSE_ALL_CACHE_DIR"
DISABLE_VARIABLES = ("FUSE_ALL_FORCE_DISABLE_CACHES", "TORCHINDUCTOR_FORCE_DISABLE_CACHES")
STALE_TEMP_S = 3600.0        # a temporary file this old is a leftover whatever its pid says
LOCK_TIMEOUT_S = 120.0       # default wait for another process compiling the same key

_TEMP_NAME = re.compile(r"\.(\d+)\.[A-Za-z0-9_]+\.tmp\Z")
_lock = threading.Lock()
_fallback_root: Path | None = None
_swept: set[Path] = set()
_warned: set[str] = set()


class UnsafeDirectory(PermissionError):
    """A folder owned by another user or writable by others: nothing may be loaded from it."""


# ---- where ---------------------------------------------------------------------------------------------

def user_cache_dir(env: Mapping[str, str] | None = None, platform: str | None = None) -> Path:
    """The platform's per-user cache folder (the rule the editor's language server shares)."""
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    home = Path.home()
    if platform == "darwin":
        return home / "Library" / "Caches"
    if platform == "win32":
        return Path(env.get("LOCALAPPDATA") or home / "AppData" / "Local")
    return Path(env.get("XDG_CACHE_HOME") or home / ".cache")


def cache_root(env: Mapping[str, str] | None = None, platform: str | None = None) -> Path:
    """`$FUSE_ALL_CACHE_DIR`, else `<user cache dir>/fuse-all` (absolute; not created)."""
    env = os.environ if env is None else env
    override = env.get(CACHE_DIR_VARIABLE)
    if override:
        return Path(override).expanduser().absolute()
    return (user_cache_dir(env, platform) / "fuse-all").absolute()


def caches_disabled(env: Mapping[str, str] | None = None) -> bool:
    """True when `$FUSE_ALL_FORCE_DISABLE_CACHES` or `$TORCHINDUCTOR_FORCE_DISABLE_CACHES` is 1/true/yes/on."""
    env = os.environ if env is None else env
    return any(env.get(name, "").strip().lower() in ("1", "true", "yes", "on") for name in DISABLE_VARIABLES)


# ---- private folders -----------------------------------------------------------------------------------

def check_private(path: str | os.PathLike[str], *, tighten: bool = True, follow_symlinks: bool = True) -> Path:
    """Raise UnsafeDirectory unless `path` is a folder of this user that nobody else may write to (and,
    unless `follow_symlinks`, not a symlink). A folder others may only read is tightened to 0700 when
    `tighten` (our caches; not a folder the user named for other uses)."""
    path = Path(path)
    st = os.stat(path) if follow_symlinks else os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeDirectory(f"{path} is not a directory")
    if hasattr(os, "getuid"):
        if st.st_uid != os.getuid():
            raise UnsafeDirectory(f"{path} is owned by uid {st.st_uid}, not by this user ({os.getuid()})")
        if st.st_mode & 0o022:
            raise UnsafeDirectory(f"{path} is writable by group/others (mode {stat.S_IMODE(st.st_mode):o})")
        if tighten and st.st_mode & 0o077:
            os.chmod(path, 0o700)
    return path


def make_private(path: str | os.PathLike[str], below: str | os.PathLike[str] | None = None, *,
                 tighten: bool = True) -> Path:
    """Create `path` (0700) and check it and every folder between `below` (default: `path` itself) and
    it (`check_private`). Folders above `below` are created if missing but are the user's business."""
    path = Path(path)
    top = Path(below) if below is not None else path
    chain = [path, *[p for p in path.parents if p == top or top in p.parents]]
    chain.reverse()                        # top first
    if not top.parent.exists():
        top.parent.mkdir(parents=True, exist_ok=True)
    for folder in chain:
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        check_private(folder, tighten=tighten)
    return path


def private_dir(*names: str) -> Path:
    """`cache_root()/<names...>`, created private and checked; on a refused or unusable folder, a
    warning and the same names under a fresh private folder of this process. With the caches disabled
    (`caches_disabled`), a new empty private folder of this process on every call."""
    if caches_disabled():
        return fresh_private_dir(*names)
    root = cache_root()
    target = root.joinpath(*names)
    try:
        # A root the user named may be a folder of theirs with other uses: checked, but not chmod-ed.
        make_private(root, tighten=not os.environ.get(CACHE_DIR_VARIABLE))
        if names:
            make_private(target, below=root / names[0])
    except OSError as error:   # UnsafeDirectory included
        _warn_once(str(root), f"fuse-all: not using the cache folder {target} ({error}); this process uses "
                              f"a private temporary folder instead (chmod 700 it, or set ${CACHE_DIR_VARIABLE})")
        target = make_private(fallback_root().joinpath(*names), below=fallback_root())
    sweep_stale_temps(target)
    return target


def fallback_root() -> Path:
    """A fresh private folder of this process, removed at exit."""
    global _fallback_root
    with _lock:
        if _fallback_root is None:
            _fallback_root = Path(tempfile.mkdtemp(prefix="fuse-all-cache-"))
            atexit.register(shutil.rmtree, _fallback_root, True)
        return _fallback_root


def fresh_private_dir(*names: str) -> Path:
    """A new, empty private folder inside `fallback_root()` (removed at exit)."""
    prefix = "-".join(names) + "-" if names else "cache-"
    return Path(tempfile.mkdtemp(prefix=prefix, dir=fallback_root()))


def _warn_once(key: str, message: str) -> None:
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(message)


# ---- files ---------------------------------------------------------------------------------------------

def temp_file(directory: str | os.PathLike[str], name: str) -> tuple[int, str]:
    """An O_EXCL temporary file (mode 0600) `<name>.<pid>.<random>.tmp` in `directory`: (fd, path)."""
    return tempfile.mkstemp(dir=directory, prefix=f"{name}.{os.getpid()}.", suffix=".tmp")


def atomic_write(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Write `data` to `path` through a temporary file in the same folder and a rename."""
    path = Path(path)
    fd, tmp = temp_file(path.parent, path.name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def read_regular_file(path: str | os.PathLike[str]) -> bytes | None:
    """The bytes of `path` if it is a regular file (not followed through a symlink) of this user that
    nobody else may write; None otherwise (missing, a link, someone else's, unreadable)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None
        if hasattr(os, "getuid") and (st.st_uid != os.getuid() or st.st_mode & 0o022):
            return None
        try:
            return f.read()
        except OSError:
            return None


def sweep_stale_temps(directory: str | os.PathLike[str], *, max_age_s: float = STALE_TEMP_S,
                      force: bool = False) -> list[str]:
    """Remove temporary files left in `directory` by killed processes: those whose writer pid is gone,
    and any older than `max_age_s`. Runs once per folder per process unless `force`. Returns the names."""
    directory = Path(directory)
    with _lock:
        if directory in _swept and not force:
            return []
        _swept.add(directory)
    removed = []
    now = time.time()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.endswith(".tmp"):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        match = _TEMP_NAME.search(entry.name)
        writer = int(match.group(1)) if match else None
        gone = writer is not None and writer != os.getpid() and not pid_alive(writer)
        if gone or now - st.st_mtime > max_age_s:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
                removed.append(entry.name)
    return removed


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_state(pid: int) -> str | None:
    """The kernel's one-letter state of `pid` ("R", "S", "T" for stopped, ...), None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
        return text[text.rindex(")") + 2]
    except (OSError, ValueError, IndexError):
        return None


# ---- the per-key lock ----------------------------------------------------------------------------------

class LockWaitAbandoned(RuntimeError):
    """Another process held the lock too long (or is stopped); the message says which and for how long."""


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike[str], timeout_s: float | None = None,
                   what: str = "this entry") -> Iterator[None]:
    """Hold an flock on `path` (created 0600, not followed through a symlink) for the `with` block; the
    holder's pid is written into the file. Raises LockWaitAbandoned, without the lock, when the holder is
    stopped (Ctrl-Z) or has held it for `timeout_s` (default LOCK_TIMEOUT_S): the caller then works
    without it. The lock dies with its holder, so a killed process never leaves it held."""
    import fcntl   # POSIX only: imported here so the rest of this module works everywhere

    timeout_s = LOCK_TIMEOUT_S if timeout_s is None else timeout_s
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    try:
        _acquire(fd, path, timeout_s, what)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _acquire(fd: int, path, timeout_s: float, what: str) -> None:
    import fcntl

    start = time.monotonic()
    delay = 0.005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        waited = time.monotonic() - start
        holder = _holder(fd)
        state = process_state(holder) if holder else None
        if state in ("T", "t"):
            raise LockWaitAbandoned(f"the process holding the lock on {what} (pid {holder}) is stopped; "
                                    f"not waiting for it ({path})")
        if waited >= timeout_s:
            who = f"pid {holder}" if holder else "another process"
            raise LockWaitAbandoned(f"waited {waited:.0f} s for {who} holding the lock on {what}; "
                                    f"giving up on it ({path})")
        time.sleep(min(delay, max(timeout_s - waited, 0.0)))
        delay = min(delay * 2, 0.25)


def _holder(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode().strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None

"""fuse-all's cache entries in torch's portable caches: `torch.compiler.save_cache_artifacts()` carries
them, `torch.compiler.load_cache_artifacts()` writes them into this machine's private cache.

torch keeps a registry of artifact types (`torch.compiler._cache.CacheArtifactFactory`, torch 2.8 and
later); fuse-all registers the type `fuse_all` when this module is imported (importing `fuse_all` or any
stage does it). A fresh process must import fuse_all *before* `load_cache_artifacts()`: torch imports only
its own artifact types when it reads the bytes, and refuses the whole blob (a warning, nothing loaded) when
it meets a type nobody registered.

What is carried, one artifact per entry:

- `cpp/<key>.so`: a compiled C++ library (key: `fuse_all_codegen_cpp.compiler.cache_key`, which holds the
  compiler, flags and CPU, so a library built for another CPU is never picked up);
- `host/<digest>/<python cache tag>`: a host program's source and its cached bytecode (only loaded by the
  same Python version);
- `autotune/<key>.json`: a Triton autotune choice (key: `fuse_all_codegen_triton.autotune.cache_key`,
  which holds the GPU and the Triton and torch versions).

Each content is `FORMAT`, the sha256 of the payload, a newline, then the payload. On load a name that is
not of these forms (a path elsewhere), a wrong format, a digest that does not match or a host program
whose source does not hash to its folder is dropped with a warning: never written, never loaded. Entries
go through `cache_dirs` (private folders, atomic writes) like every other cache write.
"""
from __future__ import annotations

import hashlib
import logging
import re
import struct
import sys

from . import cache_dirs

log = logging.getLogger("fuse_all")

ARTIFACT_TYPE = "fuse_all"
FORMAT = b"fuse-all-artifact-1\n"
_CPP_NAME = re.compile(r"\Acpp/([0-9a-f]{40})\.so\Z")
_AUTOTUNE_NAME = re.compile(r"\Aautotune/([0-9a-f]{40})\.json\Z")
_HOST_NAME = re.compile(r"\Ahost/([0-9a-f]{24})/([A-Za-z0-9_.-]{1,64})\Z")

_artifact_class = None
unavailable_reason: str | None = None     # why torch cannot carry our entries, when it cannot


def _pack(payload: bytes) -> bytes:
    return FORMAT + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def _unpack(content: bytes) -> bytes | None:
    """The payload, or None when the content is not ours or its digest does not match."""
    if not isinstance(content, bytes) or not content.startswith(FORMAT):
        return None
    digest, newline, payload = content[len(FORMAT):].partition(b"\n")
    if not newline or hashlib.sha256(payload).hexdigest().encode() != digest:
        return None
    return payload


def register() -> bool:
    """Register the artifact type with torch (once); False, with `unavailable_reason`, where torch has no
    registry a third party can join."""
    global _artifact_class, unavailable_reason
    if _artifact_class is not None:
        return True
    try:
        from torch.compiler._cache import CacheArtifact, CacheArtifactFactory, CacheArtifactManager  # noqa: F401
    except ImportError as error:
        unavailable_reason = f"torch has no torch.compiler._cache registry ({error})"
        return False
    if not hasattr(CacheArtifactFactory, "register") or not hasattr(CacheArtifactManager, "record_artifact"):
        unavailable_reason = "torch.compiler._cache has no CacheArtifactFactory.register/record_artifact"
        return False
    existing = getattr(CacheArtifactFactory, "_artifact_types", {}).get(ARTIFACT_TYPE)
    if existing is not None:          # this module imported twice (e.g. reloaded): keep the first class
        _artifact_class = existing
        return True

    class FuseAllCacheArtifact(CacheArtifact):
        def populate_cache(self) -> None:
            write_entry(self.key, self.content)

        @staticmethod
        def type() -> str:
            return ARTIFACT_TYPE

    _artifact_class = CacheArtifactFactory.register(FuseAllCacheArtifact)
    return True


def _record(name: str, payload: bytes) -> None:
    if _artifact_class is None:
        return
    from torch.compiler._cache import CacheArtifactManager
    try:
        CacheArtifactManager.record_artifact(ARTIFACT_TYPE, name, _pack(payload))
    except Exception as error:  # noqa: BLE001 - carrying entries is an extra; never fail a compile for it
        log.debug("fuse-all: could not record cache artifact %s: %s", name, error)


def record_library(key: str, library: bytes) -> None:
    """A C++ library just built or loaded from the private cache."""
    _record(f"cpp/{key}.so", library)


def record_host_program(digest: str, source: bytes, bytecode_blob: bytes) -> None:
    """A host program (folder `digest`) and its cached bytecode file's bytes."""
    _record(f"host/{digest}/{sys.implementation.cache_tag}",
            struct.pack("<Q", len(source)) + source + bytecode_blob)


def record_autotune_choice(key: str, entry: bytes) -> None:
    """A Triton autotune choice just stored or read back (the JSON file's bytes)."""
    _record(f"autotune/{key}.json", entry)


def write_entry(name: str, content: bytes) -> bool:
    """Write one carried entry into the private cache; False (and a warning) when it is dropped."""
    payload = _unpack(content)
    if payload is None:
        return _drop(name, "damaged (format or sha256 mismatch)")
    cpp = _CPP_NAME.match(name)
    if cpp:
        folder = cache_dirs.private_dir("cpp")
        key = cpp.group(1)
        cache_dirs.atomic_write(folder / f"{key}.so", payload)
        cache_dirs.atomic_write(folder / f"{key}.sha256", hashlib.sha256(payload).hexdigest().encode())
        return True
    autotune = _AUTOTUNE_NAME.match(name)
    if autotune:      # its schema is checked where it is read (autotune.load_choice)
        cache_dirs.atomic_write(cache_dirs.private_dir("triton", "autotune") / f"{autotune.group(1)}.json", payload)
        return True
    host = _HOST_NAME.match(name)
    if host:
        digest, tag = host.groups()
        if tag != sys.implementation.cache_tag:
            return _drop(name, f"bytecode of {tag}, this is {sys.implementation.cache_tag}", warn=False)
        if len(payload) < 8:
            return _drop(name, "damaged (too short)")
        (length,) = struct.unpack("<Q", payload[:8])
        source, blob = payload[8:8 + length], payload[8 + length:]
        if len(source) != length or hashlib.sha256(source).hexdigest()[:24] != digest:
            return _drop(name, "its source does not hash to its name")
        root = cache_dirs.private_dir("host")
        folder = cache_dirs.make_private(root / digest, below=root)
        cache_dirs.atomic_write(folder / "output_code.py", source)
        cache_dirs.atomic_write(folder / f"output_code.{tag}.bin", blob)
        return True
    return _drop(name, "not a fuse-all cache entry name")


def _drop(name: str, why: str, warn: bool = True) -> bool:
    (log.warning if warn else log.debug)("fuse-all: dropped the loaded cache artifact %r: %s", name, why)
    return False


register()

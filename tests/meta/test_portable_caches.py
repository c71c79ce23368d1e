"""torch.compiler.save_cache_artifacts() / load_cache_artifacts() carry fuse-all's C++ libraries and host
programs (fuse_all_ir.portable_caches): saved in one process, loaded into an empty cache in another, the
compile there runs no C++ compiler; damaged or misnamed entries are dropped, never written."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fuse_all_ir import portable_caches

pytestmark = pytest.mark.skipif(not portable_caches.register(), reason=str(portable_caches.unavailable_reason))

# argv: mode (save|load), cache dir, artifacts file. Prints "compiles=<n>" and the fuse_all artifact names.
CHILD = r"""
import sys
import torch
import fuse_all   # before load_cache_artifacts: registers fuse-all's artifact type
import fuse_all_codegen_cpp.compiler as cpp

mode, path = sys.argv[1], sys.argv[3]
compiles = []
original = cpp.compile_library
# kernel libraries only: the launcher extension (`launch-<key>.so`, built once per cache folder) is not a graph's
cpp.compile_library = lambda src, so, *a, **k: (
    None if str(so).rsplit("/", 1)[-1].startswith("launch-") else compiles.append(1), original(src, so, *a, **k))[1]
if mode == "load":
    info = torch.compiler.load_cache_artifacts(open(path, "rb").read())
    print("loaded", sorted(info.artifacts.get("fuse_all", [])) if info else None)

def model(x, w):
    return torch.softmax(torch.tanh(x @ w) * 2.0, dim=-1).sum(0) + x.cos().mean()

torch.manual_seed(0)
x, w = torch.randn(16, 24), torch.randn(24, 8)
out = torch.compile(model, backend="fuse_all")(x, w)
torch.testing.assert_close(out, model(x, w), rtol=1e-5, atol=1e-5)
print(f"compiles={len(compiles)}")
if mode == "save":
    saved = torch.compiler.save_cache_artifacts()
    assert saved is not None, "save_cache_artifacts() returned None"
    open(path, "wb").write(saved[0])
    print("saved", sorted(saved[1].artifacts["fuse_all"]))
"""


def _kernel_libraries(folder: Path) -> list:
    """The graphs' libraries (not the launcher extension `launch-<key>.so` each cache folder builds once)."""
    return [p for p in folder.glob("*.so") if not p.name.startswith("launch-")]


def _child(mode: str, cache: Path, artifacts: Path) -> str:
    env = {**os.environ, "FUSE_ALL_CACHE_DIR": str(cache)}
    env.pop("FUSE_ALL_FORCE_DISABLE_CACHES", None)
    env.pop("TORCHINDUCTOR_FORCE_DISABLE_CACHES", None)
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(cache), str(artifacts)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def test_saved_artifacts_warm_an_empty_cache_in_a_new_process(tmp_path):
    artifacts = tmp_path / "artifacts.bin"
    saved = _child("save", tmp_path / "first", artifacts)
    assert "compiles=1" in saved and "'cpp/" in saved and "'host/" in saved
    empty = tmp_path / "second"
    loaded = _child("load", empty, artifacts)
    assert "compiles=0" in loaded, loaded                       # the library came from the artifacts
    assert "'cpp/" in loaded.split("loaded", 1)[1]
    libraries = sorted(p.name for p in _kernel_libraries(empty / "cpp"))
    assert libraries == sorted(p.name for p in _kernel_libraries(tmp_path / "first" / "cpp"))
    assert (empty / "cpp").stat().st_mode & 0o777 == 0o700


def test_a_flipped_bit_in_the_blob_is_refused_by_torch_and_everything_recompiles(tmp_path):
    artifacts = tmp_path / "artifacts.bin"
    _child("save", tmp_path / "first", artifacts)
    blob = bytearray(artifacts.read_bytes())
    blob[blob.index(b"\x7fELF") + 200] ^= 0xFF                  # torch's own framing has a checksum
    artifacts.write_bytes(bytes(blob))
    loaded = _child("load", tmp_path / "second", artifacts)
    assert "loaded None" in loaded and "compiles=1" in loaded
    rebuilt = tmp_path / "second" / "cpp"
    assert len(_kernel_libraries(rebuilt)) == 1 and not list(rebuilt.glob("*.tmp"))


def test_a_damaged_library_inside_valid_framing_is_dropped_and_rebuilt(tmp_path):
    """Our own digest: an entry whose bytes changed inside a blob torch accepts is never written."""
    from torch.compiler._cache import CacheArtifactManager, _serialize_single_cache
    from torch.utils._appending_byte_serializer import AppendingByteSerializer

    artifacts = tmp_path / "artifacts.bin"
    _child("save", tmp_path / "first", artifacts)
    entries = CacheArtifactManager.deserialize(artifacts.read_bytes())

    def damaged(artifact):
        if not artifact.key.startswith("cpp/"):
            return artifact
        content = bytearray(artifact.content)
        content[-100] ^= 0xFF
        return type(artifact)(artifact.key, bytes(content))
    serializer = AppendingByteSerializer(serialize_fn=_serialize_single_cache)
    serializer.extend([(kind, [damaged(a) for a in items]) for kind, items in entries.items()])
    artifacts.write_bytes(serializer.to_bytes())
    loaded = _child("load", tmp_path / "second", artifacts)
    assert "dropped the loaded cache artifact 'cpp/" in loaded and "sha256 mismatch" in loaded
    assert "compiles=1" in loaded                                # rebuilt, and the result still checked


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSE_ALL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FUSE_ALL_FORCE_DISABLE_CACHES", raising=False)
    monkeypatch.delenv("TORCHINDUCTOR_FORCE_DISABLE_CACHES", raising=False)
    return tmp_path / "cache"


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


@pytest.mark.parametrize("name", ["cpp/../../evil.so", "cpp/" + "a" * 40 + ".so/x", "cpp/" + "A" * 40 + ".so",
                                  "host/../x/cpython-311", "triton/abc", "/etc/passwd",
                                  "autotune/../" + "c" * 40 + ".json", "autotune/" + "c" * 39 + ".json"])
def test_names_outside_our_layout_are_dropped(cache, name):
    assert portable_caches.write_entry(name, portable_caches._pack(b"payload")) is False
    assert _files(cache.parent) == []


def test_damaged_or_foreign_content_is_dropped(cache):
    name = "cpp/" + "b" * 40 + ".so"
    good = portable_caches._pack(b"\x7fELF library bytes")
    assert portable_caches.write_entry(name, good[:-1]) is False                 # truncated
    assert portable_caches.write_entry(name, good.replace(b"library", b"LIBRARY")) is False
    assert portable_caches.write_entry(name, b"not ours") is False
    assert _files(cache) == []
    assert portable_caches.write_entry(name, good) is True
    so = cache / "cpp" / ("b" * 40 + ".so")
    assert so.read_bytes() == b"\x7fELF library bytes"
    assert (cache / "cpp" / ("b" * 40 + ".sha256")).read_text() == hashlib.sha256(so.read_bytes()).hexdigest()


def test_a_host_program_must_hash_to_its_folder(cache):
    import struct
    source = b"x = 3\n"
    digest = hashlib.sha256(source).hexdigest()[:24]
    tag = sys.implementation.cache_tag
    payload = struct.pack("<Q", len(source)) + source + b"bytecode"
    other = "0" * 24
    assert portable_caches.write_entry(f"host/{other}/{tag}", portable_caches._pack(payload)) is False
    assert portable_caches.write_entry(f"host/{digest}/cpython-0", portable_caches._pack(payload)) is False
    assert _files(cache) == []
    assert portable_caches.write_entry(f"host/{digest}/{tag}", portable_caches._pack(payload)) is True
    assert (cache / "host" / digest / "output_code.py").read_bytes() == source
    import fuse_all_ir
    assert fuse_all_ir.load_host_program(source.decode()).x == 3   # the planted bytecode fails its check


def test_autotune_choices_are_recorded_and_written_back(cache):
    """A Triton autotune choice travels too (GPU runs tune; the write and read are CPU-testable)."""
    from torch.compiler._cache import CacheArtifactManager

    from fuse_all_codegen_triton import autotune
    key = autotune.cache_key("src", [{"XBLOCK": 64}, {"XBLOCK": 128}], "1024x0", "NVIDIA H200|cc9.0|132SM", "3.6.0")
    with CacheArtifactManager.with_fresh_cache():
        autotune.store_choice(key, {"XBLOCK": 128}, [0.2, 0.1])
        blob, info = torch_save()
    assert info.artifacts["fuse_all"] == [f"autotune/{key}.json"]
    (cache / "triton" / "autotune" / f"{key}.json").unlink()
    assert autotune.load_choice(key) is None
    import torch
    torch.compiler.load_cache_artifacts(blob)
    assert autotune.load_choice(key) == {"XBLOCK": 128}


def torch_save():
    import torch
    saved = torch.compiler.save_cache_artifacts()
    assert saved is not None
    return saved

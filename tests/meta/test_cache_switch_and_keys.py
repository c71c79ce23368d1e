"""The switch that turns every cache off (FUSE_ALL_FORCE_DISABLE_CACHES / TORCHINDUCTOR_FORCE_DISABLE_CACHES),
and cache keys that change with everything that changes a cached entry."""
from __future__ import annotations

import ctypes
import math
import os
import types
from pathlib import Path

import pytest
import torch

import fuse_all  # noqa: F401 - registers the backend
import fuse_all_ir as ir
from fuse_all_ir import cache_dirs


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} if root.exists() else set()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("FUSE_ALL_CACHE_DIR", str(root))
    monkeypatch.delenv("FUSE_ALL_FORCE_DISABLE_CACHES", raising=False)
    monkeypatch.delenv("TORCHINDUCTOR_FORCE_DISABLE_CACHES", raising=False)
    return root


@pytest.fixture
def compiles(monkeypatch):
    """Counts C++ compiler runs (each `compile_library` is one compiler call)."""
    import fuse_all_codegen_cpp.compiler as cpp
    calls = []
    original = cpp.compile_library
    monkeypatch.setattr(cpp, "_LOADED", {})     # libraries earlier tests loaded into this process

    def counting(*args, **kwargs):
        calls.append(args[1])
        return original(*args, **kwargs)
    monkeypatch.setattr(cpp, "compile_library", counting)
    return calls


SOURCE = r'''
#include <math.h>
#include <stdint.h>
extern "C" void kernel_0(const float* in, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = sinf(cosf(in[i]));
}
'''


def _run(lib) -> None:
    n = 257
    x = (ctypes.c_float * n)(*[i * 0.05 - 6.0 for i in range(n)])
    out = (ctypes.c_float * n)()
    lib.kernel("kernel_0", 2, 1)(ctypes.addressof(x), ctypes.addressof(out), n)
    assert all(abs(out[i] - math.sin(math.cos(x[i]))) < 1e-5 for i in range(n))


@pytest.mark.parametrize("name, value, expected", [
    ("FUSE_ALL_FORCE_DISABLE_CACHES", "1", True), ("FUSE_ALL_FORCE_DISABLE_CACHES", "on", True),
    ("FUSE_ALL_FORCE_DISABLE_CACHES", "0", False), ("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1", True),
    ("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "", False), ("UNRELATED", "1", False),
])
def test_the_switch_reads_ours_and_torchs_variable(name, value, expected):
    assert ir.caches_disabled({name: value}) is expected


@pytest.mark.parametrize("variable", ["FUSE_ALL_FORCE_DISABLE_CACHES", "TORCHINDUCTOR_FORCE_DISABLE_CACHES"])
def test_disabled_caches_read_nothing_and_write_nothing_under_the_root(cache, compiles, monkeypatch, variable):
    from fuse_all_codegen_cpp import load_library
    from fuse_all_codegen_triton import autotune

    _run(load_library(SOURCE))                       # enabled: compiles once and caches
    module = ir.load_host_program("x = 41\n")
    autotune.store_choice("k" * 40, {"XBLOCK": 64})
    assert len(compiles) == 1 and load_library(SOURCE) is not None and len(compiles) == 1
    before = _files(cache)
    assert any(name.startswith("cpp/") and name.endswith(".so") for name in before)

    monkeypatch.setenv(variable, "1")
    _run(load_library(SOURCE))                       # disabled: compiles again, in a private temp folder
    _run(load_library(SOURCE))                       # ... and again: not even remembered in memory
    assert len(compiles) == 3
    assert all(cache not in Path(so).parents for so in compiles[1:])
    assert Path(compiles[1]).parent != Path(compiles[2]).parent
    assert autotune.load_choice("k" * 40) is None     # the remembered choice is not read
    again = ir.load_host_program("x = 41\n")
    assert again.x == 41 and cache not in Path(again.__fuse_all_path__).parents
    first, second = ir.private_dir("cpp"), ir.private_dir("cpp")
    assert first != second and not any(first.iterdir())
    for folder in (first, second):
        assert folder.stat().st_mode & 0o777 == 0o700 and cache_dirs.fallback_root() in folder.parents
    assert _files(cache) == before                    # nothing read, nothing added
    assert module.x == 41


def test_a_disabled_compile_through_torch_compile_still_works(cache, compiles, monkeypatch):
    monkeypatch.setenv("FUSE_ALL_FORCE_DISABLE_CACHES", "1")
    torch._dynamo.reset()
    fn = torch.compile(lambda x: torch.sin(x) * x + 1, backend="fuse_all")
    x = torch.randn(33, 7)
    torch.testing.assert_close(fn(x), torch.sin(x) * x + 1)
    assert compiles and _files(cache) == set()
    torch._dynamo.reset()


def test_disabled_caches_point_triton_at_a_fresh_folder(cache, monkeypatch):
    pytest.importorskip("triton")
    from triton import knobs

    from fuse_all_codegen_triton import _triton_compat as compat
    monkeypatch.setattr(knobs.cache, "dir", str(cache / "triton-own"))
    monkeypatch.setenv("FUSE_ALL_FORCE_DISABLE_CACHES", "1")
    used = compat.secure_cache_dir()
    assert knobs.cache.dir == used and cache_dirs.fallback_root() in Path(used).parents
    assert os.stat(used).st_mode & 0o777 == 0o700 and not os.listdir(used)


# ---- keys ------------------------------------------------------------------------------------------------

def test_cpp_key_changes_with_everything_that_changes_the_library(monkeypatch):
    import fuse_all_codegen_cpp.compiler as cpp
    compiler, flags = cpp.find_compiler(), cpp.compile_flags()
    base = cpp.cache_key(SOURCE, compiler, flags, ["-lmvec"])
    assert base == cpp.cache_key(SOURCE, compiler, flags, ["-lmvec"])
    assert "Free Software Foundation" in cpp._compiler_identity(tuple(compiler)) or "clang" in \
        cpp._compiler_identity(tuple(compiler)).lower()
    others = {
        cpp.cache_key(SOURCE + " ", compiler, flags, ["-lmvec"]),
        cpp.cache_key(SOURCE, compiler, flags + ["-DX"], ["-lmvec"]),
        cpp.cache_key(SOURCE, compiler, flags, []),
        cpp.cache_key(SOURCE, ["/usr/bin/clang++"], flags, ["-lmvec"]),
    }
    monkeypatch.setattr(cpp, "_compiler_identity", lambda c: "g++ (GCC) 99.1.0")
    others.add(cpp.cache_key(SOURCE, compiler, flags, ["-lmvec"]))
    monkeypatch.undo()
    monkeypatch.setattr(cpp, "_cpu_identity", lambda: "vendor_id: GenuineIntel\nflags: sse2 avx2")
    with_avx2 = cpp.cache_key(SOURCE, compiler, flags, ["-lmvec"])
    monkeypatch.setattr(cpp, "_cpu_identity", lambda: "vendor_id: GenuineIntel\nflags: sse2 avx2 avx512f")
    others |= {with_avx2, cpp.cache_key(SOURCE, compiler, flags, ["-lmvec"])}
    monkeypatch.setattr(cpp, "KEY_FORMAT", "next")
    others.add(cpp.cache_key(SOURCE, compiler, flags, ["-lmvec"]))
    assert base not in others and len(others) == 8


def test_cpu_identity_carries_the_isa_flags():
    import fuse_all_codegen_cpp.compiler as cpp
    if not os.path.exists("/proc/cpuinfo"):
        pytest.skip("no /proc/cpuinfo")
    identity = cpp._cpu_identity()
    assert "model name" in identity and "flags" in identity


def test_autotune_key_changes_with_device_arch_versions_and_format(monkeypatch):
    from fuse_all_codegen_triton import autotune
    h200 = types.SimpleNamespace(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132)
    device = autotune.device_identity(h200)
    assert device == "NVIDIA H200|cc9.0|132SM"
    args = ("hash", [{"XBLOCK": 64}], "1024x0", device, "3.6.0", "2.11.0")
    base = autotune.cache_key(*args)
    mig_slice = autotune.device_identity(types.SimpleNamespace(**{**vars(h200), "multi_processor_count": 16}))
    blackwell = autotune.device_identity(types.SimpleNamespace(**{**vars(h200), "major": 10}))
    variants = [
        ("hash2",), (None, [{"XBLOCK": 128}]), (None, None, "2048x0"),
        (None, None, None, mig_slice), (None, None, None, blackwell),
        (None, None, None, None, "3.8.0"), (None, None, None, None, None, "2.14.1"),
    ]
    keys = {autotune.cache_key(*[v if v is not None else a for v, a in zip(variant + (None,) * 6, args)])
            for variant in variants}
    monkeypatch.setattr(autotune, "KEY_FORMAT", "next")
    keys.add(autotune.cache_key(*args))
    assert base not in keys and len(keys) == len(variants) + 1
    assert autotune.cache_key(*args[:5]) == autotune.cache_key(*args[:5], torch.__version__)

"""Kernel launches through the launcher extension (`fuse_all_codegen_cpp.launcher`): the packed entry
point of each kernel, the argument checks, and the ctypes fallback where the extension is unavailable."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import fuse_all
from fuse_all_codegen_cpp import compiler, launcher
from fuse_all_codegen_cpp.target import packed_entry

KERNELS = r'''
#include <stdint.h>
extern "C" void kernel_0(const float* __restrict__ x, const double* __restrict__ y, float* __restrict__ out, int64_t n, int64_t shift) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * (float)y[0] + (float)shift;
}
'''


@pytest.fixture(scope="module")
def library():
    source = KERNELS + packed_entry(KERNELS) + "\n"
    return compiler.load_library(source)


def test_packed_entry_passes_pointers_then_sizes():
    entry = packed_entry(KERNELS)
    assert entry.startswith('extern "C" void kernel_0__packed(void* const* p, const int64_t* s)')
    assert "kernel_0((const float*)p[0], (const double*)p[1], (float*)p[2], (int64_t)s[0], (int64_t)s[1])" in entry


def test_extension_launcher_runs_the_kernel(library):
    assert launcher.extension() is not None, "the launcher extension did not build here"
    launch = library.launcher("kernel_0", 3, 2)
    assert "fuse-all kernel launcher kernel_0" in repr(launch)
    x, y, out = torch.randn(37), torch.tensor([2.5], dtype=torch.float64), torch.empty(40)
    launch(x, y, out[3:], 37, -4)      # an output with a storage offset: the view's own data pointer
    torch.testing.assert_close(out[3:], x * 2.5 - 4)


def test_extension_launcher_refuses_bad_arguments(library):
    launch = library.launcher("kernel_0", 3, 2)
    x, y, out = torch.randn(4), torch.ones(1, dtype=torch.float64), torch.empty(4)
    with pytest.raises(TypeError, match="takes 3 tensors and 2 sizes, got 4"):
        launch(x, y, out, 4)
    with pytest.raises(TypeError, match="argument 1 must be a tensor, got int"):
        launch(x, 7, out, 4, 0)
    with pytest.raises(TypeError, match="keyword"):
        launch(x, y, out, 4, shift=0)
    with pytest.raises(TypeError):
        launch(x, y, out, "4", 0)
    view = _Marked(torch.arange(6.0))[2:]   # a subclass with storage: its own data_ptr(), offset included
    launch(view, y, out, 4, 0)
    torch.testing.assert_close(out, torch.arange(2.0, 6.0))


class _Marked(torch.Tensor):
    pass


def test_ctypes_fallback(library, monkeypatch):
    monkeypatch.setattr(launcher, "kernel_launcher", lambda *a: None)
    launch = library.launcher("kernel_0", 3, 2)
    assert not isinstance(launch, type(launcher.extension().make_launcher("k", 1, 0, 0)))
    x, y, out = torch.randn(9), torch.tensor([-1.0], dtype=torch.float64), torch.empty(9)
    launch(x, y, out, 9, 1)
    torch.testing.assert_close(out, 1 - x)
    with pytest.raises(TypeError, match="takes 3 tensors and 2 sizes"):
        launch(x, y, out)


def test_caches_disabled_launch_through_ctypes(library, monkeypatch):
    """No extension build in a fresh folder per process when compile time is being measured."""
    monkeypatch.setenv("FUSE_ALL_FORCE_DISABLE_CACHES", "1")
    assert launcher.extension() is None
    launch = library.launcher("kernel_0", 3, 2)
    x, y, out = torch.randn(5), torch.tensor([3.0], dtype=torch.float64), torch.empty(5)
    launch(x, y, out, 5, 0)
    torch.testing.assert_close(out, 3 * x)


def test_compiled_graph_launches_with_tensors():
    def fn(x, y):
        return (x.sin() * y).sum(-1), torch.relu(x + y)
    x, y = torch.randn(8, 33), torch.randn(8, 33)
    compiled = torch.compile(fn, backend="fuse_all", options={"fallback": False})
    for got, expected in zip(compiled(x, y), fn(x, y)):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    source = Path(fuse_all.compiled_graphs()[-1].output_code).read_text()
    assert "_fa_cpp.launcher(" in source and ".data_ptr()" not in source
    assert "__packed(void* const* p, const int64_t* s)" in source

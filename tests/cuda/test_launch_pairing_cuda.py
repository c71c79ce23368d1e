"""A compiled Triton variant is launched only with its own kernel's arguments (marker `cuda`).

Seen once on the H200 (Triton 3.6), in test_repeated_calls_cuda.py's channels-last Conv-BN-ReLU training
test run after test_pooling_cuda.py with warm caches: "function takes exactly 16 arguments (25 given)", the C
launcher of the forward graph's 3-parameter kernel (num_batches_tracked += 1) called with the 12 arguments
of its batch-norm statistics kernel. These tests give a kernel another kernel's variant on purpose, at both
levels where that can happen (the compiled kernel; the launcher module Triton loaded for it), and check the
program still computes the right values and says what happened; and that in the sequence that failed, every
launcher Triton loaded takes its kernel's arguments and no two launcher files share a (device, inode), which
is what makes glibc's dlopen hand one library out for another."""
from __future__ import annotations

import gc
import logging
import os
from concurrent.futures import Future
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import fuse_all_optest as ot
import kernel_examples as ke
from fuse_all_ir import load_host_program, render_host_program

pytestmark = pytest.mark.cuda


def _done(value):
    future = Future()
    future.set_result(value)
    return future


def _two_kernel_module(tmp_path):
    from fuse_all_codegen_triton import TritonTarget
    example = ke.two_kernels("cuda")
    module = load_host_program(render_host_program(example.program, TritonTarget(autotune=False)), str(tmp_path))
    return example, module


def _key(launcher):
    from fuse_all_codegen_triton.compiler import VariantKey
    sizes = [31, 257]           # two_kernels' sizes: not multiples of 16
    assert launcher._variant(0, [0], sizes) == VariantKey(0, False, True, False)
    return VariantKey(0, False, True, False)


def _run_and_check(example, module, launcher, caplog):
    from fuse_all_codegen_triton import runtime
    with caplog.at_level(logging.ERROR, logger=runtime.__name__):
        for _ in range(3):      # the first call sets the fast launcher up; later ones use it
            outputs = module.call(list(example.inputs))
            ke.assert_outputs_match(outputs, example.expected(example.inputs), example)
    assert launcher.launch_mismatches
    assert any(r.levelno == logging.ERROR and launcher.name in r.message for r in caplog.records)


def test_a_kernel_handed_another_kernels_variant_still_computes_right(tmp_path, caplog):
    """Without the check this is the H200's TypeError ("function takes exactly 18 arguments (19 given)"
    here: kernel_0 has 5 parameters, kernel_1 6), deterministically."""
    example, module = _two_kernel_module(tmp_path)
    first, second = module.kernel_0_launcher, module.kernel_1_launcher
    key = _key(second)
    first.device_index = second.device_index = 0
    second._futures[key] = _done(first.compiled(key))
    _run_and_check(example, module, second, caplog)
    assert "compiled from JIT function kernel_0" in second.launch_mismatches[0]


def test_a_kernel_whose_launcher_module_is_another_kernels_still_computes_right(tmp_path, caplog):
    """The lower level: the right compiled kernel, but the launcher module of another signature (what the
    dynamic loader gives for a file whose (device, inode) it has seen): Triton's launcher itself is probed."""
    from fuse_all_codegen_triton import _triton_compat as compat
    from fuse_all_codegen_triton.compiler import Compiled
    example, module = _two_kernel_module(tmp_path)
    first, second = module.kernel_0_launcher, module.kernel_1_launcher
    key = _key(second)
    own, other = second._submit(key).result(), first.compiled(key)
    assert compat.launcher_param_count(own.runner) in (second._n_params(0), None)
    assert compat.launcher_param_count(other.runner) in (first._n_params(0), None)
    if compat.launcher_param_count(other.runner) is None:
        pytest.fail(f"Triton {compat.TRITON_VERSION}: the launcher's arity cannot be read")
    second._futures[key] = _done(Compiled(own.kernel, other.runner, own.function, own.metadata))
    _run_and_check(example, module, second, caplog)
    assert "launcher takes" in second.launch_mismatches[0]


def _stem(x, w):
    y = x.relu()
    return F.max_pool2d(y, 3, 2, 1) * w + F.avg_pool2d(y, 3, 2, 1, count_include_pad=False)


def _triton_kernels():
    from fuse_all_codegen_triton import TritonKernel
    return [o for o in gc.get_objects() if isinstance(o, TritonKernel)]


def test_every_launcher_of_the_sequence_that_failed_fits_its_kernel():
    """test_pooling's stem (forward and backward, channels-last) and then the channels-last Conv-BN-ReLU
    training block, in one process, three steps each against eager; then every compiled variant of every
    kernel still alive: its compiled kernel, its signature and Triton's loaded launcher take exactly the
    arguments its launches pass, and no launch was refused."""
    gc.collect()
    earlier = _triton_kernels()          # kept alive, so their ids are not reused by this test's kernels
    earlier_ids = {id(k) for k in earlier}
    x = (torch.randn(4, 64, 56, 56, device="cuda").round()).contiguous(memory_format=torch.channels_last)
    x.requires_grad_()
    w = torch.randn(28, device="cuda", requires_grad=True)
    stem = ot.compile_fn(_stem, "triton")
    out = stem(x, w)
    out.square().sum().backward()
    torch.testing.assert_close(out, _stem(x, w), atol=1e-5, rtol=1e-5)

    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Conv2d(48, 96, 3, padding=1, bias=False), torch.nn.BatchNorm2d(96),
                                torch.nn.ReLU()).to("cuda").to(memory_format=torch.channels_last)
    reference = [p.detach().clone().requires_grad_() for p in block.parameters()]
    compiled = ot.compile_fn(block, "triton")
    names = [n for n, _ in block.named_parameters()]
    for step in range(3):
        xb = torch.randn(4, 48, 24, 24, device="cuda").contiguous(memory_format=torch.channels_last)
        got = compiled(xb)
        grads = torch.autograd.grad(got.square().sum(), list(block.parameters()))
        want = torch.func.functional_call(block, dict(zip(names, reference)), (xb,))
        want_grads = torch.autograd.grad(want.square().sum(), reference)
        torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3, msg=lambda m: f"step {step}: {m}")
        for g, e in zip(grads, want_grads):
            torch.testing.assert_close(g, e, atol=1e-2, rtol=1e-3, msg=lambda m: f"step {step} grad: {m}")

    checked = 0
    for kernel in [k for k in _triton_kernels() if id(k) not in earlier_ids]:
        assert not kernel.launch_mismatches, (kernel.name, kernel.launch_mismatches)
        for key, compiled_variant in list(kernel._compiled.items()):
            variant = key if not isinstance(key[0], tuple) else key[0]
            assert kernel.pairing_problem(variant, compiled_variant) is None, kernel.name
            checked += 1
    assert checked >= 8


def test_no_two_triton_launcher_files_share_a_device_and_inode():
    """glibc's dlopen returns an already loaded library for a file with the same (st_dev, st_ino), whatever
    its path; CPython then runs that library's module init. Two different launcher files with one file id
    (possible on file systems that do not keep inode numbers unique, e.g. a multi-layer overlay without
    xino) make one kernel's launch run another signature's launcher: the H200's TypeError. This checks the
    machine's Triton cache after the sequence above ran in this process (run it after that test)."""
    from fuse_all_codegen_triton import _triton_compat as compat
    from fuse_all_codegen_triton import runtime   # noqa: F401 - the cache folder is set up on first compile
    root = Path(compat.cache_dir())
    if not root.is_dir():
        pytest.fail(f"Triton's cache folder {root} does not exist: nothing compiled in this process?")
    seen: dict[tuple[int, int], Path] = {}
    clashes = []
    files = [p for p in root.glob("*/__triton_launcher*") if p.is_file()]
    for path in files:
        st = os.stat(path)
        other = seen.setdefault((st.st_dev, st.st_ino), path)
        if other != path and other.read_bytes() != path.read_bytes():
            clashes.append((other, path, st.st_dev, st.st_ino))
    assert not clashes, f"launcher files sharing a file id on {_file_system(root)}: {clashes}"
    if compat.TRITON_VERSION.startswith("3.6."):
        assert files, f"Triton 3.6 builds one launcher file per signature; none under {root}"


def _file_system(path: Path) -> str:
    """The mount holding `path` (/proc/mounts: the longest mount point above it), for the failure message."""
    best = ("?", "?", "?")
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            device, point, kind, options = (line.split() + ["", "", "", ""])[:4]
            if str(path.resolve()).startswith(point.rstrip("/") + "/") and len(point) >= len(best[1]):
                best = (kind, point, options)
    except OSError:
        pass
    return f"{best[0]} mounted at {best[1]} ({best[2]})"

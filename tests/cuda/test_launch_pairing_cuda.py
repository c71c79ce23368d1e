"""A compiled Triton variant is launched only with its own kernel's arguments (marker `cuda`).

Seen once on the H200 (Triton 3.6), in test_repeated_calls_cuda.py's channels-last Conv-BN-ReLU training
test run after test_pooling_cuda.py with warm caches: "function takes exactly 16 arguments (25 given)", the C
launcher of the forward graph's 3-parameter kernel (num_batches_tracked += 1) called with the 12 arguments
of its batch-norm statistics kernel. These tests give a kernel another kernel's variant on purpose, at both
levels where that can happen (the compiled kernel; the launcher module Triton loaded for it), and check the
program still computes the right values and says what happened; and that in the sequence that failed, every
launcher Triton loaded takes its kernel's arguments; and the race that caused it, reproduced with Triton's
own launcher: CPython keeps one module object for every launcher file loaded again under Triton's one
module name, so a launcher read while another compile thread loads its own is the other's
(`_triton_compat.guard_launcher_loads`)."""
from __future__ import annotations

import gc
import logging
import weakref
from concurrent.futures import Future

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
    # gc also tracks weakref proxies: isinstance on one whose referent died raises ReferenceError
    return [o for o in gc.get_objects()
            if not isinstance(o, weakref.ProxyTypes) and isinstance(o, TritonKernel)]


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


def _launcher_path(runner):
    from fuse_all_codegen_triton import _triton_compat as compat
    path = compat.launcher_library(runner)
    if path is None:
        pytest.skip(f"Triton {compat.TRITON_VERSION} has no per-signature launcher modules (3.6 has): "
                    "the race this test reproduces cannot happen")
    return path


def test_the_launcher_load_race_with_tritons_own_launcher(tmp_path, monkeypatch):
    """The H200's failure, deterministically, with Triton's real CudaLauncher: while it builds kernel_1's
    launcher, another launcher file (kernel_0's) is loaded right after Triton's load returns, as a second
    compile thread does. Through CPython's shared module object kernel_1 then gets kernel_0's launcher
    (one parameter fewer: "takes exactly 18 arguments (19 given)"); through `guard_launcher_loads` its own."""
    from triton.runtime import build

    from fuse_all_codegen_triton import _triton_compat as compat
    example, module = _two_kernel_module(tmp_path)
    first, second = module.kernel_0_launcher, module.kernel_1_launcher
    key = _key(second)
    other, own = first.compiled(key), second.compiled(key)
    other_path, own_path = _launcher_path(other.runner), _launcher_path(own.runner)
    assert other_path != own_path
    guarded = build._load_module_from_path
    assert getattr(guarded, "fuse_all_private_copy", False), "compiling did not install the guard"
    unguarded = guarded.__wrapped__
    n_own, n_other = second._n_params(0), first._n_params(0)

    def launcher_built_during_a_race(loader):
        def racing_load(name, path):
            loaded = loader(name, path)
            unguarded(name, other_path)      # the other thread's load lands before `mod.launch` is read
            return loaded
        monkeypatch.setattr(build, "_load_module_from_path", racing_load)
        try:
            return type(own.runner)(own.kernel.src, own.kernel.metadata)
        finally:
            monkeypatch.setattr(build, "_load_module_from_path", guarded)

    # the bug, as it happened on the H200 (if this Python's import no longer shares the module object, the
    # race is gone there: say so rather than pass for the wrong reason)
    assert compat.launcher_param_count(launcher_built_during_a_race(unguarded)) == n_other, \
        "CPython did not hand the reloaded launcher the shared module object: the race cannot happen here"
    rebuilt = launcher_built_during_a_race(guarded)
    assert compat.launcher_param_count(rebuilt) == n_own                                   # the fix
    assert compat.launcher_library(rebuilt) == own_path

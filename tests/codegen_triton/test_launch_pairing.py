"""A compiled variant must be launched only with its own kernel's arguments.

Seen once on the H200 (Triton 3.6): a training graph's call raised Triton's "function takes exactly 16
arguments (25 given)": the C launcher of a 3-parameter kernel (in that forward graph: the
num_batches_tracked increment, two int64 pointers and XBLOCK) called with the 12 arguments of the
batch-norm statistics kernel of the same graph (10 pointers, XBLOCK, RBLOCK). These tests pin the
mechanism without a GPU: every kernel's parameters agree with what its launch passes, a variant that does
not fit is refused (logged as an error, compiled again for that kernel alone), and a launch Triton refuses
moves the kernel to Triton's own launcher instead of failing the user's program."""
from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

import kernel_examples as ke
from fuse_all_ir import load_host_program, render_host_program


def _module(example_name, tmp_path):
    from fuse_all_codegen_triton import TritonTarget
    example = ke.EXAMPLES[example_name]("cpu")
    return load_host_program(render_host_program(example.program, TritonTarget()), str(tmp_path))


def _launchers(module):
    from fuse_all_codegen_triton import TritonKernel
    return {name: v for name, v in vars(module).items() if isinstance(v, TritonKernel)}


@pytest.mark.parametrize("example_name", sorted(ke.EXAMPLES))
def test_every_variant_signature_has_one_parameter_per_launch_argument(example_name, tmp_path):
    """The signature Triton compiles (`compiler.signature`, constexprs included: Triton 3.6's C launcher
    parses one object per parameter) has exactly as many entries as every launch passes, in every config
    and both index widths, named after the JIT function's own parameters."""
    from fuse_all_codegen_triton.compiler import signature
    launchers = _launchers(_module(example_name, tmp_path))
    assert launchers
    for launcher in launchers.values():
        for int64 in (False, True):
            fn = launcher._fn_for(int64)
            sig = signature(fn, launcher.spec, int64)
            assert list(sig) == list(fn.arg_names), launcher.name
            for index in range(len(launcher.configs)):
                assert len(sig) == launcher._n_params(index), (launcher.name, index)


class FakeLauncher:
    """Triton 3.8's launcher shape: one annotation per kernel parameter."""

    def __init__(self, n_params, calls, refuse=False):
        self.arg_annotations = [None] * n_params
        self.calls, self.refuse, self.n_params = calls, refuse, n_params

    def __call__(self, *args):
        if self.refuse or len(args) - 9 != self.n_params:
            raise TypeError(f"function takes exactly {13 + self.n_params} arguments ({4 + len(args)} given)")
        self.calls.append(args)


def _compiled_for(launcher, int64=False, *, fn=None, n_params=None, calls=None, refuse=False):
    """A stand-in for a loaded variant: Triton's CompiledKernel keeps the ASTSource it was compiled from."""
    from fuse_all_codegen_triton.compiler import Compiled, signature
    fn = fn or launcher._fn_for(int64)
    sig = signature(fn, launcher.spec, int64) if n_params is None else {f"p{i}": "i32" for i in range(n_params)}
    kernel = SimpleNamespace(src=SimpleNamespace(fn=fn, signature=sig))
    return Compiled(kernel, FakeLauncher(len(sig), [] if calls is None else calls, refuse), "FUNC", "META")


@pytest.fixture
def two_kernels(tmp_path):
    """Two kernels of one host program with different parameter counts (a pointwise kernel and a reduction)."""
    launchers = sorted(_launchers(_module("mean_var", tmp_path)).values(), key=lambda k: k.name)
    if len(launchers) < 2:
        launchers += sorted(_launchers(_module("two_kernels", tmp_path / "b")).values(), key=lambda k: k.name)
    counts = {}
    for k in launchers:
        counts.setdefault(k._n_params(0), k)
    if len(counts) < 2:
        pytest.fail(f"the examples give no two kernels of different arity: {[(k.name, k._n_params(0)) for k in launchers]}")
    first, second = list(counts.values())[:2]
    return first, second


def test_a_variant_of_another_kernel_is_refused(two_kernels):
    from fuse_all_codegen_triton.compiler import VariantKey
    mine, other = two_kernels
    key = VariantKey(0, False, True, False)
    assert mine.pairing_problem(key, _compiled_for(mine)) is None
    problem = mine.pairing_problem(key, _compiled_for(other))
    assert problem and other._fn_for(False).__name__ in problem
    # the same function but another arity (what a stale or wrongly shared compile would give)
    assert "parameters" in mine.pairing_problem(key, _compiled_for(mine, n_params=mine._n_params(0) + 9))


def test_the_launcher_itself_is_checked_not_only_what_was_asked(two_kernels):
    """A CompiledKernel whose ASTSource looks right but whose loaded launcher takes another count."""
    from fuse_all_codegen_triton.compiler import VariantKey
    mine, _ = two_kernels
    compiled = _compiled_for(mine)
    compiled.runner.arg_annotations = [None] * 3
    problem = mine.pairing_problem(VariantKey(0, False, True, False), compiled)
    assert problem and "launcher takes 3 parameters" in problem


def test_a_shared_compile_that_does_not_fit_is_logged_and_compiled_again(two_kernels, monkeypatch, caplog):
    """What the H200 showed, driven through `compiled()`: the shared future hands back another kernel's
    variant. The launcher logs an error naming both and compiles the variant for itself alone."""
    from fuse_all_codegen_triton import runtime
    from fuse_all_codegen_triton.compiler import VariantKey
    mine, other = two_kernels
    key = VariantKey(0, False, True, False)
    wrong = _compiled_for(other)
    mine._futures[key] = SimpleNamespace(result=lambda: wrong)
    recompiled = []

    def compile_variant(fn, spec, k, device_index):
        recompiled.append((fn, spec["name"], k))
        return _compiled_for(mine)
    monkeypatch.setattr(runtime, "compile_variant", compile_variant)
    with caplog.at_level(logging.ERROR, logger=runtime.__name__):
        got = mine.compiled(key)
    assert got is not wrong and mine.pairing_problem(key, got) is None
    assert recompiled == [(mine._fn_for(False), mine.name, key)]
    assert mine.launch_mismatches and any(mine.name in r.message and "does not fit" in r.message
                                          for r in caplog.records if r.levelno == logging.ERROR)
    assert mine.compiled(key) is got and len(recompiled) == 1        # checked once per variant


def test_a_variant_that_never_fits_raises_launch_mismatch(two_kernels, monkeypatch):
    from fuse_all_codegen_triton import runtime
    from fuse_all_codegen_triton.compiler import VariantKey
    mine, other = two_kernels
    key = VariantKey(0, False, True, False)
    mine._futures[key] = SimpleNamespace(result=lambda: _compiled_for(other))
    monkeypatch.setattr(runtime, "compile_variant", lambda *a: _compiled_for(other))
    with pytest.raises(runtime.LaunchMismatch, match=mine.name):
        mine.compiled(key)


class FakeTensor:
    def __init__(self, ptr):
        self.ptr = ptr

    def data_ptr(self):
        return self.ptr


def test_a_launch_triton_refuses_goes_through_triton_launcher_and_is_logged(two_kernels, monkeypatch, caplog):
    """The fast launcher's C launch raises TypeError (nothing ran: Triton parses the arguments first): the
    call is made again through Triton's own `fn[grid](...)`, and so are later calls; the error is logged."""
    from fuse_all_codegen_triton import _triton_compat as compat
    from fuse_all_codegen_triton import runtime
    from fuse_all_codegen_triton.compiler import VariantKey
    mine, _ = two_kernels
    monkeypatch.setattr(compat, "stream_getter", lambda: (lambda idx: 1234))
    monkeypatch.setattr(compat, "current_device_getter", lambda: (lambda: 0))
    monkeypatch.setattr(compat, "launch_hooks", lambda: (None, None))
    monkeypatch.setattr(compat, "direct_launch", lambda runner: None)
    mine.interpret, mine.device_index, mine.chosen = False, 0, mine.configs[0]
    sizes = [16] * len(mine.spec["sizes"])
    args = tuple(FakeTensor(4096 * (i + 1)) for i in range(mine.n_ptr)) + tuple(sizes)
    div16 = bool(sizes)
    mine._compiled[VariantKey(0, False, True, div16)] = _compiled_for(mine, refuse=True)
    jit_calls = []
    mine._run_jit = lambda *a: jit_calls.append(a)
    run, run_on = mine._make_fast_launcher(0, args)
    mine._set_paths(run, run_on)
    with caplog.at_level(logging.ERROR, logger=runtime.__name__):
        mine.run_on(5, *args)
    assert jit_calls == [args]
    assert mine.launch_mismatches and "refused" in mine.launch_mismatches[0]
    assert any(r.levelno == logging.ERROR and mine.name in r.message for r in caplog.records)
    mine.run_on(5, *args)
    assert jit_calls == [args, args]


def test_launcher_param_count_reads_triton_36s_c_launcher(monkeypatch):
    """Triton 3.6: a per-signature C `launch`; called with nothing it names its own arity."""
    import triton.backends.nvidia.driver as nvidia_driver

    from fuse_all_codegen_triton import _triton_compat as compat
    monkeypatch.setattr(nvidia_driver, "_BASE_ARGS_FORMAT_LEN", 13, raising=False)

    class CudaLauncher:
        def launch(self, *args):
            raise TypeError(f"function takes exactly 16 arguments ({len(args)} given)")
    assert compat.launcher_param_count(CudaLauncher()) == 3
    assert compat.launcher_param_count(lambda *a: None) is None


_LAUNCHER_C = """
#define PY_SSIZE_T_CLEAN
#include <Python.h>
static PyObject* launch(PyObject* self, PyObject* args) {
  PyObject *o[%(n)d];
  if (!PyArg_ParseTuple(args, "%(format)s", %(refs)s)) return NULL;
  return PyLong_FromLong(%(n)d);
}
static PyMethodDef ModuleMethods[] = {{"launch", launch, METH_VARARGS, "%(tag)s"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef ModuleDef = {PyModuleDef_HEAD_INIT, "__triton_launcher", NULL, -1, ModuleMethods};
PyMODINIT_FUNC PyInit___triton_launcher(void) { return PyModule_Create(&ModuleDef); }
"""


def _build_launcher(folder, n_args, tag=""):
    """A C module shaped like Triton 3.6's per-signature launcher: `launch` parses exactly n_args objects."""
    from triton.runtime.build import _build, _load_module_from_path
    folder.mkdir()
    source = folder / "__triton_launcher.c"
    source.write_text(_LAUNCHER_C % {"n": n_args, "format": "O" * n_args, "tag": tag,
                                     "refs": ", ".join(f"&o[{i}]" for i in range(n_args))})
    path = _build("__triton_launcher", str(source), str(folder), [], [], [], [])
    return path, _load_module_from_path("__triton_launcher", path)


def _needs_c_compiler():
    import shutil
    if shutil.which("gcc") is None and shutil.which("clang") is None:
        pytest.fail("no C compiler to build the launcher modules with")


def _unguarded_loader():
    from triton.runtime import build
    load = build._load_module_from_path
    return getattr(load, "__wrapped__", load)


def test_cpython_hands_one_module_object_to_every_launcher_loaded_again(tmp_path):
    """The root cause, deterministically, on this machine's CPython: launcher files named alike and
    loaded a second time in a process all come back as the one `sys.modules["__triton_launcher"]` object,
    its dict rewritten by each load. Reading `.launch` after another load (what Triton 3.6's CudaLauncher
    does, while our other compile threads load launchers) gives the other signature's launcher: here a
    12-parameter kernel ends with a 3-parameter launcher, the H200's "takes exactly 16 arguments (25 given)"."""
    _needs_c_compiler()
    load = _unguarded_loader()
    path_3, _ = _build_launcher(tmp_path / "three", 13 + 3, tag="3 params")
    path_12, _ = _build_launcher(tmp_path / "twelve", 13 + 12, tag="12 params")
    mine = load("__triton_launcher", path_12)          # loaded again: CPython's cached module
    assert mine.launch.__doc__ == "12 params"
    load("__triton_launcher", path_3)                  # another compile thread, before `mine.launch` is read
    assert mine.launch.__doc__ == "3 params"
    with pytest.raises(TypeError, match=r"takes exactly 16 arguments \(25 given\)"):
        mine.launch(*range(25))


def test_guarded_loads_keep_each_launcher_its_own(tmp_path):
    """`guard_launcher_loads`: each load hands out a private copy, made under a lock, that later loads do
    not rewrite; sequentially and from racing threads."""
    import threading

    from fuse_all_codegen_triton import _triton_compat as compat
    from triton.runtime import build
    _needs_c_compiler()
    assert compat.guard_launcher_loads() and compat.guard_launcher_loads()       # idempotent
    load = build._load_module_from_path
    assert load.fuse_all_private_copy and load.__wrapped__ is _unguarded_loader()
    paths = {n: _build_launcher(tmp_path / f"n{n}", 13 + n, tag=f"{n} params")[0] for n in (3, 5, 12)}
    mine = load("__triton_launcher", paths[12])
    load("__triton_launcher", paths[3])
    assert mine.launch.__doc__ == "12 params"
    with pytest.raises(TypeError, match=r"takes exactly 25 arguments \(0 given\)"):
        mine.launch()
    wrong = []

    def hammer(n):
        for _ in range(200):
            module = load("__triton_launcher", paths[n])
            if module.launch.__doc__ != f"{n} params":
                wrong.append((n, module.launch.__doc__))
    threads = [threading.Thread(target=hammer, args=(n,)) for n in paths]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong


def test_load_compiled_and_the_compile_pool_install_the_guard(monkeypatch):
    from fuse_all_codegen_triton import _triton_compat as compat
    from triton.runtime import build
    original = _unguarded_loader()
    monkeypatch.setattr(build, "_load_module_from_path", original)
    calls = []
    monkeypatch.setattr(compat, "warm_driver", compat.warm_driver)   # restored after the test

    class FakeCompiled:
        run, function, packed_metadata = "RUN", "FUNC", "META"

        def _init_handles(self):
            calls.append(getattr(build._load_module_from_path, "fuse_all_private_copy", False))
    import torch
    monkeypatch.setattr(torch.cuda, "device", lambda index: __import__("contextlib").nullcontext())
    assert compat.load_compiled(FakeCompiled(), 0) == ("RUN", "FUNC", "META")
    assert calls == [True]


def test_the_launcher_library_is_read_from_its_code(tmp_path):
    """Error reports name the library a launcher's C code is in (`dladdr` of its method table)."""
    from fuse_all_codegen_triton import _triton_compat as compat
    _needs_c_compiler()
    path, module = _build_launcher(tmp_path / "a", 16)

    class CudaLauncher:
        launch = module.launch
    assert compat.launcher_library(CudaLauncher()) == path

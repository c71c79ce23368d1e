"""Every Triton detail that differs between versions (3.6 on the GPU machine, 3.8 here) or that reaches
into Triton's internals lives here, so a new Triton release means reading one small file.

What we rely on, checked against 3.6.0 and 3.8.0:
* `triton.compiler.ASTSource(fn, signature, constexprs, attrs)` + `triton.compile(src, target, options)`:
  compile one specialisation with a signature we choose (no tensors needed, so it can run ahead of the
  first call, in a thread).
* `CompiledKernel.run(gx, gy, gz, stream, function, packed_metadata, launch_metadata, enter_hook,
  exit_hook, *args)` with every kernel parameter (constexprs included) in order: what
  `JITFunction.run` itself calls in both versions. Pointers may be passed as ints.
* Under `TRITON_INTERPRET=1`, `triton.jit` returns an interpreted function launched as `fn[grid](...)`;
  libdevice is not available there, so `libdevice` below is our NumPy/torch shim.
"""
from __future__ import annotations

import functools
import os
import sys
import threading

import triton
import triton.language as tl

TRITON_VERSION = triton.__version__


def interpret_mode() -> bool:
    """Whether kernels run in Triton's CPU interpreter (`TRITON_INTERPRET=1` before triton's import)."""
    try:
        from triton import knobs
        return bool(knobs.runtime.interpret)
    except (ImportError, AttributeError):  # pragma: no cover - older layouts
        return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _fix_interpreter_scalar_index() -> None:
    """Triton 3.6's interpreter turns a scalar into an index with `int(handle.data)`, but it keeps scalar
    arguments as 1-element arrays, which NumPy >= 2.4 refuses to convert ("only 0-dimensional arrays can be
    converted to Python scalars"): every `range(0, rnumel, RBLOCK)` over a size argument fails. Triton 3.8
    squeezes first; do the same on every version (the interpreter re-applies its patches per launch)."""
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, "fuse_all_squeezes_index", False):
        return

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patch_lang_tensor.fuse_all_squeezes_index = True
    interpreter._patch_lang_tensor = patch_lang_tensor


def _fix_interpreter_bfloat16_rounding() -> None:
    """The interpreter (3.6 and 3.8) converts float32 to bfloat16 by truncation (`_convert_float` without a
    rounding mode: 65504 -> 65280), where the GPU's `cvt.rn.bf16.f32` and torch round to nearest even
    (65504 -> 65536). Every float16/bfloat16 ATen result is rounded (fuse_all_ir.rounding), so CPU runs of
    the Triton kernels drifted from eager by a bfloat16 ulp per op; round to nearest even, as the GPU does."""
    import numpy as np
    from triton.runtime import interpreter

    original = getattr(interpreter, "_convert_float", None)
    if original is None or getattr(original, "fuse_all_rounds_bfloat16", False):
        return

    def convert_float(input, input_dtype, output_dtype, rounding_mode):
        if input_dtype == tl.float32 and output_dtype == tl.bfloat16:
            bits = np.frombuffer(np.ascontiguousarray(input, dtype=np.float32).tobytes(), dtype=np.uint32)
            bits = bits.reshape(np.shape(input)).astype(np.uint64)
            rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
            return np.where(np.isnan(input), np.uint16(0x7FC0), rounded)
        return original(input, input_dtype, output_dtype, rounding_mode)

    convert_float.fuse_all_rounds_bfloat16 = True
    interpreter._convert_float = convert_float


# The libdevice module the generated kernels call (tan, erfc, pow, ...). On GPUs the portable stub
# module is remapped to the backend's libdevice by Triton's code generator.
if interpret_mode():
    from . import _interpret_libdevice as libdevice  # noqa: F401
    _fix_interpreter_scalar_index()
    _fix_interpreter_bfloat16_rounding()
else:
    from triton.language.extra import libdevice  # noqa: F401


# ---- compiling ----------------------------------------------------------------------------------------

@functools.lru_cache(None)
def get_target(device_index: int):
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver
    import torch
    if torch.version.hip is None and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(device_index)
        return GPUTarget("cuda", major * 10 + minor, 32)
    return driver.active.get_current_target()  # pragma: no cover - HIP / XPU: untested


def _key_function():
    """Triton's `triton_key` (3.6 and 3.8: `triton.runtime.cache.triton_key`, lru-cached): its key of its own
    installation, part of every compile's cache key."""
    try:
        from triton.runtime.cache import triton_key
    except ImportError:  # pragma: no cover - older layouts
        from triton.compiler.compiler import triton_key
    return triton_key


_KEY_LOCK = threading.Lock()


def installation_key() -> str:
    """Triton's key of its own installation, computed once per process: every process's first
    `triton.compile` (a cache hit included) hashes Triton's sources and its ~500 MB `libtriton.so` for it
    (0.3-1 s). The parent starts it in a background thread while the graph is lowered; the compile threads
    that ask before it is done wait for that one computation (`triton_key`'s lru cache has no lock, so each
    of them would hash the library again) and pass it to the compile workers (`adopt_installation_key`)."""
    with _KEY_LOCK:
        return _key_function()()


def key_origin() -> str:
    """What identifies the installation a key was computed for: a worker adopts its parent's key only for
    the same Triton (same files: the worker runs the parent's interpreter with the parent's import path)."""
    function = _key_function()
    return f"{triton.__version__}:{os.path.abspath(triton.__file__)}:{function.__module__}.{function.__qualname__}"


def adopt_installation_key(key: str, origin: str) -> bool:
    """In a compile worker: use the parent's `installation_key` instead of hashing Triton's installation
    again (16 workers x 500 MB read and hashed while the parent lowers its graph). Only when `origin`
    matches this process's Triton, and only where Triton reads the key function (module attributes that are
    that function); anything else keeps computing its own key, as before. Returns whether it was adopted."""
    if origin != key_origin() or not key.startswith(triton.__version__):
        return False
    original = _key_function()

    @functools.lru_cache(None)
    def triton_key() -> str:
        return key

    adopted = False
    for name in ("triton.runtime.cache", "triton.compiler.compiler", "triton.runtime.autotuner"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "triton_key", None) is original:
            module.triton_key = triton_key
            adopted = True
    return adopted


@functools.lru_cache(None)
def _backend(target):
    from triton.compiler.compiler import make_backend
    return make_backend(target)


def compile_kernel(fn, signature: dict, constexprs: dict, divisible: tuple[int, ...], num_warps: int,
                   num_stages: int, device_index: int | None = None, target=None, fp_fusion: bool = True):
    """Compile `fn` (a JITFunction) for `signature` ({param: "*fp32" | "i32" | "constexpr"}) with the
    given constexpr values ({param: value}). Parameters whose index is in `divisible` are promised to be
    multiples of 16 (pointers: 16-byte aligned): what lets Triton vectorise loads and masks. Returns a
    CompiledKernel (not yet loaded). `target` (a GPUTarget) allows compiling without a GPU. `fp_fusion=False`
    forbids contracting a multiply and an add into one FMA (see render.rounds_to_half)."""
    from triton.compiler import ASTSource
    target = target or get_target(device_index)
    backend = _backend(target)
    attrs = {(i,): backend.parse_attr("D") for i in divisible}
    src = ASTSource(fn, signature, {(fn.arg_names.index(k),): v for k, v in constexprs.items()}, attrs)
    return triton.compile(src, target=target, options={"num_warps": num_warps, "num_stages": num_stages,
                                                       "enable_fp_fusion": fp_fusion})


def load_compiled(compiled, device_index: int):
    """Load the binary on the device (cubin into the context; on 3.6 also builds the C launcher) and
    return (runner, function, packed_metadata) for `launch`."""
    import torch
    guard_launcher_loads()
    with torch.cuda.device(device_index):
        compiled._init_handles()
    return compiled.run, compiled.function, compiled.packed_metadata


def prebuild_launcher(compiled) -> bool:
    """Build Triton 3.6's C launcher for `compiled`'s signature into Triton's cache now, without loading the
    kernel: 3.6 runs the C compiler for it (~0.1 s, one per distinct signature: ~50 in a ResNet-50 training
    step) when the kernel is first loaded, which happens on the thread that first launches it. Compile
    workers call this after compiling, so the parent's load finds the module in the cache (its key is the
    launcher's source, the same in both processes). Needs no CUDA context. False where there is nothing to
    build (3.8's launcher is generic) or the build failed (the parent then builds it, as before)."""
    if not TRITON_VERSION.startswith("3.6."):
        return False
    try:
        from triton.backends.nvidia.driver import CudaLauncher
        CudaLauncher(compiled.src, compiled.metadata)
    except Exception:  # noqa: BLE001 - an optimisation only: the parent's load builds what is missing
        return False
    return True


def direct_launch(runner):
    """Skip the Python layer of Triton 3.6's `CudaLauncher.__call__` (two closures and scratch checks per
    launch) when the kernel needs no scratch memory: returns (launch, extra) so that
    ``launch(gx, gy, gz, stream, function, *extra, metadata, launch_metadata, enter, exit, *args)`` does
    exactly what ``runner(gx, gy, gz, stream, function, metadata, ...)`` does. None when not applicable
    (other versions keep the plain runner). FUSE_ALL_TRITON_DIRECT_LAUNCH=0 turns it off."""
    if os.environ.get("FUSE_ALL_TRITON_DIRECT_LAUNCH", "1") == "0" or not TRITON_VERSION.startswith("3.6."):
        return None
    if type(runner).__name__ != "CudaLauncher" or not hasattr(runner, "launch"):
        return None
    if getattr(runner, "global_scratch_size", 1) or getattr(runner, "profile_scratch_size", 1):
        return None
    return runner.launch, (runner.launch_cooperative_grid, runner.launch_pdl, None, None)


def launcher_param_count(runner) -> int | None:
    """How many kernel parameters (constexprs included) Triton's launcher `runner` itself takes, read from the
    launcher, not from what we asked Triton to compile: the check that a compiled variant and the argument list
    our launch passes belong together (runtime.TritonKernel.compiled). None when it cannot tell.

    3.6 builds one C launcher per signature, ``launch(gx, gy, gz, stream, function, cooperative, pdl,
    global_scratch, profile_scratch, metadata, launch_metadata, enter, exit, *params)``, parsed with one
    PyArg_ParseTuple: called with no argument it fails before doing anything (its only earlier step makes a
    CUDA context current if none is) with "function takes exactly N arguments (0 given)". 3.8's launcher is
    generic, driven by one annotation per parameter (`arg_annotations`)."""
    import re

    annotations = getattr(runner, "arg_annotations", None)
    if annotations is not None:
        try:   # 3.8 appends its sanitizer's pointer itself when that is on
            return len(annotations) - bool(getattr(runner, "gsan_enabled", False))
        except TypeError:
            return None
    launch = getattr(runner, "launch", None)
    if type(runner).__name__ != "CudaLauncher" or launch is None:
        return None
    try:
        from triton.backends.nvidia import driver as nvidia_driver
        fixed = nvidia_driver._BASE_ARGS_FORMAT_LEN
    except (ImportError, AttributeError):
        return None
    try:
        launch()
    except TypeError as error:
        taken = re.search(r"takes exactly (\d+) arguments? \(0 given\)", str(error))
        return int(taken.group(1)) - fixed if taken else None
    except Exception:  # noqa: BLE001 - only a check: no answer rather than a failed compile
        return None
    return None


def launcher_library(runner) -> str | None:
    """The shared library Triton 3.6's per-signature launcher's C code really lives in (`dladdr` of the method
    table its builtin `launch` points to), for error reports; None when it cannot tell (3.8's generic
    launcher, other platforms). Not `launch.__self__.__file__`: CPython rewrites that module's dict when
    another launcher file is loaded again (`guard_launcher_loads`)."""
    import ctypes
    import sys
    import sysconfig

    launch = getattr(runner, "launch", None)
    if (hasattr(runner, "arg_annotations") or type(launch).__name__ != "builtin_function_or_method"
            or sys.implementation.name != "cpython" or sysconfig.get_config_var("Py_GIL_DISABLED")
            or not sys.platform.startswith("linux")):
        return None

    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]
    try:
        # PyCFunctionObject: PyObject_HEAD, then `PyMethodDef *m_ml` (CPython 3.8-3.14 with the GIL)
        method_def = ctypes.c_void_p.from_address(id(launch) + object.__basicsize__).value
        info = DlInfo()
        libc = ctypes.CDLL(None)
        libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
        if not method_def or not libc.dladdr(ctypes.c_void_p(method_def), ctypes.byref(info)) or not info.dli_fname:
            return None
        return os.fsdecode(info.dli_fname)
    except (OSError, AttributeError, ValueError):
        return None


def launch_hooks():
    """Triton's profiler hooks, or (None, None) when none is installed: both versions keep an empty
    `HookChain` there, and passing None skips two Python calls per launch (Inductor does the same)."""
    try:
        from triton import knobs
        enter, exit_ = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
    except (ImportError, AttributeError):  # pragma: no cover
        from triton.compiler.compiler import CompiledKernel
        enter, exit_ = CompiledKernel.launch_enter_hook, CompiledKernel.launch_exit_hook

    def active(hook):
        return hook if hook is not None and getattr(hook, "calls", True) else None
    return active(enter), active(exit_)


def stream_getter():
    """A fast `device_index -> raw CUDA stream` function (torch's current stream, as Triton uses)."""
    import torch
    try:
        return torch._C._cuda_getCurrentRawStream
    except AttributeError:  # pragma: no cover
        return lambda idx: torch.cuda.current_stream(idx).cuda_stream


def current_device_getter():
    import torch
    return getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)


def cache_dir() -> str:
    """Triton's own kernel cache (reused for warm starts)."""
    try:
        from triton import knobs
        return knobs.cache.dir
    except (ImportError, AttributeError):  # pragma: no cover
        return os.environ.get("TRITON_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".triton", "cache"))


def secure_cache_dir() -> str:
    """Triton loads compiled kernels from its cache folder: when that folder exists but another user owns
    it or may write to it, point Triton at `<fuse-all cache root>/triton/kernels` instead, with a warning
    (the rules of `fuse_all_ir.cache_dirs`). Returns the folder Triton uses."""
    import logging

    from fuse_all_ir import UnsafeDirectory, caches_disabled, check_private, private_dir

    path = cache_dir()
    if caches_disabled():   # for measuring: Triton compiles into a fresh folder, reads nothing it cached
        replacement = str(private_dir("triton", "kernels"))
        _set_triton_cache_dir(replacement)
        return replacement
    try:
        if os.path.isdir(path):
            check_private(path, tighten=False)
        return path
    except UnsafeDirectory as why:
        replacement = str(private_dir("triton", "kernels"))
        logging.getLogger("fuse_all").warning("fuse-all: not letting Triton load kernels from %s (%s); "
                                              "using %s", path, why, replacement)
    _set_triton_cache_dir(replacement)
    return replacement


def _set_triton_cache_dir(path: str) -> None:
    try:
        from triton import knobs
        knobs.cache.dir = path
    except (ImportError, AttributeError):  # pragma: no cover - older layouts read the variable
        os.environ["TRITON_CACHE_DIR"] = path


def warm_driver() -> None:
    """Initialise Triton's driver once on the calling thread: its lazy set-up is not thread-safe. Also
    makes Triton's loading of its C modules safe for our compile threads (`guard_launcher_loads`)."""
    from triton.runtime import driver
    guard_launcher_loads()
    driver.active.get_current_target()


def guard_launcher_loads() -> bool:
    """Every Triton launcher module is named `__triton_launcher` (3.6 builds one per signature), and CPython
    keeps one module object per name for single-phase C modules: loading a launcher file CPython loaded
    before returns `sys.modules["__triton_launcher"]`, whatever launcher that is, with its dict overwritten
    by this launcher's functions (3.11-3.13: `import_find_extension` -> `import_add_module` + m_copy
    update). Triton's CudaLauncher reads `mod.launch` after the load returns; a compile thread that loads
    another launcher in between (our compile threads load variants in parallel) rewrites that module, and
    the kernel keeps the other launcher: "function takes exactly 16 arguments (25 given)" on its first
    launch (the H200, Triton 3.6), or the wrong code when the arities agree. So Triton's loader is wrapped:
    under one lock it loads, then hands out a private copy of the module, which no later load rewrites.
    Idempotent; False when Triton has no such loader."""
    import threading
    import types

    try:
        from triton.runtime import build
    except ImportError:  # pragma: no cover
        return False
    load = getattr(build, "_load_module_from_path", None)
    if load is None:
        return False
    if getattr(load, "fuse_all_private_copy", False):
        return True
    lock = threading.Lock()

    def load_private_copy(name, path):
        with lock:
            shared = load(name, path)
            private = types.ModuleType(shared.__name__, shared.__doc__)
            private.__dict__.update(shared.__dict__)
        return private

    load_private_copy.fuse_all_private_copy = True
    load_private_copy.__wrapped__ = load
    build._load_module_from_path = load_private_copy
    return True


def tl_dtype_name(dtype: str) -> str:
    """IR dtype name -> `tl.<name>` spelling."""
    return {"bool": "int1"}.get(dtype, dtype)


def pointer_type(dtype: str) -> str:
    """IR dtype name -> Triton signature pointer type."""
    return "*" + {"bool": "i1", "uint8": "u8", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
                  "float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64"}[dtype]


__all__ = ["tl", "libdevice", "interpret_mode", "compile_kernel", "load_compiled", "launch_hooks",
           "launcher_param_count", "launcher_library", "guard_launcher_loads",
           "stream_getter", "current_device_getter", "cache_dir", "secure_cache_dir", "warm_driver",
           "installation_key",
           "TRITON_VERSION"]

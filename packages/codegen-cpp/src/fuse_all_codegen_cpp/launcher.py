"""Kernel launches from the host program without ctypes: a small CPython extension, built once per machine
and cached like a kernel library, whose launcher objects take the tensors and sizes themselves.

A ctypes launch costs the host program `t.data_ptr()` per buffer (a method call each), ctypes' argument
conversion and libffi: ~1.2 us per kernel with 4 buffers, ~0.05 ms per call of MobileNetV3-small's 45
kernels. The extension's launcher is one vectorcall: it reads each tensor's data pointer through the C
function Inductor's kernels use (`torch._C._dynamo.guards._torchinductor_pyobject_tensor_data_ptr`), each
size with `PyLong_AsLongLong`, and calls the kernel's packed entry point
`<kernel>__packed(void* const* pointers, const int64_t* sizes)` (emitted beside every kernel by
`target.py`) with the GIL released, as ctypes did. A non-tensor argument is a `TypeError`; tensor
subclasses go through their own `data_ptr()` method, as the ctypes path did.

Where the extension cannot be built or loaded (no Python headers, no compiler, a torch without that C
function), and with the caches disabled, `kernel_launcher` returns None and `CppLibrary.launcher` falls
back to the ctypes path.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.machinery
import importlib.util
import logging
import sys
import sysconfig
import threading
from pathlib import Path

log = logging.getLogger("fuse_all")

MODULE = "fuse_all_cpu_launch"
MAX_ARGUMENTS = 1024

SOURCE = r'''
// fuse-all: kernel launchers for host programs (fuse_all_codegen_cpp/launcher.py)
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <exception>

typedef void* (*tensor_data_ptr_fn)(PyObject*);
typedef void (*packed_kernel)(void* const*, const int64_t*);

static tensor_data_ptr_fn tensor_data_ptr = nullptr;
static PyTypeObject* tensor_type = nullptr;      // torch.Tensor
static PyTypeObject* parameter_type = nullptr;   // torch.nn.Parameter

// A plain tensor's pointer through torch's C function; a tensor subclass's through its own `data_ptr()`
// method (which a subclass may override or refuse).
static int data_pointer(PyObject* obj, void** out) {
    PyTypeObject* type = Py_TYPE(obj);
    if (type == tensor_type || type == parameter_type) {
        try {
            *out = tensor_data_ptr(obj);
            return 0;
        } catch (const std::exception& e) {
            PyErr_SetString(PyExc_RuntimeError, e.what());
        } catch (...) {
            PyErr_SetString(PyExc_RuntimeError, "tensor has no data pointer");
        }
        return -1;
    }
    PyObject* address = PyObject_CallMethod(obj, "data_ptr", nullptr);
    if (address == nullptr) return -1;
    *out = PyLong_AsVoidPtr(address);
    Py_DECREF(address);
    return (*out == nullptr && PyErr_Occurred()) ? -1 : 0;
}

enum { MAX_ARGUMENTS = @MAX_ARGUMENTS@, ON_STACK = 32 };

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    packed_kernel kernel;
    Py_ssize_t n_pointers, n_sizes;
    PyObject* name;
} Launcher;

static PyObject* launch(PyObject* self_, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
    Launcher* self = (Launcher*)self_;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) != 0) {
        PyErr_Format(PyExc_TypeError, "kernel %U takes no keyword arguments", self->name);
        return nullptr;
    }
    if (n != self->n_pointers + self->n_sizes) {
        PyErr_Format(PyExc_TypeError, "kernel %U takes %zd tensors and %zd sizes, got %zd arguments",
                     self->name, self->n_pointers, self->n_sizes, n);
        return nullptr;
    }
    void* pointers_on_stack[ON_STACK];
    int64_t sizes_on_stack[ON_STACK];
    void** pointers = self->n_pointers <= ON_STACK ? pointers_on_stack
                                                   : (void**)PyMem_Malloc(sizeof(void*) * self->n_pointers);
    int64_t* sizes = self->n_sizes <= ON_STACK ? sizes_on_stack
                                               : (int64_t*)PyMem_Malloc(sizeof(int64_t) * self->n_sizes);
    PyObject* result = nullptr;
    if (pointers == nullptr || sizes == nullptr) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < self->n_pointers; ++i) {
        if (!PyObject_TypeCheck(args[i], tensor_type)) {
            PyErr_Format(PyExc_TypeError, "kernel %U: argument %zd must be a tensor, got %s", self->name, i,
                         Py_TYPE(args[i])->tp_name);
            goto done;
        }
        if (data_pointer(args[i], &pointers[i]) < 0) goto done;
    }
    for (Py_ssize_t j = 0; j < self->n_sizes; ++j) {
        long long value = PyLong_AsLongLong(args[self->n_pointers + j]);
        if (value == -1 && PyErr_Occurred()) goto done;
        sizes[j] = (int64_t)value;
    }
    Py_BEGIN_ALLOW_THREADS
    self->kernel(pointers, sizes);
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    if (pointers != pointers_on_stack) PyMem_Free(pointers);
    if (sizes != sizes_on_stack) PyMem_Free(sizes);
    return result;
}

static void launcher_dealloc(PyObject* self) {
    Py_XDECREF(((Launcher*)self)->name);
    Py_TYPE(self)->tp_free(self);
}

static PyObject* launcher_repr(PyObject* self) {
    return PyUnicode_FromFormat("<fuse-all kernel launcher %U>", ((Launcher*)self)->name);
}

static PyTypeObject LauncherType = {PyVarObject_HEAD_INIT(nullptr, 0)};

static PyObject* make_launcher(PyObject*, PyObject* args) {
    PyObject* name;
    unsigned long long address;
    Py_ssize_t n_pointers, n_sizes;
    if (!PyArg_ParseTuple(args, "UKnn", &name, &address, &n_pointers, &n_sizes)) return nullptr;
    if (tensor_data_ptr == nullptr) {
        PyErr_SetString(PyExc_RuntimeError, "setup() was not called");
        return nullptr;
    }
    if (address == 0 || n_pointers < 0 || n_sizes < 0 || n_pointers + n_sizes > MAX_ARGUMENTS) {
        PyErr_SetString(PyExc_ValueError, "bad kernel address or argument counts");
        return nullptr;
    }
    Launcher* self = PyObject_New(Launcher, &LauncherType);
    if (self == nullptr) return nullptr;
    self->vectorcall = launch;
    self->kernel = (packed_kernel)(uintptr_t)address;
    self->n_pointers = n_pointers;
    self->n_sizes = n_sizes;
    Py_INCREF(name);
    self->name = name;
    return (PyObject*)self;
}

static PyObject* setup(PyObject*, PyObject* args) {
    unsigned long long address;
    PyObject *tensor, *parameter;
    if (!PyArg_ParseTuple(args, "KO!O!", &address, &PyType_Type, &tensor, &PyType_Type, &parameter)) return nullptr;
    if (address == 0) {
        PyErr_SetString(PyExc_ValueError, "null data-pointer function");
        return nullptr;
    }
    Py_INCREF(tensor);
    Py_INCREF(parameter);
    Py_XDECREF((PyObject*)tensor_type);
    Py_XDECREF((PyObject*)parameter_type);
    tensor_type = (PyTypeObject*)tensor;
    parameter_type = (PyTypeObject*)parameter;
    tensor_data_ptr = (tensor_data_ptr_fn)(uintptr_t)address;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS, "setup(data_ptr_function_address, torch.Tensor, torch.nn.Parameter)"},
    {"make_launcher", make_launcher, METH_VARARGS, "make_launcher(name, packed_address, n_pointers, n_sizes)"},
    {nullptr, nullptr, 0, nullptr}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "@MODULE@", nullptr, -1, methods};

PyMODINIT_FUNC PyInit_@MODULE@(void) {
    LauncherType.tp_name = "@MODULE@.Launcher";
    LauncherType.tp_basicsize = sizeof(Launcher);
    LauncherType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
    LauncherType.tp_vectorcall_offset = offsetof(Launcher, vectorcall);
    LauncherType.tp_call = PyVectorcall_Call;
    LauncherType.tp_dealloc = launcher_dealloc;
    LauncherType.tp_repr = launcher_repr;
    if (PyType_Ready(&LauncherType) < 0) return nullptr;
    return PyModule_Create(&module_def);
}
'''.replace("@MODULE@", MODULE).replace("@MAX_ARGUMENTS@", str(MAX_ARGUMENTS))

_LOCK = threading.Lock()


def packed_name(kernel: str) -> str:
    """The packed entry point `target.py` emits beside each kernel function."""
    return f"{kernel}__packed"


def kernel_launcher(cdll: ctypes.CDLL, kernel: str, n_pointers: int, n_sizes: int):
    """A launcher for `kernel` of a loaded library that takes the tensors and sizes, or None (no packed
    entry point in the library, or no extension here: the caller uses ctypes)."""
    module = extension()
    if module is None or n_pointers + n_sizes > MAX_ARGUMENTS:
        return None
    try:
        address = ctypes.cast(getattr(cdll, packed_name(kernel)), ctypes.c_void_p).value
    except AttributeError:
        return None
    return module.make_launcher(kernel, address, n_pointers, n_sizes)


def extension():
    """The built and imported extension module, or None where it cannot be had (said once, at debug).
    None with the caches disabled (`FUSE_ALL_FORCE_DISABLE_CACHES=1`, for measuring compile time): building
    it in a fresh folder would add ~2 s to every process's first compile."""
    from fuse_all_ir import caches_disabled
    if caches_disabled():
        return None
    return _extension()


@functools.lru_cache(None)
def _extension():
    with _LOCK:
        try:
            import torch
            address = getattr(torch._C._dynamo.guards, "_torchinductor_pyobject_tensor_data_ptr", None)
            if not address:
                raise RuntimeError("this torch has no _torchinductor_pyobject_tensor_data_ptr")
            module = _load()
            module.setup(int(address), torch.Tensor, torch.nn.Parameter)
            return module
        except Exception as exc:  # noqa: BLE001 - only a speed-up: ctypes launches instead
            log.debug("fuse-all: C++ kernels launch through ctypes (%s: %s)", type(exc).__name__, exc)
            return None


def _load():
    from fuse_all_ir import exclusive_lock, read_regular_file

    from . import compiler
    include = sysconfig.get_paths().get("include")
    if not include or not (Path(include) / "Python.h").is_file():
        raise RuntimeError(f"no Python.h under {include}")
    command = compiler.find_compiler()
    flags = ["-O2", "-shared", "-fPIC", f"-I{include}"]
    python = f"{sys.version}\n{sysconfig.get_config_var('SOABI') or ''}"
    key = compiler.cache_key(f"{SOURCE}\n{python}", command, flags, libraries=[])
    directory = compiler.cache_dir()
    so, checksum = directory / f"launch-{key}.so", directory / f"launch-{key}.sha256"
    module = _import_checked(so, checksum, read_regular_file)
    if module is None:
        with exclusive_lock(directory / f"launch-{key}.lock", None, what="the kernel launcher extension"):
            module = _import_checked(so, checksum, read_regular_file)
            if module is None:
                compiler.compile_library(SOURCE, so, command, flags)
                compiler._write_atomic(checksum, hashlib.sha256(so.read_bytes()).hexdigest().encode())
                module = _import_checked(so, checksum, read_regular_file)
    if module is None:
        raise RuntimeError(f"built {so} but it does not import")
    return module


def _import_checked(so: Path, checksum: Path, read_regular_file):
    """The module from `so` when it is this user's regular file and matches its checksum, else None."""
    expected, data = read_regular_file(checksum), read_regular_file(so)
    if expected is None or data is None:
        return None
    if hashlib.sha256(data).hexdigest() != expected.decode(errors="replace").strip():
        return None
    loader = importlib.machinery.ExtensionFileLoader(MODULE, str(so))
    spec = importlib.util.spec_from_file_location(MODULE, so, loader=loader)
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except ImportError:
        return None
    return module

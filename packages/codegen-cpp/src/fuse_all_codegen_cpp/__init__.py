"""Renders fuse-all IR kernels to C++/OpenMP, compiles them (one translation unit per graph, one compiler
call, cached by content hash) and loads them with ctypes.

Names resolve lazily: loading a cached library (`load_library`) imports neither sympy nor the IR package.
"""
from .__about__ import __version__

_EXPORTS = {
    "CppTarget": "target",
    "CppChoices": "choices",
    "render_translation_unit": "render",
    "render_kernel": "render",
    "load_library": "compiler",
    "cache_dir": "compiler",
    "CppCompilerNotFound": "compiler",
    "CppCompileError": "compiler",
    "UnsafeCacheDir": "compiler",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name):
    if name in _EXPORTS:
        import importlib
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(__all__)

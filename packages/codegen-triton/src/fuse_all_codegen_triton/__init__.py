"""Renders fuse-all IR kernels to Triton, compiles, autotunes and launches them.

    from fuse_all_codegen_triton import TritonTarget
    source = render_host_program(program, TritonTarget())        # fuse_all_ir.host
    module = load_host_program(source, folder)                      # starts compiling every kernel
    wait_compiled(module)                                           # optional: surface compile errors now
    outputs = module.call(inputs)

Names resolve lazily: importing the package (the target registry does, to read `registration.TARGET`)
does not import Triton.
"""
from .__about__ import __version__

_EXPORTS = {
    "TritonTarget": "target",
    "TritonChoices": "choices",
    "TritonKernel": "runtime",
}
__all__ = ["__version__", "TritonTarget", "TritonChoices", "TritonKernel", "wait_compiled", "unsupported_device"]


def wait_compiled(module) -> None:
    """Block until every kernel of a loaded host program has compiled (they compile in parallel in the
    background from the moment the module is imported); raises the first compile error."""
    from .runtime import TritonKernel

    for value in list(vars(module).values()):
        if isinstance(value, TritonKernel):
            value.wait_compiled()


def unsupported_device(device: str) -> str | None:
    """Why kernels cannot run on `device` in this process, or None when they can: CPU tensors need
    Triton's interpreter (`TRITON_INTERPRET=1` set before triton is imported)."""
    from ._triton_compat import interpret_mode

    if device.startswith("cpu") and not interpret_mode():
        return "Triton runs CPU tensors only in its interpreter (set TRITON_INTERPRET=1 before importing triton)"
    return None


def __getattr__(name):
    if name in _EXPORTS:
        import importlib
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(__all__)

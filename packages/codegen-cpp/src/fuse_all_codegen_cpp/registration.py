"""The C++ target's registration with fuse-all (`fuse_all_ir.targets`): the entry point
``fuse_all.targets: cpp = fuse_all_codegen_cpp.registration:TARGET`` names `TARGET`. Light on purpose:
the renderer, the compiler and the choices are imported when a graph needs them."""
from __future__ import annotations

from fuse_all_ir import TargetSpec


def _choices(options):
    from .choices import CppChoices
    return CppChoices()


def _create(options, choices):
    from .target import CppTarget
    return CppTarget(choices)


TARGET = TargetSpec(
    name="cpp",
    device_types=("cpu",),
    create=_create,
    choices=_choices,
    source_language="cpp",
    kernel_suffix=".cpp",
    cache_dirs=("cpp",),
    description="C++/OpenMP kernels, one translation unit per graph",
)

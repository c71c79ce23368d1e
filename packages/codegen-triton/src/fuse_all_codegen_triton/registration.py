"""The Triton target's registration with fuse-all (`fuse_all_ir.targets`): the entry point
``fuse_all.targets: triton = fuse_all_codegen_triton.registration:TARGET`` names `TARGET`. Light on
purpose: Triton itself is imported when a graph needs it (`unsupported` imports it to ask about the
interpreter only when asked about a CPU device)."""
from __future__ import annotations

from fuse_all_ir import TargetSpec


def _choices(options):
    from .choices import TritonChoices
    return TritonChoices()


def _create(options, choices):
    from .target import TritonTarget
    return TritonTarget(autotune=getattr(options, "autotune", True),
                        max_autotune=getattr(options, "max_autotune", False), choices=choices)


def _unsupported(device: str) -> str | None:
    kind = device.split(":", 1)[0]
    if kind == "xpu":
        import torch
        if not (hasattr(torch, "xpu") and torch.xpu.is_available()):
            return "xpu tensors but torch.xpu is not available"
        return None
    if kind == "cpu":
        from . import unsupported_device
        return unsupported_device(device)
    if kind != "cuda":
        return "it runs on cuda and xpu tensors (cpu in Triton's interpreter) only"
    return None


TARGET = TargetSpec(
    name="triton",
    device_types=("cuda", "xpu"),
    create=_create,
    choices=_choices,
    source_language="python",
    kernel_suffix=".py",
    cache_dirs=("triton",),
    unsupported=_unsupported,
    description="Triton kernels, autotuned; CPU tensors only under TRITON_INTERPRET=1",
)

"""`TritonTarget`: the `KernelTarget` (see `fuse_all_ir.host`) that renders kernels as Triton.

The prelude it writes into ``output_code.py`` holds, per kernel, the readable ``@triton.jit`` function and
one ``TritonKernel`` launcher object; a kernel step is the one line ``<name>_launcher.run(<buffers>,
<sizes>)``. Creating the launchers (importing the module) starts compiling every kernel in the background.
"""
from __future__ import annotations

import pprint

from fuse_all_ir.program import Kernel, Program

from .choices import PERSISTENT_MAX_RNUMEL, TritonChoices
from .render import RenderedKernel, RenderOptions, render_kernel

_PRELUDE_IMPORTS = """\
import triton
import triton.language as tl
from fuse_all_codegen_triton.runtime import TritonKernel, libdevice
from fuse_all_codegen_triton import helpers as fa"""


class TritonTarget:
    """Options:
    autotune: benchmark the candidate configs on the first call (False: heuristic config only, one
        compile per kernel; always off under TRITON_INTERPRET=1).
    max_autotune: a wider candidate space (more compiles, slower first call).
    choices: fusion heuristics and kernel shapes; by default `TritonChoices` made of:
    persistent_max_rnumel: reductions over at most this many (concrete) elements keep rows in registers.
    rblock / force_looped: force looped reductions / their RBLOCK (tests).
    """
    language = "triton"

    def __init__(self, *, autotune: bool = True, max_autotune: bool = False,
                 persistent_max_rnumel: int = PERSISTENT_MAX_RNUMEL, rblock: int | None = None,
                 force_looped: bool = False, choices: TritonChoices | None = None):
        self.autotune = autotune
        if choices is None:
            choices = TritonChoices(persistent_max_rnumel=persistent_max_rnumel, rblock=rblock,
                                    force_looped=force_looped)
        self.choices = choices
        self.options = RenderOptions(choices=choices, max_autotune=max_autotune)
        self._rendered: dict[int, tuple[Kernel, RenderedKernel]] = {}

    def render(self, kernel: Kernel, program: Program | None = None) -> RenderedKernel:
        """Render (cached per kernel object; the program supplies buffer dtypes and size hints)."""
        cached = self._rendered.get(id(kernel))
        if cached is not None and cached[0] is kernel:
            return cached[1]
        dtypes, hints = {}, {}
        if program is not None:
            dtypes = {name: spec.dtype for name, spec in program.buffers.items()}
            dtypes.update({i.name: i.spec.dtype for i in program.inputs if i.kind == "tensor" and i.spec})
            hints = dict(program.size_hints)
        rendered = render_kernel(kernel, dtypes, hints, self.options)
        self._rendered[id(kernel)] = (kernel, rendered)
        return rendered

    def render_prelude(self, program: Program) -> str:
        parts = [_PRELUDE_IMPORTS]
        for kernel in program.kernels.values():
            r = self.render(kernel, program)
            int64_fn = f"{kernel.name}_i64" if r.source_int64 else "None"
            spec = pprint.pformat(r.spec, width=110, sort_dicts=False)
            parts.append(r.source)
            if r.source_int64:
                parts.append(r.source_int64)
            parts.append(f"{kernel.name}_launcher = TritonKernel(\n    {kernel.name}, {_indent(spec)},\n"
                         f"    {int64_fn}, autotune_configs={self.autotune!r}, device={program.device!r})")
        return "\n\n\n".join(parts)

    def render_launch(self, kernel: Kernel, buffer_args: list[str], size_args: list[str]) -> str:
        return f"{kernel.name}_launcher.run({', '.join([*buffer_args, *size_args])})"

    def kernel_source(self, kernel: Kernel) -> str:
        return self.render(kernel).source


def _indent(text: str) -> str:
    return text.replace("\n", "\n    ")

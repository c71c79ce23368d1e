"""`TritonTarget`: the `KernelTarget` (see `fuse_all_ir.host`) that renders kernels as Triton.

The prelude it writes into ``output_code.py`` holds, per kernel, the readable ``@triton.jit`` function and
one ``TritonKernel`` launcher object; a kernel step is the one line ``<name>_launcher.run_on(_fa_stream,
<buffers>, <sizes>)`` (the stream read once per call: `render_call_prologue`). Creating the launchers (importing the module) starts compiling every kernel in the background.
"""
from __future__ import annotations

import pprint

from fuse_all_ir import kernel_sharing
from fuse_all_ir.program import Kernel, Program

from .choices import PERSISTENT_MAX_RNUMEL, TritonChoices
from .render import RenderedKernel, RenderOptions, render_kernel

_PRELUDE_IMPORTS = """\
import triton
import triton.language as tl
from fuse_all_codegen_triton.runtime import TritonKernel, libdevice, raw_stream as _fa_raw_stream
from fuse_all_codegen_triton import helpers as fa"""


MATMUL_NAMESPACE = "fuse_all_triton."


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
        self.shared: dict[str, str] = {}   # kernel -> the kernel whose JIT function (and compiles) it uses
        _start_compile_workers()

    def render(self, kernel: Kernel, program: Program | None = None, _tables: tuple | None = None) -> RenderedKernel:
        """Render (cached per kernel object; the program supplies buffer dtypes and size hints; `_tables`:
        those two, when the caller already has them)."""
        cached = self._rendered.get(id(kernel))
        if cached is not None and cached[0] is kernel:
            return cached[1]
        dtypes, hints = {}, {}
        if _tables is not None:
            dtypes, hints = _tables
        elif program is not None:
            dtypes = program.buffer_dtypes()
            hints = dict(program.size_hints)
        rendered = render_kernel(kernel, dtypes, hints, self.options)
        self._rendered[id(kernel)] = (kernel, rendered)
        return rendered

    def render_prelude(self, program: Program) -> str:
        parts = [_PRELUDE_IMPORTS]
        if any(str(getattr(step, "target", "")).startswith(MATMUL_NAMESPACE) for step in program.steps):
            parts.append("import fuse_all_codegen_triton.matmul   # registers torch.ops.fuse_all_triton.matmul")
        # the program's tables once, not once per kernel (ResNet-50's training backward: 230 kernels over
        # 900 buffers); rendering reads them only
        tables = (program.buffer_dtypes(), dict(program.size_hints))
        rendered = {kernel.name: self.render(kernel, program, tables) for kernel in program.kernels.values()}
        # one JIT function per distinct kernel (kernel_sharing): its variants compile once for all users
        self.shared = kernel_sharing.share(rendered, lambda name: _normalized(rendered[name]))
        for kernel in program.kernels.values():
            r = rendered[kernel.name]
            same = self.shared[kernel.name]
            int64_fn = f"{same}_i64" if r.source_int64 else "None"
            spec = pprint.pformat(r.spec, width=110, sort_dicts=False)
            if same == kernel.name:
                parts.append(r.source)
                if r.source_int64:
                    parts.append(r.source_int64)
            note = f"  # same code as {same}: one compile" if same != kernel.name else ""
            parts.append(f"{kernel.name}_launcher = TritonKernel({note}\n    {same}, {_indent(spec)},\n"
                         f"    {int64_fn}, autotune_configs={self.autotune!r}, device={program.device!r})")
        return "\n\n\n".join(parts)

    def render_call_prologue(self, program: Program) -> list[str]:
        """Once per call, before any launch: the stream every `run_on` launches on. A CUDA program runs
        its body with its device current (the host program checks), so the stream is that device's."""
        device = program.device
        if device.split(":")[0] != "cuda":
            return ["_fa_stream = None"]     # the interpreter (and Triton's own launcher) find it themselves
        index = device.split(":")[1] if ":" in device else "0"
        return [f"_fa_stream = _fa_raw_stream({int(index)})"]

    def render_launch(self, kernel: Kernel, buffer_args: list[str], size_args: list[str]) -> str:
        return f"{kernel.name}_launcher.run_on({', '.join(['_fa_stream', *buffer_args, *size_args])})"

    def kernel_source(self, kernel: Kernel) -> str:
        return self.render(kernel).source


def _start_compile_workers() -> None:
    """On a GPU, start the compile workers while the graph is rendered (compiler.start_workers)."""
    from . import _triton_compat as compat
    if compat.interpret_mode():
        return
    import torch
    if torch.cuda.is_available():
        from .compiler import start_workers
        start_workers()


def _normalized(r: RenderedKernel) -> str:
    """A kernel's JIT functions and launch spec with its names set aside (comments, the function names, its
    size arguments' names: each launcher passes its own values by position). The size hints only pick the
    variant compiled first (each launch checks its own arguments): kernels differing in them still share,
    as the dropout kernels of BERT's layers do, each reading its seed at a position given as an argument."""
    sizes = list(r.spec["sizes"])
    spec = {k: v for k, v in r.spec.items() if k not in ("name", "source_hash", "size_hints")}
    texts = [kernel_sharing.normalized(r.source, r.name, sizes, "#")]
    if r.source_int64:
        texts.append(kernel_sharing.normalized(r.source_int64, r.name + "_i64", sizes, "#"))
    texts.append(kernel_sharing.normalized(repr(spec), "", sizes, "#"))
    return "\n".join(texts)


def _indent(text: str) -> str:
    return text.replace("\n", "\n    ")

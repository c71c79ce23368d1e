"""`CppTarget`: the C++ codegen as a `fuse_all_ir.host.KernelTarget`.

The host program's prelude embeds the whole translation unit as a string and loads it through
`load_library` (a hash and a dlopen when it is cached), then binds one launcher per kernel: a launch passes
the tensors and int sizes themselves (`launcher.py`: one C call through each kernel's packed entry point,
or ctypes on `data_ptr()`s where the launcher extension is not available).
"""
from __future__ import annotations

import re

from fuse_all_ir import kernel_sharing
from fuse_all_ir.program import Kernel, Program

from .choices import CppChoices
from .launcher import packed_name
from .render import c_name, helper_sources, render_kernel, translation_unit


def _py_string(text: str) -> str:
    """A Python literal for `text`, readable (triple-quoted raw) whenever that is exact."""
    if "'''" not in text and not text.endswith("\\") and "\r" not in text:
        return "r'''" + text + "'''"
    return repr(text)


class CppTarget:
    """`choices`: fusion heuristics and kernel shapes (default `CppChoices()`)."""
    language = "cpp"

    def __init__(self, choices: CppChoices | None = None):
        self.choices = choices if choices is not None else CppChoices()
        self._sources: dict[int, tuple[Kernel, str]] = {}   # id(kernel) -> (kernel, its C++ function)
        self.shared: dict[str, str] = {}   # kernel -> the kernel whose compiled function it calls

    def render_prelude(self, program: Program) -> str:
        if not program.kernels:
            return "# no C++ kernels in this graph"     # don't pay a compiler call for an empty TU
        dtypes = program.buffer_dtypes()
        sources = {}
        for kernel in program.kernels.values():
            sources[kernel.name] = render_kernel(kernel, dtypes, program.size_hints, self.choices)
            self._sources[id(kernel)] = (kernel, sources[kernel.name])
        # one C++ function per distinct kernel (kernel_sharing): repeated blocks compile once
        self.shared = kernel_sharing.share(sources, lambda name: _normalized(c_name(name), sources[name]))
        unique = [text for name, text in sources.items() if self.shared[name] == name]
        code = "\n\n".join([*helper_sources(unique), *unique, *(packed_entry(text) for text in unique)])
        source = translation_unit(program.graph_id, code)
        lines = [
            "from fuse_all_codegen_cpp import load_library as _fa_load_library",
            "",
            f"_fa_cpp_source = {_py_string(source)}",
            "_fa_cpp = _fa_load_library(_fa_cpp_source)",
        ]
        for kernel in program.kernels.values():
            n_ptr = len(kernel.inputs) + len(kernel.outputs)
            same = self.shared[kernel.name]
            note = f"   # same code as {same}" if same != kernel.name else ""
            lines.append(f"{c_name(kernel.name)} = _fa_cpp.launcher({c_name(same)!r}, {n_ptr}, "
                         f"{len(kernel.size_symbols)}){note}")
        return "\n".join(lines)

    def render_launch(self, kernel: Kernel, buffer_args: list[str], size_args: list[str]) -> str:
        args = list(buffer_args) + list(size_args)
        return f"{c_name(kernel.name)}({', '.join(args)})"

    def kernel_source(self, kernel: Kernel) -> str:
        kept = self._sources.get(id(kernel))
        return kept[1] if kept is not None and kept[0] is kernel else render_kernel(kernel, choices=self.choices)


_SIGNATURE = re.compile(r'extern "C" void (\w+)\(([^)]*)\)')


def packed_entry(source: str) -> str:
    """`extern "C" void <kernel>__packed(void* const* p, const int64_t* s)`: the kernel of `source` called
    on an array of buffer addresses and one of sizes, the one signature the launcher extension calls
    (`launcher.py`)."""
    match = _SIGNATURE.search(source)
    if match is None:
        raise ValueError("no kernel signature in the rendered source")
    name, pointers, sizes = match.group(1), 0, 0
    args = []
    for param in (p.strip() for p in match.group(2).split(",") if p.strip()):
        kind = param.rsplit(None, 1)[0].replace("__restrict__", "").strip()
        if kind.endswith("*"):
            args.append(f"({kind})p[{pointers}]")
            pointers += 1
        else:
            args.append(f"({kind})s[{sizes}]")
            sizes += 1
    return (f'extern "C" void {packed_name(name)}(void* const* p, const int64_t* s) '
            f'{{ (void)p; (void)s; {name}({", ".join(args)}); }}')


def _normalized(name: str, source: str) -> str:
    """The kernel's C++ function with its name and parameters (buffers, sizes) renamed by position."""
    match = _SIGNATURE.search(source)
    params = [p.split()[-1] for p in match.group(2).split(",") if p.strip()] if match else []
    return kernel_sharing.normalized(source, name, params, "//")

"""Render a `Program` into its host program: a Python module (`output_code.py`) that allocates buffers and
runs kernels and ATen calls in order.

The module is what actually runs (the compiler imports it), so the file a user reads in the debug folder
is the code that ran. A codegen plugs in through `KernelTarget`: it renders the module prelude that defines
one launcher per kernel, and the one line that launches a kernel.

Under torch.profiler, `call` runs `_call_profiled` instead: the same steps, the call and each kernel launch
and ATen call in a profiler range (`profile_range_names`), so a trace shows our kernels by name and
`fuse_all.profiling` can map their time back to source lines. Without a profiler the cost is one check
of a module-level bool per call.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Protocol

import sympy
import torch

from ._torch_compat import real_tensor_mode
from .program import Alloc, BufferRef, ExternCall, Free, Kernel, KernelCall, Program, TensorSpec
from . import memory, sympy_functions
from .weight_layouts import weight_cache_sites


class KernelTarget(Protocol):
    """A codegen's renderer. Registered through a `fuse_all_ir.TargetSpec` (targets.py), whose `create`
    makes it; `choices` is the `FusionChoices` the Program was scheduled with and whose
    `choose_kernel_shape` the renderer follows."""
    language: str   # the target's registered name (TargetSpec.name): "cpp", "triton", ...
    choices: Any    # its FusionChoices (optional for a target without tuning: the neutral choices)

    def render_prelude(self, program: Program) -> str:
        """Python source run at import: defines a launcher for every kernel of `program`."""

    def render_launch(self, kernel: Kernel, buffer_args: list[str], size_args: list[str]) -> str:
        """One Python statement that runs `kernel` on the named buffers and size values."""

    def kernel_source(self, kernel: Kernel) -> str:
        """The kernel's source in the target language (for reports and the editor)."""

    # optional: `render_call_prologue(program) -> list[str]`, statements run once per call before the
    # first step (with the program's device current), e.g. reading the stream every launch uses


def _py_rules() -> dict:
    def call(name):
        return lambda p, e, a: f"{name}({', '.join(a)})"

    def infix(op):
        return lambda p, e, a: "(" + f" {op} ".join(p._operand_of(x, t) for x, t in zip(e.args, a)) + ")"
    return {
        "floordiv": infix("//"),
        "ceildiv": lambda p, e, a: f"(-(-{p._operand_of(e.args[0], a[0])} // {p._operand_of(e.args[1], a[1])}))",
        "modular_indexing": lambda p, e, a: (f"(({p._operand_of(e.args[0], a[0])} // "
                                             f"{p._operand_of(e.args[1], a[1])}) % {p._operand_of(e.args[2], a[2])})"),
        "mod": infix("%"),
        "int_truediv": infix("/"),
        "float_truediv": lambda p, e, a: f"(float({a[0]}) / float({a[1]}))",
        "max": call("max"), "min": call("min"),
        "pow_natural": infix("**"),
        "float_pow": lambda p, e, a: f"math.pow({a[0]}, {a[1]})",
        "trunc_to_int": lambda p, e, a: f"int({a[0]})",
        "trunc_to_float": lambda p, e, a: f"float(math.trunc({a[0]}))",
        "round_to_int": lambda p, e, a: f"round({a[0]})",
        "round_decimal": lambda p, e, a: f"round(float({a[0]}), {a[1]})",
        "floor_to_int": lambda p, e, a: f"math.floor({a[0]})",
        "ceil_to_int": lambda p, e, a: f"math.ceil({a[0]})",
        "to_float": call("float"),
        "identity": lambda p, e, a: f"({a[0]})",
        "abs": call("abs"),
        "where": lambda p, e, a: f"({a[1]} if {a[0]} else {a[2]})",
        "lshift": infix("<<"), "rshift": infix(">>"),
        "bitwise_and": infix("&"), "bitwise_or": infix("|"), "bitwise_xor": infix("^"),
        "is_non_overlapping_and_dense": lambda p, e, a: (
            "int(torch.fx.experimental.symbolic_shapes.eval_is_non_overlapping_and_dense("
            f"[{', '.join(a[:len(a) // 2])}], [{', '.join(a[len(a) // 2:])}]))"),
        **{fn: (lambda p, e, a, _m=fn.removeprefix("opaque_"): f"math.{_m}({a[0]})")
           for fn in sympy_functions.FUNCTIONS if fn.startswith("opaque_")},
    }


class PythonIndexPrinter(sympy_functions.SymbolicPrinter):
    """sympy -> Python source with the semantics torch gives each function (the host program's sizes,
    strides and SymInt/SymFloat values). The module imports `math` and `torch`."""
    language = "Python"
    RULES = _py_rules()

    def _operand_of(self, expr, text: str) -> str:
        """`//` and `%` bind tighter than `+` and `*`: bracket anything but a symbol or an integer."""
        return text if expr.is_Symbol or (expr.is_Integer and expr >= 0) else f"({text})"

    def _operand(self, expr) -> str:
        return self._operand_of(expr, self._print(expr))

    def exact_div(self, num, den):
        return f"(({num}) // ({den}))"

    def true_div(self, num, den):
        return f"(({num}) / ({den}))"

    def float_pow(self, base, exp):
        return f"math.pow({base}, {exp})"


_PRINTER = PythonIndexPrinter()


def py_index(expr) -> str:
    if isinstance(expr, int):
        return str(expr)
    return _py_index(sympy.sympify(expr))


@functools.lru_cache(maxsize=1 << 16)
def _py_index(expr) -> str:
    return _PRINTER.doprint(expr)


def py_tuple(exprs) -> str:
    items = [py_index(e) for e in exprs]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def py_literal(value: Any) -> str:
    """Python source for an extern call argument."""
    if isinstance(value, BufferRef):
        return _ref(value)
    if isinstance(value, sympy.Basic):
        return py_index(value)
    if isinstance(value, (list, tuple)):
        inner = ", ".join(py_literal(v) for v in value)
        if isinstance(value, tuple):
            return f"({inner}{',' if len(value) == 1 else ''})"
        return f"[{inner}]"
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, (torch.layout, torch.memory_format)):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "float('nan')"
        if value in (float("inf"), float("-inf")):
            return f"float({str(value)!r})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {py_literal(v)}" for k, v in value.items()) + "}"
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    raise TypeError(f"cannot render extern argument {value!r} of type {type(value).__name__}")


def _ref(ref: BufferRef) -> str:
    """An extern call's tensor argument: the buffer, or a view of it that lives only for the call
    (`reinterpret_tensor`: no dispatcher, no autograd record; its offset counts from the buffer's own)."""
    if ref.view is None:
        return ref.name
    v = ref.view
    return f"reinterpret_tensor({ref.name}, {py_tuple(v.size)}, {py_tuple(v.stride)}, {py_index(v.offset)})"


def _output_ref(ref: BufferRef) -> str:
    """A graph output: views go through `torch.as_strided`, the op autograd and AOTAutograd know, or
    through the traced view ops where the output carries them (`BufferRef.replay`)."""
    if ref.replay is not None:
        return _replayed_view(ref)
    if ref.view is None:
        return ref.name
    v = ref.view
    # as_strided's offset counts from the storage's start; view offsets count from the tensor's first element
    offset = f"{ref.name}.storage_offset()" + (f" + {py_index(v.offset)}" if v.offset != 0 else "")
    return f"as_strided({ref.name}, {py_tuple(v.size)}, {py_tuple(v.stride)}, {offset})"


def _replayed_view(ref: BufferRef) -> str:
    expr = ref.name
    for op_name, args, kwargs in ref.replay:
        if op_name == "getitem":
            expr = f"{expr}[{py_literal(args[0])}]"
            continue
        rendered = [expr] + [py_literal(a) for a in args] + [f"{k}={py_literal(v)}" for k, v in kwargs.items()]
        expr = f"torch.ops.{op_name}({', '.join(rendered)})"
    return expr


def _device_type(device: str) -> str:
    return device.split(":", 1)[0]


def _cuda_index(device: str) -> int | None:
    """The CUDA device a program's allocations go to (its calls run under a guard for it), else None."""
    if _device_type(device) != "cuda":
        return None
    return torch.device(device).index or 0


def _alloc(name: str, spec: TensorSpec, device: str) -> str:
    """`empty_strided_cpu` / `empty_strided_cuda` (see `runtime.py`); other devices the public call."""
    size, stride = py_tuple(spec.size), py_tuple(spec.stride)
    kind = _device_type(device)
    if kind in ("cpu", "cuda"):
        return f"{name} = empty_strided_{kind}({size}, {stride}, torch.{spec.dtype})"
    return f"{name} = empty_strided({size}, {stride}, dtype=torch.{spec.dtype}, device=_fa_device)"


def render_host_program(program: Program, target: KernelTarget) -> str:
    lines = [
        f"# Generated by fuse-all for graph {program.graph_id} on {program.device}.",
        "# Run it directly (`python output_code.py`) to call the graph on random inputs and time it.",
        "import math",
        "import torch",
        "from torch import empty_strided, as_strided",
        "from torch.autograd import profiler as _fa_profiler",
        "from fuse_all_ir.runtime import (ensure_layout, profile_range as _fa_range, reinterpret_tensor,",
        "                                 empty_strided_cpu, empty_strided_cuda, current_cuda_device)",
        "",
        target.render_prelude(program),
        "",
        f"_fa_device = torch.device({program.device!r})",
        *_extern_handles(program),
        *_weight_cache_slots(program),
    ]
    with real_tensor_mode():
        for name, value in program.constants.items():
            lines.append(f"{name} = torch.tensor({value.tolist()!r}, dtype={value.dtype}).reshape("
                         f"{tuple(value.shape)!r}).to({program.device!r})")
    # The hot path runs only when no profiler is on and (CUDA) the program's device is current; anything
    # else takes `_call_profiled`: profiler ranges, and a device guard for `empty_strided_cuda`.
    cuda_index = _cuda_index(program.device)
    slow = "_fa_profiler._is_profiler_enabled"
    if cuda_index is not None:
        slow += f" or current_cuda_device() != {cuda_index}"
    lines += ["", "", "def call(args):", f"    if {slow}:", "        return _call_profiled(args)"]
    plain, profiled = _render_call_bodies(program, target)
    lines += ["    " + line for line in plain]
    guard = "" if cuda_index is None else f"torch.cuda.device({cuda_index}), "
    lines += ["", "", "def _call_profiled(args):",
              f"    with {guard}_fa_range({graph_range_name(program.graph_id)!r}):"]
    lines += ["        " + line for line in profiled]
    lines += ["", "", _render_main(program)]
    source = "\n".join(lines) + "\n"
    missing = unresolved_names(source)
    if missing:
        raise HostProgramError(f"the host program of graph {program.graph_id} uses undefined names: "
                               f"{', '.join(sorted(missing))}")
    return source


class HostProgramError(RuntimeError):
    """The rendered host program would fail when run (raised while compiling, where the ATen fallback is)."""


def unresolved_names(source: str) -> set[str]:
    """Names the module reads that nothing defines (neither the module nor builtins): each one would be a
    NameError at run time, on the user's call. A static check (`symtable`, about a millisecond): running
    the program on the example inputs would catch more but costs a real run of every kernel."""
    import builtins
    import symtable

    top = symtable.symtable(source, "output_code.py", "exec")
    defined = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()
               or s.is_namespace()}
    missing, stack = set(), [top]
    while stack:
        table = stack.pop()
        stack.extend(table.get_children())
        for sym in table.get_symbols():
            name = sym.get_name()
            free_here = sym.is_global() or (table is top)
            if (sym.is_referenced() and free_here and name not in defined and not hasattr(builtins, name)):
                missing.add(name)
    return missing


def graph_range_name(graph_id: str) -> str:
    """The profiler range around one call of a graph's host program."""
    return f"fuse_all::{graph_id}"


def kernel_range_name(graph_id: str, kernel: str) -> str:
    return f"fuse_all::{graph_id}::{kernel}"


def extern_range_name(graph_id: str, index: int, target: str) -> str:
    """`index` counts the program's ExternCall steps in order (the artifact record lists them so)."""
    return f"fuse_all::{graph_id}::extern_{index}::{target}"


def _in_range(name: str, lines: list[str]) -> list[str]:
    return [f"with _fa_range({name!r}):", *("    " + line for line in lines)]


def _render_call_bodies(program: Program, target: KernelTarget) -> tuple[list[str], list[str]]:
    """The body of `call` and of `_call_profiled` (each kernel launch and ATen call inside its profiler
    range), rendered in one pass: the steps' lines are the same in both."""
    names = [inp.name for inp in program.inputs]
    body = []
    if names:
        body.append(f"{', '.join(names)}, = args")
        body.append("args.clear()")
    for sym, host_expr in program.size_symbols.items():
        body.append(f"{sym} = {host_expr}")
    if program.kernels and hasattr(target, "render_call_prologue"):
        body += target.render_call_prologue(program)
    profiled = list(body)
    externs = 0
    specs = memory.buffer_specs(program)
    handles = _extern_handle_names(program)
    slots = weight_cache_sites(program)
    for index, step in enumerate(program.steps):
        lines, range_name = _render_step(program, target, step, specs, handles, slots.get(index)), None
        if isinstance(step, KernelCall):
            range_name = kernel_range_name(program.graph_id, program.kernels[step.kernel].name)
        elif isinstance(step, ExternCall):
            range_name = extern_range_name(program.graph_id, externs, str(step.target))
            externs += 1
        body += lines
        profiled += lines if range_name is None else _in_range(range_name, lines)
    outs = [_render_output(o) for o in program.outputs]
    returned = "return (" + ", ".join(outs) + ("," if len(outs) == 1 else "") + ")"
    return body + [returned], profiled + [returned]


def _render_step(program: Program, target: KernelTarget, step, specs: dict, handles: dict,
                 weight_slot: str | None = None) -> list[str]:
    if isinstance(step, Alloc) and step.reuse is not None:
        spec = specs[step.buffer]
        if step.in_place:
            return [f"{step.buffer} = {step.reuse}; del {step.reuse}  # reuses {step.reuse} in place"]
        if memory.same_layout(spec, specs[step.reuse]):
            return [f"{step.buffer} = {step.reuse}; del {step.reuse}  # reuse"]
        return [f"{step.buffer} = reinterpret_tensor({step.reuse}, {py_tuple(spec.size)}, "
                f"{py_tuple(spec.stride)}, 0); del {step.reuse}  # reuse"]
    if isinstance(step, Alloc):
        lines = [_alloc(step.buffer, program.buffers[step.buffer], program.device)]
        return lines + ([f"{step.buffer}.zero_()"] if step.zero else [])
    if isinstance(step, Free):
        return [f"del {step.buffer}"]
    if isinstance(step, KernelCall):
        kernel = program.kernels[step.kernel]
        return [target.render_launch(kernel, list(kernel.inputs) + list(kernel.outputs),
                                     [str(s) for s in kernel.size_symbols])]
    if isinstance(step, ExternCall):
        return _render_extern(step, handles, weight_slot)
    raise TypeError(f"unknown step {step!r}")


def _weight_cache_slots(program: Program) -> list[str]:
    sites = weight_cache_sites(program)
    if not sites:
        return []
    return ["from fuse_all_ir.weight_layouts import ChannelsLastWeight",
            *(f"{name} = ChannelsLastWeight()" for name in sites.values())]


def _extern_handle_names(program: Program) -> dict[str, str]:
    """Module-level names bound to the program's ATen ops (`torch.ops.aten.mm.default` looked up once, at
    import): `_fa_op_<n>_<op>`, numbered so that no two targets share a name."""
    names: dict[str, str] = {}
    for step in program.steps:
        if isinstance(step, ExternCall) and str(step.target) not in names:
            readable = "".join(c if c.isalnum() else "_" for c in str(step.target))
            names[str(step.target)] = f"_fa_op_{len(names)}_{readable}"
    return names


# ATen ops whose calls go through torch's generated Python binding (`torch.convolution`, as Inductor's
# `extern_kernels` do) instead of the OpOverload: the OpOverload converts its arguments through the boxed,
# schema-driven path, ~0.7 us more per small call and ~3 us more per convolution on CPU (52 convolutions in
# MobileNetV2: ~0.17 ms of a 4.5 ms call; on the H200 host, a grouped 3x3 convolution 28.6 -> 21.9 us). Only ops whose binding, given this many positional arguments and
# only these keywords, can resolve to this overload and no other (the `.dtype` overloads need one more
# positional argument, the deprecated Scalar-first signatures four or five); tests/ir/test_host_program.py
# checks that each resolves to its overload: {op: (torch function, positional count, keywords allowed)}.
BOUND_FUNCTIONS = {
    "aten.convolution.default": ("convolution", 9, frozenset()),
    "aten.addmm.default": ("addmm", 3, frozenset({"beta", "alpha"})),
    "aten.mm.default": ("mm", 2, frozenset()),
    "aten.bmm.default": ("bmm", 2, frozenset()),
    "aten.baddbmm.default": ("baddbmm", 3, frozenset({"beta", "alpha"})),
    # the conv epilogue's calls (`conv_epilogue.py`): on the H200 host ~30 -> ~20 us per call
    # (bench/gpu_conv_host_probe.py), 44 calls in ResNet-50's inference graph at batch 64
    "aten.cudnn_convolution_relu.default": ("cudnn_convolution_relu", 7, frozenset()),
    "aten.cudnn_convolution_add_relu.default": ("cudnn_convolution_add_relu", 9, frozenset()),
}


def _binding_fits(step: ExternCall) -> bool:
    bound = BOUND_FUNCTIONS.get(str(step.target))
    return (bound is not None and len(step.args) == bound[1] and set(step.kwargs) <= bound[2]
            and hasattr(torch._C._VariableFunctions, bound[0]))


def _extern_handles(program: Program) -> list[str]:
    """One module-level name per ATen op: its Python binding where every call of the op fits it, else
    `torch.ops.<op>`."""
    fits: dict[str, bool] = {}
    for step in program.steps:
        if isinstance(step, ExternCall):
            fits[str(step.target)] = fits.get(str(step.target), True) and _binding_fits(step)
    lines = []
    for target, name in _extern_handle_names(program).items():
        if fits.get(target):
            lines.append(f"{name} = torch._C._VariableFunctions.{BOUND_FUNCTIONS[target][0]}   # {target}")
        else:
            lines.append(f"{name} = torch.ops.{target}")
    return lines


def _render_extern(step: ExternCall, handles: dict[str, str], weight_slot: str | None = None) -> list[str]:
    """An op that writes into an argument gets its views through `as_strided` (a real view: the write
    shows in the base's version counter, as eager's would); other ops through `reinterpret_tensor`.
    `weight_slot`: the convolution's weight goes through that `ChannelsLastWeight`."""
    literal = _output_literal if memory.extern_writes(step.target) else py_literal
    args = [literal(a) for a in step.args] + [f"{k}={literal(v)}" for k, v in step.kwargs.items()]
    if weight_slot is not None:
        args[1] = f"{weight_slot}({args[1]})"
    call = f"{handles[str(step.target)]}({', '.join(args)})"
    if step.single_result:
        lines = [f"{step.outputs[0] or '_'} = {call}"]
    else:
        targets = ", ".join(o or "_" for o in step.outputs)
        lines = [f"{targets}{',' if len(step.outputs) == 1 else ''} = {call}"]
    for name, spec in zip(step.outputs, step.out_specs):
        if name and spec is not None:
            stride = py_tuple(spec.stride)   # the common case costs one stride() and a tuple compare
            lines += [f"if {name}.stride() != {stride}:",
                      f"    {name} = ensure_layout({name}, {py_tuple(spec.size)}, {stride})"]
    return lines


def _render_output(out) -> str:
    if isinstance(out, BufferRef):
        return _output_ref(out)
    if isinstance(out, sympy.Basic):
        return py_index(out)
    return py_literal(out)


def _output_literal(value) -> str:
    """`py_literal` with views as `as_strided` (nested in lists and tuples too)."""
    if isinstance(value, BufferRef):
        return _output_ref(value)
    if isinstance(value, list):
        return "[" + ", ".join(_output_literal(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(_output_literal(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return py_literal(value)


def _render_main(program: Program) -> str:
    hints = {str(k): v for k, v in program.size_hints.items()}
    lines = [
        'if __name__ == "__main__":',
        "    from fuse_all_ir.runtime import random_inputs, time_call",
        f"    size_hints = {hints!r}",
        "    input_specs = [",
    ]
    for inp in program.inputs:
        if inp.kind == "tensor":
            s = inp.spec
            size, stride = [py_index(e) for e in s.size], [py_index(e) for e in s.stride]
            lines.append(f"        ('tensor', {size!r}, {stride!r}, {py_index(s.offset)!r}, "
                         f"torch.{s.dtype}, {program.device!r}),")
        elif inp.kind == "symint":
            lines.append(f"        ('symint', {py_index(inp.symbol)!r}),")
        else:
            lines.append("        ('other', None),")
    lines += [
        "    ]",
        "    time_call(call, lambda: random_inputs(input_specs, size_hints))",
    ]
    return "\n".join(lines)


def load_host_program(source: str, directory: str | None = None):
    """Write the host program to `<directory>/<hash>/output_code.py` and run it as a module (Triton needs
    kernels defined in a real file). Returns the module; its `call(args)` runs the graph.

    `directory` defaults to the private cache folder `host` (`cache_dirs.private_dir`); a given one is
    checked the same way. The file is only ever a copy of `source`: a cached file whose bytes differ
    (truncated by a crash, edited, planted) is rewritten, and the module runs the code of `source`,
    compiled here (or its bytecode, cached beside it with a checksum), never read back from the file."""
    import hashlib
    import importlib.util
    import sys

    from . import cache_dirs

    in_cache = directory is None
    if in_cache:
        directory = cache_dirs.private_dir("host")
    else:
        cache_dirs.make_private(directory)
    data = source.encode()
    digest = hashlib.sha256(data).hexdigest()[:24]
    folder = cache_dirs.make_private(Path(directory) / digest, below=directory)
    path = folder / "output_code.py"
    if cache_dirs.read_regular_file(path) != data:
        cache_dirs.sweep_stale_temps(folder)      # what a writer killed mid-write left here
        cache_dirs.atomic_write(path, data)
    code = _host_code(source, path)
    if in_cache:      # carried by torch.compiler.save_cache_artifacts (portable_caches)
        from . import portable_caches
        blob = cache_dirs.read_regular_file(path.with_name(f"{path.stem}.{sys.implementation.cache_tag}.bin"))
        if blob is not None:
            portable_caches.record_host_program(digest, data, blob)
    spec = importlib.util.spec_from_file_location(f"fuse_all_output_{digest}", path)
    module = importlib.util.module_from_spec(spec)
    with real_tensor_mode():  # compiles run under FakeTensorMode; the module's constants must be real
        exec(code, module.__dict__)  # noqa: S102 - our own rendered program
    module.__fuse_all_path__ = str(path)
    return module


def _host_code(source: str, path: Path):
    """`source` compiled with `path` as its file name. The bytecode is cached in `<path stem>.<python
    tag>.bin` (a sha256 of the payload, then `marshal` data): compiling a large program costs ~15 ms per
    1000 lines, loading it back ~1 ms. An entry that fails its checksum is recompiled and rewritten."""
    import hashlib
    import marshal
    import sys

    from . import cache_dirs

    cached = path.with_name(f"{path.stem}.{sys.implementation.cache_tag}.bin")
    blob = cache_dirs.read_regular_file(cached)
    if blob is not None and len(blob) > 32 and hashlib.sha256(blob[32:]).digest() == blob[:32]:
        try:
            return marshal.loads(blob[32:])
        except (ValueError, EOFError, TypeError):
            pass
    code = compile(source, str(path), "exec", dont_inherit=True)
    payload = marshal.dumps(code)
    try:
        cache_dirs.atomic_write(cached, hashlib.sha256(payload).digest() + payload)
    except OSError:
        pass      # only a speed-up
    return code

"""The `fuse_all` torch.compile backend: capture -> ir -> codegen per device -> host program -> (graphs).

Wiring only: each stage's logic lives in its package. A graph that any stage cannot handle runs in ATen
instead, with a one-line reason; a compile never breaks a program that eager runs.
"""
from __future__ import annotations

import functools
import logging
import os
import time
from dataclasses import dataclass, field

import torch

import fuse_all_capture as capture
import fuse_all_ir as ir

from . import debug, provenance
from .options import Options, parse

log = logging.getLogger("fuse_all")


@dataclass
class CompiledGraph:
    """What one captured graph became; kept per process for introspection (`fuse_all.compiled_graphs()`)."""
    graph_id: str
    kind: str
    device: str
    kernels: list = field(default_factory=list)     # ir.Kernel
    kernel_sources: dict = field(default_factory=dict)
    kernel_bytes: dict = field(default_factory=dict)   # kernel name -> bytes read + written per call
    language: str = ""
    externs: list = field(default_factory=list)     # ir.ExternCall
    report: object = None
    output_code: str | None = None
    fallback_reason: str | None = None
    compile_time_s: float = 0.0
    cudagraphs: dict = field(default_factory=dict)


_COMPILED: list[CompiledGraph] = []
_MAX_KEPT = 256


def compiled_graphs() -> list[CompiledGraph]:
    return list(_COMPILED)


def reset() -> None:
    _COMPILED.clear()


def fuse_all(gm: torch.fx.GraphModule, example_inputs, mode=None, options=None, **kwargs):
    """The backend Dynamo calls; `mode` and `options` come from torch.compile."""
    opts = parse(mode, options)
    backend = capture.make_backend(lambda graph: compile_graph(graph, opts, mode),
                                   decompositions=_decompositions(), name="fuse_all")
    return backend(gm, example_inputs)


@functools.lru_cache(None)
def _decompositions() -> dict:
    """Capture's table minus the ops the IR lowers itself: a native lowering fuses just as well, and the
    op's own meta function gives the output strides eager gives (decompositions sometimes don't)."""
    native = set(ir.lowered_ops())
    return {op: fn for op, fn in capture.decomposition_table().items() if str(op) not in native}


def compile_graph(graph, opts: Options, mode=None):
    """Compile one ATen graph (inference, forward or backward); returns a boxed callable."""
    start = time.perf_counter()
    record = CompiledGraph(graph.graph_id, graph.kind, graph.device)
    folder = _debug_folder(graph, opts)
    if folder:
        folder.write("aten_graph.txt", capture.format_graph(graph))
    try:
        call = _compile(graph, opts, record, folder)
    except Exception as exc:  # noqa: BLE001 - any failure becomes an ATen fallback, never a broken program
        if not opts.fallback:
            raise
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        log.warning("fuse_all: graph %s runs in ATen (%s)", graph.graph_id, reason)
        record.fallback_reason = reason
        call = _aten_call(graph.graph_module)
    call = _maybe_cudagraphs(call, graph, opts, record)
    record.compile_time_s = time.perf_counter() - start
    _COMPILED.append(record)
    del _COMPILED[:-_MAX_KEPT]
    provenance.write_compiled(graph, record, mode)  # never raises: the editor's record can't break a compile
    return call


def _compile(graph, opts: Options, record: CompiledGraph, folder):
    compiled = ir.lower(graph.graph_module, graph.example_inputs, graph.graph_id, graph.device)
    program = compiled.program
    target = _target_for(program.device, opts)
    source = ir.render_host_program(program, target)
    record.kernels = list(program.kernels.values())
    record.kernel_sources = {k.name: target.kernel_source(k) for k in record.kernels}
    record.kernel_bytes = {k.name: provenance.kernel_bytes(program, k) for k in record.kernels}
    record.language = target.language
    record.externs = [s for s in program.steps if isinstance(s, ir.ExternCall)]
    record.report = program.report
    if folder:
        folder.write("ir_before_fusion.txt", ir.format_lowered(compiled.lowered))
        folder.write("ir_after_fusion.txt", ir.format_program(program))
        folder.write("fusion_report.txt", program.report.to_text())
        for name, text in record.kernel_sources.items():
            folder.write(f"kernels/{name}.{'cpp' if target.language == 'cpp' else 'py'}", text)
    module = ir.load_host_program(source, _cache_dir("host"))
    record.output_code = module.__fuse_all_path__
    if folder:
        folder.write("output_code.py", source)
    call = module.call
    call._boxed_call = True
    return call


def _debug_folder(graph, opts: Options):
    return debug.DebugDir.for_graph(graph.graph_id, force=opts.debug)


def _target_for(device: str, opts: Options):
    language = opts.codegen
    if language == "auto":
        language = "cpp" if device.startswith("cpu") else "triton"
    if language == "cpp":
        if not device.startswith("cpu"):
            raise ir.UnsupportedDtype(f"the C++ codegen runs on CPU tensors only, not {device}")
        import fuse_all_codegen_cpp
        return fuse_all_codegen_cpp.CppTarget()
    if device.startswith("xpu") and not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        raise RuntimeError("xpu tensors but torch.xpu is not available")
    import fuse_all_codegen_triton
    return fuse_all_codegen_triton.TritonTarget(autotune=opts.autotune)


def _aten_call(gm: torch.fx.GraphModule):
    def call(args):
        result = gm(*args)
        args.clear()
        return result
    call._boxed_call = True
    return call


_POOLS: dict = {}   # one CUDA graph memory pool per Dynamo graph: its forward and backward share it


def _maybe_cudagraphs(call, graph, opts: Options, record: CompiledGraph):
    if not opts.cudagraphs:
        record.cudagraphs = {"enabled": False, "decision": "mode is not reduce-overhead"}
        return call
    decisions = []
    record.cudagraphs = {"enabled": True, "decisions": decisions}
    if not graph.device.startswith("cuda"):
        decisions.append(f"graph runs on {graph.device}: CUDA graphs need CUDA tensors")
        return call
    import fuse_all_cudagraphs as cudagraphs
    stem = graph.graph_id.removesuffix("_fwd").removesuffix("_bwd")
    pool = _POOLS.setdefault(stem, cudagraphs.GraphPool())
    return cudagraphs.wrap(call, graph.example_inputs, static_input_indices=graph.static_input_indices,
                           mutated_input_indices=graph.mutated_input_indices, pool=pool, name=graph.graph_id,
                           on_fallback=lambda reason: decisions.append(str(reason)), check_input_metadata=False)


def _cache_dir(kind: str) -> str:
    root = os.environ.get("FUSE_ALL_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fuse-all")
    path = os.path.join(root, kind)
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path

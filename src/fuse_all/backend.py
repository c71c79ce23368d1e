"""The `fuse_all` torch.compile backend: capture -> ir -> codegen per device -> host program -> (graphs).

Wiring only: each stage's logic lives in its package. A graph that any stage cannot handle runs in ATen
instead, with a one-line reason; a compile never breaks a program that eager runs.
"""
from __future__ import annotations

import functools
import logging
import time
import traceback
import weakref
from dataclasses import dataclass, field

import torch

import fuse_all_capture as capture
import fuse_all_ir as ir

from . import emit, graph_cache, logs, progress, provenance
from .debug import debug_enabled
from .options import OptionError, Options, parse, resolve_layout_opt

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
    steps: list = field(default_factory=list)       # ir.KernelCall / ir.ExternCall, in the order they run
    report: object = None
    output_code: str | None = None
    fallback_reason: str | None = None
    layout: str | None = None       # the channels-last decision (`fuse_all_ir.layout`), when it was made
    fallback_traceback: str | None = field(default=None, repr=False)   # where the compile failed
    compile_time_s: float = 0.0
    cudagraphs: dict = field(default_factory=dict)
    function: str | None = None     # the compiled user function, "qualname (file:line)"
    compile_id: str | None = None   # Dynamo's compile id ("0/1"), as TORCH_LOGS and tlparse show it
    debug_dir: str | None = None    # this graph's debug folder, when written
    fusion_svg: str | None = None   # the fusion picture in it
    from_cache: bool = False        # loaded from torch's AOTAutograd cache (graph_cache.py)
    cached_state: bytes = field(default=b"", repr=False)   # its kernels/steps/report, unpickled on demand


_COMPILED: list[CompiledGraph] = []
_MAX_KEPT = 256


def compiled_graphs() -> list[CompiledGraph]:
    for record in _COMPILED:
        if record.cached_state:
            graph_cache.restore_record(record)
    return list(_COMPILED)


def remember(record: CompiledGraph) -> None:
    _COMPILED.append(record)
    del _COMPILED[:-_MAX_KEPT]


def reset() -> None:
    """Forget this process's compiled graphs and CUDA graph pools; `torch.compiler.reset()` calls it.
    Graphs already captured are released (`GraphedCallable.reset`) and every graph of the pools is retired,
    so their memory goes back to the allocator as soon as the caller drops the results it still holds (a
    compiled function that is called again captures afresh instead of replaying into a forgotten pool)."""
    _COMPILED.clear()
    for graphed in list(_GRAPHED):
        graphed.reset()
    _GRAPHED.clear()
    for pool in list(_POOLS.values()):
        pool.reset()
    _POOLS.clear()


def fuse_all(gm: torch.fx.GraphModule, example_inputs, mode=None, options=None, **kwargs):
    """The backend Dynamo calls; `mode` and `options` come from torch.compile."""
    opts = resolve_layout_opt(parse(mode, options))
    tag = graph_cache.cache_tag(opts, mode, _decompositions())   # None: torch's AOTAutograd cache not used
    backend = capture.make_backend(lambda graph: compile_graph(graph, opts, mode, cacheable=tag is not None),
                                   decompositions=_decompositions(), name="fuse_all", aot_cache_tag=tag)
    # the collector paused for AOTAutograd's tracing too (a third of a ResNet-50 training step's garbage
    # collections, ~1 s of its first call on a CPU; peak memory +2%): see fuse_all_ir.gc_pause
    with ir.gc_pause.paused(), progress.Progress("tracing", opts.progress) as bar:
        bar.set_phase("AOTAutograd tracing")
        with ir.compile_timing.phase("aot_trace"):   # minus the graph compiles it runs (exclusive phases)
            try:
                return backend(gm, example_inputs)
            except (OptionError, *_DYNAMO_CONTROL):   # a user's wrong option stays an error, not a fallback
                raise
            except Exception as exc:  # noqa: BLE001 - AOTAutograd could not trace: run Dynamo's graph as eager
                if not opts.fallback:
                    raise
                return _uncompiled(gm, example_inputs, exc)


def _dynamo_control_exceptions() -> tuple:
    """What Dynamo lets a backend raise on purpose (restart, skip the frame, a graph break for an op fake
    tensors cannot run, IndexError for a dim out of range): it handles them, so they are not failures."""
    from torch._dynamo import exc
    return (exc.TorchDynamoException, IndexError, *getattr(exc, "exceptions_allowed_to_be_fallback", ()))


_DYNAMO_CONTROL = _dynamo_control_exceptions()


def _uncompiled(gm: torch.fx.GraphModule, example_inputs, exc: Exception):
    """A failure before any ATen graph exists (AOTAutograd's tracing: torch's own autograd formulas run
    there, see tests/fuzz/test_regressions.py) must not break the program either: Dynamo's graph runs as
    it is, like the eager backend, recorded as one fallback with its reason."""
    reason = _one_line(exc)
    device = next((str(x.device) for x in example_inputs if isinstance(x, torch.Tensor)), "cpu")
    record = CompiledGraph(f"dynamo_graph_{len(_COMPILED)}", "dynamo", device,
                           fallback_reason=f"AOTAutograd tracing failed: {reason}",
                           fallback_traceback=traceback.format_exc())
    log.warning("fuse_all: a Dynamo graph runs uncompiled (%s)", record.fallback_reason)
    remember(record)
    return gm.forward


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


fuse_all.reset = reset   # torch.compiler.reset() calls reset() on every backend it cached
logs.register()


@functools.lru_cache(None)
def _decompositions() -> dict:
    """Capture's table minus the ops the IR lowers itself: a native lowering fuses just as well, and the
    op's own meta function gives the output strides eager gives (decompositions sometimes don't)."""
    native = set(ir.lowered_ops())
    return {op: fn for op, fn in capture.decomposition_table().items() if str(op) not in native}


def compile_graph(graph, opts: Options, mode=None, cacheable: bool = False):
    """Compile one ATen graph (inference, forward or backward); returns a boxed callable (which carries
    its AOTAutograd cache entry when `cacheable`, see graph_cache.py)."""
    with ir.gc_pause.paused():     # its full collections walk the whole process: see gc_pause.py
        return _compile_graph(graph, opts, mode, cacheable)


def _compile_graph(graph, opts: Options, mode, cacheable: bool):
    start = time.perf_counter()
    record = CompiledGraph(graph.graph_id, graph.kind, graph.device)
    outputs = emit.GraphOutputs.start(graph)   # what the debug folder, TORCH_LOGS and TORCH_TRACE show
    with progress.for_graph(graph.kind, opts.progress) as bar:
        try:
            call = _compile(graph, opts, record, outputs, bar)
        except OptionError:
            raise      # the user's configuration, not this graph: falling back would hide it
        except Exception as exc:  # noqa: BLE001 - any failure becomes an ATen fallback, never a broken program
            if not opts.fallback:
                raise
            reason = _one_line(exc)
            log.warning("fuse_all: graph %s runs in ATen (%s)", graph.graph_id, reason)
            record.fallback_reason = reason
            record.fallback_traceback = traceback.format_exc()
            call = _aten_call(graph.graph_module)
        if opts.cudagraphs:
            bar.set_phase("CUDA graphs")
        with outputs.timed("cudagraphs"):
            call = _maybe_cudagraphs(call, graph, opts, record)
    if cacheable:
        call = graph_cache.attach(call, graph, record, opts, outputs.host_source)
    record.compile_time_s = time.perf_counter() - start
    remember(record)
    with ir.compile_timing.phase("records"):
        emit.finish(outputs, record, force_debug=opts.debug)   # never raises
        provenance.write_compiled(graph, record, mode)  # never raises: the editor's record can't break a compile
    return call


def _compile(graph, opts: Options, record: CompiledGraph, outputs, bar):
    target = _target_for(graph.device, opts)
    bar.set_phase("lowering and fusing")
    with outputs.timed("lower_fuse_schedule"):
        with ir.compile_timing.phase("layout"):   # else counted in aot_trace: it runs fake-tensor propagation
            record.layout = _choose_layout(graph, opts, getattr(target, "choices", None))
        compiled = ir.lower(graph.graph_module, graph.example_inputs, graph.graph_id, graph.device,
                            validate=True if opts.debug or debug_enabled() else None,   # None: FUSE_ALL_VALIDATE decides
                            choices=getattr(target, "choices", None))
    program = compiled.program
    program.report.layout = record.layout or ""
    if opts.weight_layout_cache and graph.kind == "inference":   # training graphs: weights change every step
        program.weight_cache_inputs = frozenset(program.inputs[i].name for i in graph.static_input_indices
                                                if i < len(program.inputs))
    outputs.compiled = compiled
    record.kernels = list(program.kernels.values())
    bar.set_phase("rendering kernels", total_kernels=len(record.kernels))
    with outputs.timed("render"), ir.compile_timing.phase("render"):
        source = ir.render_host_program(program, target)
        record.kernel_sources = {}
        for kernel in record.kernels:
            record.kernel_sources[kernel.name] = target.kernel_source(kernel)
            bar.kernel_done()
    outputs.host_source = source
    record.kernel_bytes = provenance.kernels_bytes(program, record.kernels)
    record.language = target.language
    record.steps = [s for s in program.steps if isinstance(s, (ir.KernelCall, ir.ExternCall))]
    record.externs = [s for s in record.steps if isinstance(s, ir.ExternCall)]
    record.report = program.report
    _warn_lowered_ops_in_aten(graph.graph_id, record.externs, getattr(target, "choices", None))
    bar.set_phase(f"compiling {len(record.kernels)} kernels")
    with outputs.timed("compile_kernels"), ir.compile_timing.phase("host_load"):
        module = ir.load_host_program(source)   # the private cache folder `host`
    record.output_code = module.__fuse_all_path__
    call = module.call
    call._boxed_call = True
    return call


def _choose_layout(graph, opts: Options, choices=None) -> str | None:
    """Channels-last convolutions (`fuse_all_ir.layout`) for inference graphs and training forwards; a
    backward takes the strides its saved activations really have. The decision, as one line, or None.
    First, where the target's `choices` ask for it, the convolutions that are matrix products stop being
    convolutions (`fuse_all_ir.convs_as_matmuls`), so the decision weighs only the others."""
    gm, inputs = graph.graph_module, graph.example_inputs
    if graph.kind == "inference" and choices is not None and choices.grouped_convs_as_matmuls:
        ir.convs_as_matmuls(gm)
    if graph.kind == "backward":
        if ir.adopt_input_strides(gm, inputs):
            line = "strides re-derived from the saved activations' layout (channels-last forward)"
            log.info("fuse_all: graph %s: %s", graph.graph_id, line)
            return line
        return None
    if not ir.convolutions(gm):
        return None
    if not opts.layout_opt:
        decision = ir.LayoutDecision(False, "turned off (FUSE_ALL_LAYOUT_OPT=0 or options layout_opt=False)")
    else:
        free = graph.kind == "forward" and graph.saved_layout_free   # else every output keeps its strides
        inference = graph.kind == "inference"
        decision = ir.prefer_channels_last(gm, inputs, is_inference=inference,
                                           num_user_outputs=graph.num_fwd_outputs if free else None,
                                           weights_kept=inference and opts.weight_layout_cache)
    log.info("fuse_all: graph %s: %s", graph.graph_id, decision)
    return str(decision)


def _warn_lowered_ops_in_aten(graph_id: str, externs, choices=None) -> None:
    """One line per graph when ops that fuse-all fuses elsewhere run as ATen calls here (an unsupported
    dtype such as complex, a case their lowering refuses). Ops without a lowering (matmul, convolution, ...)
    run in ATen by design and are only listed in the fusion report, as do random ops on a target that keeps
    ATen's generator (`choices.random_in_kernel` off: C++) and matrix products too large for the target's
    reduction (`ir.sized_ops`)."""
    lowered = set(ir.lowered_ops(choices)) - ir.sized_ops()
    degraded = [e for e in externs if e.target in lowered]
    if not degraded:
        return
    shown = [f"{e.target} ({e.reason})" for e in degraded[:3]]
    more = f" and {len(degraded) - 3} more" if len(degraded) > 3 else ""
    log.warning("fuse_all: graph %s: %d op%s run as ATen calls instead of fused kernels: %s%s", graph_id,
                len(degraded), "" if len(degraded) == 1 else "s", ", ".join(shown), more)


def _target_for(device: str, opts: Options):
    """The registered target (`fuse_all_ir.targets`) for this graph's device, made with its choices. A
    target the user named that cannot run here is an `OptionError`; no target for an `auto` graph is a
    compile error (the graph runs in ATen)."""
    try:
        spec = ir.select_target(device, opts.codegen)
    except ir.TargetUnavailable as exc:
        if exc.forced:
            raise OptionError(f"fuse_all: {exc}") from None
        raise
    return spec.create(opts, spec.choices(opts))


def _aten_call(gm: torch.fx.GraphModule):
    def call(args):
        result = gm(*args)
        args.clear()
        return result
    call._boxed_call = True
    return call


_POOLS: dict = {}   # one CUDA graph memory pool per Dynamo graph: its forward and backward share it
_GRAPHED: weakref.WeakSet = weakref.WeakSet()   # every live CUDA-graph wrapper, released by reset()


def cudagraphs_for_cached(call, code, example_inputs, record: CompiledGraph):
    """CUDA graphs around a graph loaded from the AOTAutograd cache (graph_cache.py). torch hands a cached
    backward the *forward's* inputs as its example inputs (aot_autograd_result.py: both graphs are loaded
    with the forward's arguments), so a backward is wrapped at its first call, from that call's inputs."""
    if code.kind != "backward":
        return _cudagraphs_for_cached(call, code, example_inputs, record)

    def wrap_at_first_call(args: list):
        graphed = _cudagraphs_for_cached(call, code, list(args), record)
        code._call = graphed          # GraphCode calls it directly from now on
        return graphed(args)
    wrap_at_first_call._boxed_call = True
    return wrap_at_first_call


def _cudagraphs_for_cached(call, code, example_inputs, record: CompiledGraph):
    from types import SimpleNamespace
    graph = SimpleNamespace(graph_id=code.graph_id, device=code.device, example_inputs=example_inputs,
                            static_input_indices=code.static_input_indices,
                            mutated_input_indices=code.mutated_input_indices)
    return _maybe_cudagraphs(call, graph, Options(cudagraphs=True), record)


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
    graphed = cudagraphs.wrap(call, graph.example_inputs, static_input_indices=graph.static_input_indices,
                              mutated_input_indices=graph.mutated_input_indices, pool=pool, name=graph.graph_id,
                              on_fallback=lambda reason: decisions.append(str(reason)), check_input_metadata=False)
    record.cudagraphs["stats"] = graphed.stats     # live counters: calls, plain_calls, captures, replays, ...
    _GRAPHED.add(graphed)
    return graphed


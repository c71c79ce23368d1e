"""Warm starts without re-tracing: fuse_all's compiled graphs kept in torch's AOTAutograd cache.

A new process compiling a model it compiled before pays Dynamo's tracing (every backend does), then
AOTAutograd's tracing, lowering, fusion, rendering and loading. Inductor skips all but the first through
torch's AOTAutograd cache; torch accepts any backend's result there when it is a picklable `OutputCode`
bundled into the entry (`fuse_all_capture.compat`: `SerializableAOTDispatchCompiler`,
`bundled_autograd_cache`). `GraphCode` is ours: it carries the host program's source and what
`fuse_all.compiled_graphs()` shows; loading it imports the host program (`fuse_all_ir.load_host_program`:
our private `host` cache, the C++ library from the private `cpp` cache by its checksummed key, Triton
kernels from Triton's cache), so a hit skips tracing, lowering and rendering altogether.

What keys an entry: torch's key (the Dynamo graph, the inputs' metadata, grad mode, AOTAutograd's and
Inductor's configs, torch's version) plus our `cache_key_tag`: the options, the decomposition table and a
hash of fuse-all's own sources (every `.py`/`.h` file of its packages, so an edited checkout never loads
entries of another). Where an entry lives and how it is written is torch's (its cache folder,
`TORCHINDUCTOR_CACHE_DIR`); torch also carries it in `torch.compiler.save_cache_artifacts()`. An entry
that fails to load makes torch compile the graph again ("bypass"), never run a damaged program.

A training graph's entry (forward and backward together) is saved when its backward compiles, at the first
backward call (`fuse_all_capture.compat.bundle_lazy_backward_save`).

Not kept: graphs that fell back to ATen, debug compiles (the debug folder is written on a full compile
only), and anything while caches are off (`FUSE_ALL_FORCE_DISABLE_CACHES`, `TORCHINDUCTOR_FORCE_DISABLE_CACHES`).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import os
from pathlib import Path
from typing import Any

import fuse_all_ir as ir

from . import logs, torch_compat

log = logging.getLogger("fuse_all")

KEY_FORMAT = "fuse-all-graph-1"   # bump when GraphCode's meaning changes
_PACKAGES = ("fuse_all", "fuse_all_capture", "fuse_all_ir", "fuse_all_codegen_cpp", "fuse_all_codegen_triton",
             "fuse_all_cudagraphs")


@functools.lru_cache(None)
def code_identity() -> str:
    """A hash of fuse-all's sources (~100 small files, hashed once per process)."""
    import importlib.util

    digest = hashlib.sha256(KEY_FORMAT.encode())
    for name in _PACKAGES:
        try:       # found, not imported: a warm start imports no package its graphs do not use
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            digest.update(f"{name}:absent".encode())
            continue
        root = Path(list(spec.submodule_search_locations)[0])
        for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".h") and p.is_file()):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:32]


def cache_tag(opts, mode, decompositions: dict) -> str | None:
    """The tag for torch's key, or None when this compile must not use the cache."""
    from .debug import debug_enabled
    if ir.caches_disabled() or opts.debug or debug_enabled() or capture_compat().output_code_base() is None:
        return None
    table = hashlib.sha256("\n".join(sorted(_core_ops(decompositions))).encode()).hexdigest()[:16]
    options = repr(sorted((k, v) for k, v in dataclasses.asdict(opts).items() if k != "progress"))
    import torch

    from .config import CODE_VARIABLES
    switches = repr([(name, os.environ.get(name)) for name in CODE_VARIABLES]
                    + [("allow_tf32", torch.backends.cuda.matmul.allow_tf32)])   # TritonChoices.fp32_matmul
    return f"fuse_all:{code_identity()}:{mode!r}:{options}:{switches}:{table}"


def _core_ops(decompositions: dict) -> list[str]:
    """The table's aten and prims ops. Other namespaces register their ops and decompositions when their
    module is imported (torch.ao's `quantized_decomposed` when Inductor's code generators load), so the
    table grows with what the process imported; a graph holding such an op has it in its own hash."""
    return [name for name in map(str, decompositions) if name.startswith(("aten.", "prims."))]


def capture_compat():
    from fuse_all_capture import compat
    return compat


def _graph_code_class():
    base = capture_compat().output_code_base()

    @dataclasses.dataclass
    class GraphCode(base):
        """One compiled graph as torch's AOTAutograd cache keeps it; calls run the host program."""
        graph_id: str = ""
        kind: str = ""
        device: str = ""
        host_source: str | None = None      # None: not cacheable (the graph runs in ATen)
        language: str = ""
        kernel_sources: dict = dataclasses.field(default_factory=dict)
        record_state: bytes = b""           # the record's IR (kernels, steps, report), pickled
        cudagraphs: bool = False
        static_input_indices: tuple = ()
        mutated_input_indices: tuple = ()
        not_cacheable: str | None = None
        _boxed_call = True

        def __post_init__(self):
            self._call = None

        def __call__(self, *args):
            # boxed (one list) as AOTAutograd calls a forward; a backward loaded from the cache is called
            # through torch's disable() wrapper, which hides `_boxed_call`: one argument per input then
            if len(args) == 1 and isinstance(args[0], list):
                return self._call(args[0])
            return self._call(list(args))

        def __getstate__(self):
            state = dict(self.__dict__)
            state["_call"] = None
            return state

        def prepare_for_serialization(self) -> None:
            if self.not_cacheable or self.host_source is None:
                raise capture_compat().bypass_cache_error()(f"fuse_all: {self.not_cacheable or 'no host program'}")
            self._call = None

        def post_compile(self, example_inputs, constants=None, graph_kwargs=None) -> None:
            if self._call is None:
                self._call = load(self, list(example_inputs))

        def set_triton_bundle(self, triton_bundle: Any) -> None:
            pass

    GraphCode.__qualname__ = GraphCode.__name__ = "GraphCode"
    GraphCode.__module__ = __name__
    return GraphCode


def __getattr__(name: str):
    """`GraphCode` is built on first use: torch's OutputCode base is imported only then."""
    if name == "GraphCode":
        cls = globals()["GraphCode"] = _graph_code_class()
        return cls
    raise AttributeError(name)


def attach(call, graph, record, opts, host_source: str | None) -> Any:
    """Give the boxed `call` its cache entry (`call.__wrapped__`, what torch pickles on save)."""
    GraphCode = globals().get("GraphCode") or __getattr__("GraphCode")
    code = GraphCode(
        graph_id=graph.graph_id, kind=graph.kind, device=str(graph.device),
        host_source=host_source if not record.fallback_reason else None,
        language=record.language, kernel_sources=dict(record.kernel_sources),
        record_state=_record_state(record), cudagraphs=bool(opts.cudagraphs),
        static_input_indices=tuple(graph.static_input_indices),
        mutated_input_indices=tuple(graph.mutated_input_indices),
        not_cacheable=record.fallback_reason or _specialised_sizes(graph.example_inputs))
    code._call = call
    try:
        call.__wrapped__ = code
        return call
    except (AttributeError, TypeError):      # a callable object without a __dict__: wrap it
        def boxed(args):
            return call(args)
        boxed._boxed_call = True
        boxed.__wrapped__ = code
        return boxed


def _specialised_sizes(example_inputs: list) -> str | None:
    """Why a graph must not be stored: a size of its inputs that Dynamo traced as a symbol was specialised
    to a constant while tracing. The graph's text keeps the symbol, so torch's key is that of the same graph
    traced without the specialisation, whose guards do not cover it: a later recompile of the function for
    another value of that size was served this program (fuzz seed 166 index 1203: an output dim computed
    as 7 - 1 for an input whose size was 5)."""
    import torch
    for x in example_inputs:
        sizes = [x] if isinstance(x, torch.SymInt) else [*x.shape, *x.stride()] if isinstance(x, torch.Tensor) else []
        if any(isinstance(s, torch.SymInt) and s.node.expr.is_number for s in sizes):
            return "an input size symbol was specialised while tracing (torch's cache key cannot tell)"
    return None


def load(code, example_inputs: list):
    """The boxed callable of a cached graph: its host program imported (kernels from their caches)."""
    from . import backend
    with ir.compile_timing.phase("graph_cache"):
        module = ir.load_host_program(code.host_source)
    call = module.call
    call._boxed_call = True
    record = backend.CompiledGraph(code.graph_id, code.kind, code.device, language=code.language,
                                   kernel_sources=dict(code.kernel_sources), output_code=module.__fuse_all_path__,
                                   from_cache=True)
    record.kernels = list(code.kernel_sources)       # names until `restore_record` (compiled_graphs())
    record.cached_state = code.record_state
    logs.log_summary({"graph_id": code.graph_id, "compile_id": torch_compat.compile_id(), "kind": code.kind,
                      "device": code.device, "language": code.language, "kernels": len(code.kernel_sources),
                      "aten_calls": "-", "fused_ops": "-", "compile_time_s": 0.0,
                      "fallback_reason": None, "from_cache": True})
    logs.log_artifact("output_code", f"Output code of fuse_all {code.kind} graph {code.graph_id} (cached):",
                      lambda: code.host_source)
    if code.cudagraphs:
        call = backend.cudagraphs_for_cached(call, code, example_inputs, record)
    backend.remember(record)
    return call


def _record_state(record) -> bytes:
    import pickle
    try:
        return pickle.dumps({"kernels": record.kernels, "steps": record.steps, "report": record.report,
                             "kernel_bytes": record.kernel_bytes, "layout": record.layout}, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as error:  # noqa: BLE001 - the record is for introspection; the entry still works
        log.debug("fuse-all: record of %s not kept in the cache entry: %s", record.graph_id, error)
        return b""


def restore_record(record) -> None:
    """Fill a cached graph's record with its IR (kernels, steps, report), kept pickled until asked for:
    unpickling its sympy expressions costs ~10-100 ms a graph, which a warm start need not pay."""
    import pickle
    state, record.cached_state = record.cached_state, b""
    try:
        values = pickle.loads(state)   # noqa: S301 - part of torch's own cache entry, which it unpickled
    except Exception as error:  # noqa: BLE001
        log.debug("fuse-all: cached record of %s unreadable: %s", record.graph_id, error)
        return
    record.kernels, record.steps = values["kernels"], values["steps"]
    record.report, record.kernel_bytes = values["report"], values["kernel_bytes"]
    record.layout = values.get("layout")
    record.externs = [s for s in record.steps if isinstance(s, ir.ExternCall)]

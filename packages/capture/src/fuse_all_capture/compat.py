"""Every access to torch internals that fuse_all_capture makes, in one place.

torch's private modules move between releases; fuse-all runs on torch 2.11 (the GPU machine) and 2.14
(development). Each helper here degrades to a neutral answer (None, empty) when an attribute is missing
instead of raising, so a torch upgrade costs metadata, never a compile. Public torch APIs are used
directly elsewhere; only underscore modules and undocumented attributes go through this file.
"""
from __future__ import annotations

import functools
import os
from typing import Any, Callable, Iterable

import torch


def aot_autograd(**kwargs: Any) -> Callable[..., Any]:
    """torch's AOTAutograd backend factory (Dynamo graph -> ATen fw/bw/inference graphs)."""
    from torch._dynamo.backends.common import aot_autograd as factory

    return factory(**kwargs)


def partition_function(name: str) -> Callable[..., Any]:
    """AOTAutograd's joint-graph partitioners: "min_cut" (recompute cheap ops in bw) or "default"."""
    from torch._functorch import partitioners

    if name == "min_cut":
        return partitioners.min_cut_rematerialization_partition
    if name == "default":
        return partitioners.default_partition
    raise ValueError(f"unknown partition {name!r}; expected 'min_cut' or 'default'")


def core_aten_decompositions() -> dict[Any, Callable[..., Any]]:
    """torch's core-ATen decomposition table as a plain dict (2.6+ returns a lazy CustomDecompTable)."""
    from torch._decomp import core_aten_decompositions as table

    return dict(table().items())


def get_decompositions(ops: Iterable[Any]) -> dict[Any, Callable[..., Any]]:
    """torch's registered decompositions for `ops` (packets expand to all their overloads)."""
    from torch._decomp import get_decompositions as lookup

    return dict(lookup(list(ops)).items())


def aten_op(name: str) -> Any | None:
    """`torch.ops.aten.<name>` or None when this torch lacks it (ops come and go between releases)."""
    try:
        return getattr(torch.ops.aten, name)
    except (AttributeError, RuntimeError):
        return None


def forward_metadata() -> Any | None:
    """AOTAutograd's ViewAndMutationMeta for the graph being compiled, if a tracing context has one."""
    try:
        from torch._guards import TracingContext
    except ImportError:
        return None
    context = TracingContext.try_get()
    return getattr(context, "fw_metadata", None) if context is not None else None


def static_input_indices(meta: Any) -> list[int]:
    """Inputs whose storage stays put between calls (parameters, buffers, marked-static tensors)."""
    return list(getattr(meta, "static_input_indices", None) or [])


def output_strides_listened() -> bool:
    """Whether AOTAutograd is listening for the output strides of the forward being compiled."""
    try:
        from torch._guards import TracingContext
    except ImportError:
        return False
    context = TracingContext.try_get()
    listening = getattr(context, "output_strides", None) if context is not None else None
    return listening is not None and len(listening) == 0


def report_output_strides(strides: list) -> bool:
    """Tell AOTAutograd the strides a forward graph's compiled outputs really have (None: as traced), as
    Inductor does after layout optimisation: AOTAutograd restrides the backward's example inputs (the saved
    activations) to them before the backward is compiled (torch 2.11 and 2.14: graph_compile.py,
    `_aot_stage2b_bw_compile`, reading `TracingContext.report_output_strides()`). False when no compile
    context is listening (or another compiler reported already)."""
    try:
        from torch._guards import TracingContext
    except ImportError:
        return False
    context = TracingContext.try_get()
    listening = getattr(context, "output_strides", None) if context is not None else None
    if listening is None or len(listening) != 0:
        return False
    listening.extend(strides)
    return True


def written_argument_positions(target: Any) -> list[int]:
    """Positions of the arguments an ATen op writes (`Tensor(a!)` in its schema), e.g. [0] for copy_."""
    schema = getattr(target, "_schema", None)
    arguments = getattr(schema, "arguments", None) or []
    return [i for i, a in enumerate(arguments) if getattr(getattr(a, "alias_info", None), "is_write", False)]


def num_forward_returns(meta: Any) -> int | None:
    """How many leading outputs of a training forward graph go back to the user (the rest are saved)."""
    value = getattr(meta, "num_forward_returns", None)
    return value if isinstance(value, int) else None


def shape_env(example_inputs: Iterable[Any]) -> Any | None:
    """The ShapeEnv of the compile: from the tracing context, else from a fake tensor or SymInt input."""
    try:
        from torch._guards import TracingContext

        context = TracingContext.try_get()
    except ImportError:
        context = None
    fake_mode = getattr(context, "fake_mode", None)
    if getattr(fake_mode, "shape_env", None) is not None:
        return fake_mode.shape_env
    for value in example_inputs:
        if isinstance(value, torch.SymInt):
            return getattr(value.node, "shape_env", None)
        env = getattr(getattr(value, "fake_mode", None), "shape_env", None)
        if env is not None:
            return env
    return None


def free_symbol_names(values: Iterable[Any]) -> set[str]:
    """Names of the size symbols in the shapes/strides of these tensors and SymInts."""
    from torch.fx.experimental.symbolic_shapes import free_symbols

    names: set[str] = set()
    pending = list(values)
    while pending:
        value = pending.pop()
        if isinstance(value, (list, tuple)):  # multi-output nodes keep a tuple of values
            pending.extend(value)
        elif isinstance(value, (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool)):
            names.update(str(symbol) for symbol in free_symbols(value))
    return names


def backed_values(env: Any) -> dict:
    """The ShapeEnv's symbol -> example value table ({} without a ShapeEnv)."""
    if env is None:
        return {}
    # 2.14 renamed var_to_val to backed_var_to_val and deprecated the old name (with a warning).
    values = getattr(env, "backed_var_to_val", None)
    if values is None:
        values = getattr(env, "var_to_val", None) or {}
    return values


def backed_size_hints(env: Any, names: set[str]) -> dict[str, int]:
    """Symbol name -> the example value Dynamo traced with, for `names` (unbacked symbols have none)."""
    if env is None or not names:
        return {}
    hints = {}
    for symbol, value in backed_values(env).items():
        if str(symbol) not in names:
            continue
        try:
            hints[str(symbol)] = int(value)
        except (TypeError, ValueError):
            continue
    return hints


def compiling_frame_code() -> Any | None:
    """The code object Dynamo is compiling right now (only valid inside a Dynamo backend call)."""
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator
    except ImportError:
        return None
    current = getattr(InstructionTranslator, "current_tx", None)
    try:
        tx = current() if current is not None else None
    except AttributeError:  # no translator is active on this thread
        return None
    return getattr(tx, "f_code", None)


def graph_compile_reason(dynamo_gm: Any) -> Any | None:
    """Why Dynamo ended this graph: GraphCompileReason(reason, user_stack, graph_break)."""
    return getattr(dynamo_gm, "compile_subgraph_reason", None)


def dynamo_graph_break_reasons() -> list[Any]:
    """Every graph break Dynamo recorded in this process since the last `torch.compiler.reset()`."""
    try:
        from torch._dynamo import utils
    except ImportError:
        return []
    return list(getattr(utils, "graph_break_reasons", None) or [])


def tree_leaves(value: Any) -> list[Any]:
    """Flatten nested outputs (tuples, dicts, ModelOutput-style registered containers) to leaves."""
    from torch.utils import _pytree

    return _pytree.tree_leaves(value)


@functools.lru_cache(None)
def torch_source_dirs() -> tuple[str, ...]:
    """Folders whose frames are torch's own, not the user's (torch and functorch packages)."""
    dirs = [os.path.dirname(os.path.abspath(torch.__file__))]
    try:
        import functorch

        dirs.append(os.path.dirname(os.path.abspath(functorch.__file__)))
    except ImportError:
        pass
    return tuple(d + os.sep for d in dirs)


# ---- AOTAutograd's cache (warm starts without re-tracing) ---------------------------------------------------
# torch 2.11 and 2.14 (torch/_functorch/aot_autograd.py, aot_module_simplified): the cache is consulted
# only when `fw_compiler` is a `SerializableAOTDispatchCompiler`; an entry is saved with the compiled
# function bundled in it only when `torch._functorch.config.bundled_autograd_cache` is on while it is
# saved (autograd_cache.py, `make_entry`: it unwraps `__wrapped__` down to an `OutputCode` and pickles
# it), else it must name an FX graph cache entry of Inductor's. The key covers the Dynamo graph, the
# inputs, AOTAutograd's and Inductor's configs and `torch.compiler.config.cache_key_tag`.

def output_code_base() -> type | None:
    """torch's `OutputCode` base class (what the AOTAutograd cache bundles), or None without it."""
    try:
        from torch._inductor.output_code import OutputCode
    except ImportError:
        return None
    return OutputCode


def bypass_cache_error() -> type[Exception]:
    """The exception that makes the AOTAutograd cache skip saving an entry quietly."""
    try:
        from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache
    except ImportError:
        return RuntimeError
    return BypassAOTAutogradCache


def serializable_compiler(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` as a compiler whose results AOTAutograd may cache (falls back to `fn` itself)."""
    base = output_code_base()
    try:
        from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler
    except ImportError:
        return fn
    if base is None:
        return fn
    return SerializableAOTDispatchCompiler(base, fn)


def aot_cache_config(tag: str):
    """A context in which AOTAutograd bundles compiled graphs into its cache entries, keyed with `tag`
    (appended to the user's own `torch.compiler.config.cache_key_tag`)."""
    import contextlib

    stack = contextlib.ExitStack()
    try:
        import torch._functorch.config as functorch_config
        import torch.compiler.config as compiler_config
        user_tag = getattr(compiler_config, "cache_key_tag", "") or ""
        stack.enter_context(functorch_config.patch(bundled_autograd_cache=True))
        stack.enter_context(compiler_config.patch(cache_key_tag=f"{user_tag}|{tag}" if user_tag else tag))
    except (ImportError, AttributeError, RuntimeError):   # a torch without these knobs: no cache, same graphs
        stack.close()
        return contextlib.nullcontext()
    _without_inductor_backend_imports(stack)
    return stack


def _without_inductor_backend_imports(stack) -> None:
    """torch's cache key (`FxGraphHashDetails.__init__`, 2.11 and 2.14) first calls Inductor's
    `init_backend_registration`, which imports every Inductor code generator (~170 modules: 0.7 s of a
    process's first compile here, 1.5 s or more on a fresh install whose .pyc files are not written yet),
    paid by cold and warm starts alike, only to hash the custom passes registered per device. Nothing
    Inductor registers changes what fuse_all builds, so the key is computed from the passes someone did
    register (none by default): the same key in a process that has used Inductor as in one that has not."""
    try:
        from torch._inductor import codecache
    except ImportError:
        return
    passes = getattr(codecache, "custom_backend_passes", None)
    if not callable(getattr(codecache, "init_backend_registration", None)) or not isinstance(passes, dict):
        return
    registered = {device: fn for device, fn in passes.items() if fn is not None}
    stack.enter_context(_patched(codecache, init_backend_registration=lambda: None,
                                 custom_backend_passes=registered))


def _patched(module, **values):
    import unittest.mock
    return unittest.mock.patch.multiple(module, **values)


def bundle_lazy_backward_save() -> Callable[[], None] | None:
    """A training graph's backward compiles lazily, at the first backward call, outside the backend's call
    and so outside `aot_cache_config`: torch then saves the pair's cache entry right after the backward
    compiler returns (runtime_wrappers.py, `try_save_cache_entry`, 2.11 and 2.14) and bundles it only if
    `bundled_autograd_cache` is on at that moment. Turns it on; returns the function that puts it back,
    which the compiled backward calls on its first call (torch calls it right after saving). None when it
    is on already (a backward compiled with the forward: dynamic shapes) or torch has no such setting."""
    try:
        import torch._functorch.config as functorch_config
        previous = functorch_config.bundled_autograd_cache
    except (ImportError, AttributeError):
        return None
    if previous:
        return None
    functorch_config.bundled_autograd_cache = True

    def restore() -> None:
        functorch_config.bundled_autograd_cache = previous
    return restore

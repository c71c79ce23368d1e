"""The torch internals the tooling uses (logging registry, structured trace, compile ids, debug dir, repro
writer), each behind one function that degrades to "not available" instead of failing a compile.
Checked on torch 2.11 and 2.14."""
from __future__ import annotations

import logging
from typing import Any, Callable

log = logging.getLogger("fuse_all")


def logging_internal():
    from torch._logging import _internal
    return _internal


def register_log(alias: str, qnames: list[str]) -> None:
    logging_internal().register_log(alias, qnames)


def artifact_logger(module_qname: str, artifact: str) -> logging.Logger:
    """torch's artifact logger `<module_qname>.__<artifact>` (enabled by `TORCH_LOGS=<artifact>`)."""
    import torch._logging
    return torch._logging.getArtifactLogger(module_qname, artifact)


def artifact_names() -> set[str]:
    return set(logging_internal().log_registry.artifact_names)


def reinit_logs() -> None:
    """torch's own (re)initialisation, what `torch._logging.set_logs` runs, after forgetting how TORCH_LOGS
    was parsed (torch caches the parse; names registered since then read differently now)."""
    internal = logging_internal()
    parse = getattr(internal, "_parse_log_settings", None)
    if hasattr(parse, "cache_clear"):
        parse.cache_clear()
    internal._init_logs()


def trace_enabled() -> bool:
    """True when TORCH_TRACE (or TORCH_COMPILE_DEBUG's tlparse folder) is collecting structured logs."""
    try:
        internal = logging_internal()
        return bool(internal.trace_log.handlers)
    except Exception:  # noqa: BLE001
        return False


def trace_artifact(name: str, encoding: str, payload_fn: Callable[[], Any]) -> None:
    """One `artifact` entry of the structured trace, under the current compile id."""
    from torch._logging import trace_structured
    trace_structured("artifact", metadata_fn=lambda: {"name": name, "encoding": encoding},
                     payload_fn=payload_fn)


def compile_id() -> str | None:
    """Dynamo's compile id of the graph being compiled, e.g. "0/1" (None outside a compile)."""
    try:
        from torch._guards import CompileContext
        current = CompileContext.current_compile_id()
    except Exception:  # noqa: BLE001
        return None
    return None if current is None else str(current)


def aot_graph_name() -> str | None:
    """AOTAutograd's name of the graph being compiled, e.g. "model__0_forward_1" (Inductor's folder name)."""
    try:
        from torch._functorch._aot_autograd.logging_utils import get_aot_graph_name
        return get_aot_graph_name()
    except Exception:  # noqa: BLE001
        return None


def torch_debug_dir() -> str | None:
    """torch's run folder under TORCH_COMPILE_DEBUG (`torch_compile_debug/run_<time>-pid_<pid>`); one per
    process (torch caches it), so our files sit next to Inductor's and Dynamo's."""
    try:
        from torch._dynamo.utils import get_debug_dir
        return get_debug_dir()
    except Exception:  # noqa: BLE001
        return None


def repro_source(gm, example_inputs) -> str:
    """The standalone module + `load_args` torch writes as `fx_graph_runnable.py` (after_aot's writer)."""
    from torch._dynamo.repro.after_aot import generate_compiler_repro_string
    return generate_compiler_repro_string(gm, example_inputs)



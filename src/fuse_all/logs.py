"""fuse-all in torch's logging: `TORCH_LOGS` channels and `TORCH_TRACE` structured artifacts.

TORCH_LOGS names
    fuse_all / +fuse_all   INFO: one line per compiled graph; DEBUG: also the stages' debug lines
    output_code            our host program (output_code.py), as Inductor prints its own
    kernel_code            each kernel's source
    ir_pre_fusion          the lowered IR
    ir_post_fusion         the scheduled program
    fusion                 the fusion report: every group and why, every pair kept apart and why
    schedule               the program's steps in order (kernels and ATen calls)
    cudagraphs             CUDA graph decisions (why a graph is not captured)
    graph_breaks           (Dynamo's own) where and why a function was split

These are torch's artifact names, on purpose: `TORCH_LOGS` is checked against the registered names when
torch is imported, before any backend is (torch 2.11 parses it before even the device-backend plugins
load), so a name only we registered would make `import torch` fail. Our loggers are children of
`fuse_all.*`; torch routes an enabled artifact to the `fuse_all` log's handler like to its own.

TORCH_TRACE: each compiled graph adds `artifact` entries named `fuse_all_<kind>_<what>` (kind: inference,
forward or backward, which share a compile id), what: aten_graph, ir_pre_fusion, ir_post_fusion,
fusion_report (json), kernel_<name>, output_code, fusion_svg, compile_phases (json), summary (json); all
under the compile id torch is compiling, so tlparse lists them with Dynamo's and AOTAutograd's artifacts
of that frame.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any, Callable

from . import torch_compat

log = logging.getLogger("fuse_all")

LOG_NAME = "fuse_all"
LOG_QNAMES = ["fuse_all", "fuse_all_capture", "fuse_all_ir", "fuse_all_cudagraphs", "fuse_all_lsp"]
# ... and the package of every registered target (`fuse_all_ir.targets`): see `log_qnames`.
ARTIFACTS = ("output_code", "kernel_code", "ir_pre_fusion", "ir_post_fusion", "fusion", "schedule", "cudagraphs")
TRACE_PREFIX = "fuse_all_"

_lock = threading.Lock()
_registered = False
_handlers_ready = False
_artifact_loggers: dict[str, logging.Logger] = {}


def log_qnames() -> list[str]:
    """The loggers `TORCH_LOGS=+fuse_all` turns on: the stages' and each registered target's package."""
    try:
        from fuse_all_ir import registered_targets
        targets = [spec.create.__module__.split(".")[0] for spec in registered_targets().values()]
    except Exception as error:  # noqa: BLE001 - logging must never break an import
        log.debug("fuse-all: no target loggers: %s", error)
        targets = []
    return list(dict.fromkeys([*LOG_QNAMES, *targets]))


def register() -> None:
    """Make `fuse_all` a torch log name (idempotent, never raises)."""
    global _registered
    with _lock:
        if _registered:
            return
        _registered = True
    try:
        torch_compat.register_log(LOG_NAME, log_qnames())
    except Exception as error:  # noqa: BLE001 - logging must never break a compile
        log.debug("fuse-all: torch logging registration failed: %s", error)


def _ensure_handlers() -> None:
    """torch reads TORCH_LOGS and attaches its handlers when it is imported, to the names registered then:
    `fuse_all` was then at most a module name (or half registered: torch imports our package while it
    parses `TORCH_LOGS=fuse_all`). When TORCH_LOGS is set, redo torch's set-up once, at the first compile,
    now that `fuse_all` names every stage. (With TORCH_LOGS set, torch ignores `set_logs` anyway.)"""
    global _handlers_ready
    if _handlers_ready:
        return
    _handlers_ready = True
    if not os.environ.get("TORCH_LOGS"):
        return
    try:
        torch_compat.reinit_logs()
    except Exception as error:  # noqa: BLE001
        log.debug("fuse-all: could not attach torch's log handlers: %s", error)


def artifact_logger(name: str) -> logging.Logger | None:
    """Our logger for torch artifact `name` (None if this torch does not know the name)."""
    if name not in _artifact_loggers:
        try:
            _artifact_loggers[name] = torch_compat.artifact_logger(f"fuse_all.compile", name)
        except Exception:  # noqa: BLE001 - an artifact this torch version does not have
            return None
    return _artifact_loggers[name]


def artifact_enabled(name: str) -> bool:
    logger = artifact_logger(name)
    return logger is not None and logger.isEnabledFor(logging.DEBUG)


def log_artifact(name: str, header: str, text_fn: Callable[[], str]) -> None:
    """Print an artifact when TORCH_LOGS enables it; the text is only built then."""
    _ensure_handlers()
    if artifact_enabled(name):
        artifact_logger(name).debug("%s\n%s", header, text_fn())


def summary_line(summary: dict[str, Any]) -> str:
    where = f" [{summary['compile_id']}]" if summary.get("compile_id") else ""
    text = (f"fuse_all: compiled {summary['kind']} graph {summary['graph_id']}{where} on {summary['device']}: "
            f"{summary['kernels']} kernels ({summary['language'] or '-'}), {summary['aten_calls']} ATen calls, "
            f"{summary['fused_ops']} ops fused, {summary['compile_time_s']:.2f} s")
    if str(summary.get("layout") or "").startswith("channels-last applied"):
        text += "; convolutions run channels-last"
    if summary.get("fallback_reason"):
        text += f"; runs in ATen: {summary['fallback_reason']}"
    if summary.get("from_cache"):
        text += "; loaded from torch's AOTAutograd cache"
    return text


def log_summary(summary: dict[str, Any]) -> None:
    _ensure_handlers()
    log.info("%s", summary_line(summary))


def trace_enabled() -> bool:
    return torch_compat.trace_enabled()


def trace_text(name: str, text_fn: Callable[[], str]) -> None:
    _trace(name, "string", text_fn)


def trace_json(name: str, value_fn: Callable[[], Any]) -> None:
    _trace(name, "json", lambda: json.dumps(value_fn(), default=str))


def _trace(name: str, encoding: str, payload_fn: Callable[[], str]) -> None:
    try:
        torch_compat.trace_artifact(TRACE_PREFIX + name, encoding, payload_fn)
    except Exception as error:  # noqa: BLE001 - the trace is best effort
        log.debug("fuse-all: trace artifact %s not written: %s", name, error)

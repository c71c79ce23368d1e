"""The target registry: which codegens exist, which device types each one serves, and how to make one.

A codegen package plugs in with ONE registration, a `TargetSpec`, found in one of three ways:

* the entry point group ``fuse_all.targets`` of an installed package (its own ``pyproject.toml``)::

      [project.entry-points."fuse_all.targets"]
      cpp = "fuse_all_codegen_cpp.registration:TARGET"

* when no entry point names it (a checkout on ``PYTHONPATH``, an editable install made before the entry
  point existed): a top-level module ``fuse_all_codegen_<name>`` with a ``registration`` submodule
  holding ``TARGET``;
* one call, ``register_target(spec)`` (tests, or a plugin registering at import).

Everything that used to name "cpp"/"triton" reads the registry: the backend picks the target for a graph's
device type (`select_target`), the ``codegen`` option accepts the registered names, the artifact record
and the debug folder take each kernel's source language and file suffix from the spec. A spec and its
registration module stay light (no torch kernels, no compiler, no Triton import): `create` and `choices`
import the heavy parts when a graph actually needs them.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import logging
import pkgutil
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable

from .choices import FusionChoices

log = logging.getLogger("fuse_all")

ENTRY_POINT_GROUP = "fuse_all.targets"
MODULE_PREFIX = "fuse_all_codegen_"
_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")


class TargetUnavailable(RuntimeError):
    """No registered target can run a graph here. `forced`: the user named the target (a configuration
    error to report, not a graph to run in ATen)."""

    def __init__(self, message: str, forced: bool = False):
        super().__init__(message)
        self.forced = forced


def _neutral_choices(options: Any) -> FusionChoices:
    return FusionChoices()


@dataclass(frozen=True)
class TargetSpec:
    """One codegen, as the rest of fuse-all sees it.

    name: the ``options={"codegen": name}`` value, and each kernel's ``language`` in the artifact record.
    device_types: the device types (``"cpu"``, ``"cuda"``) ``codegen="auto"`` picks this target for.
    create(options, choices): the renderer, a `fuse_all_ir.KernelTarget`; `options` is the backend's
        parsed options (attributes ``autotune``, ...), `choices` what `choices(options)` returned.
    choices(options): the target's `FusionChoices` (fusion heuristics and veto, kernel shapes); scheduling
        and the renderer both use that one object.
    source_language: the language id of kernel sources for editors and Markdown fences ("cpp", "python").
    kernel_suffix: the file suffix of a kernel's source in the debug folder (".cpp", ".py").
    cache_dirs: the folders under the cache root the target writes (`fuse-all doctor` and `cache info`).
    unsupported(device): why the target cannot run `device` in this process, or None; by default, None
        exactly for `device_types`.
    priority: among the targets claiming one device type, ``auto`` picks the highest (then the first
        registered).
    """
    name: str
    device_types: tuple[str, ...]
    create: Callable[[Any, FusionChoices], Any]
    choices: Callable[[Any], FusionChoices] = _neutral_choices
    source_language: str = ""
    kernel_suffix: str = ".txt"
    cache_dirs: tuple[str, ...] = ()
    unsupported: Callable[[str], str | None] | None = None
    priority: int = 0
    description: str = ""

    def __post_init__(self):
        if not _NAME.match(self.name) or self.name == "auto":
            raise ValueError(f"target name {self.name!r}: lower-case letters, digits and _, not 'auto'")
        object.__setattr__(self, "device_types", tuple(self.device_types))
        object.__setattr__(self, "cache_dirs", tuple(self.cache_dirs))

    def why_not(self, device: str) -> str | None:
        """Why this target cannot run graphs on `device` here (None: it can)."""
        if self.unsupported is not None:
            return self.unsupported(device)
        if device_type(device) not in self.device_types:
            return f"it runs on {', '.join(self.device_types)} tensors only"
        return None


def device_type(device: str) -> str:
    return str(device).split(":", 1)[0]


_lock = threading.RLock()
_registered: dict[str, TargetSpec] = {}     # register_target(): wins over discovered ones of that name
_discovered: dict[str, TargetSpec] | None = None


def register_target(spec: TargetSpec) -> TargetSpec:
    """Register `spec` in this process (replacing a target of the same name); returns it."""
    if not isinstance(spec, TargetSpec):
        raise TypeError(f"register_target takes a TargetSpec, got {type(spec).__name__}")
    with _lock:
        _registered[spec.name] = spec
    return spec


def unregister_target(name: str) -> None:
    """Forget a target registered with `register_target` (discovered targets stay)."""
    with _lock:
        _registered.pop(name, None)


def registered_targets() -> dict[str, TargetSpec]:
    """Every target by name: discovered ones (entry points, then the module convention) in a stable
    order, then those registered by call."""
    global _discovered
    with _lock:
        if _discovered is None:
            _discovered = _discover()
        merged = {name: spec for name, spec in _discovered.items() if name not in _registered}
        merged.update(_registered)
        return merged


def target_names() -> list[str]:
    return sorted(registered_targets())


def get_target(name: str) -> TargetSpec:
    targets = registered_targets()
    if name not in targets:
        raise KeyError(f"no fuse-all target named {name!r}; registered: {', '.join(sorted(targets)) or 'none'}")
    return targets[name]


def select_target(device: str, requested: str = "auto") -> TargetSpec:
    """The target for a graph on `device`: the named one (`requested`), or for ``"auto"`` the target with
    the highest priority among those claiming the device's type. Raises `TargetUnavailable`."""
    targets = registered_targets()
    if requested != "auto":
        spec = targets.get(requested)
        if spec is None:
            raise TargetUnavailable(f"no target named {requested!r}; registered: {', '.join(sorted(targets))}",
                                    forced=True)
        problem = spec.why_not(device)
        if problem:
            others = [n for n, s in targets.items() if n != requested and s.why_not(device) is None]
            hint = "use codegen='auto'" + "".join(f" or {n!r}" for n in others)
            raise TargetUnavailable(f"codegen={requested!r} cannot run this graph on {device}: {problem}; {hint}",
                                    forced=True)
        return spec
    kind = device_type(device)
    claiming = [s for s in targets.values() if kind in s.device_types]
    if not claiming:
        served = "; ".join(f"{s.name}: {', '.join(s.device_types)}" for s in targets.values())
        raise TargetUnavailable(f"no fuse-all target runs {kind} tensors (registered: {served or 'none'})")
    spec = max(claiming, key=lambda s: s.priority)      # max keeps the first of equal priority
    problem = spec.why_not(device)
    if problem:
        raise TargetUnavailable(f"target {spec.name!r} cannot run this graph on {device}: {problem}")
    return spec


def reset_discovery() -> None:
    """Look for installed targets again at the next query (after installing one in a running process)."""
    global _discovered
    with _lock:
        _discovered = None


def _discover() -> dict[str, TargetSpec]:
    found: dict[str, TargetSpec] = {}
    try:
        entry_points = sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)
    except Exception as error:  # noqa: BLE001 - broken metadata must not stop the module convention
        log.warning("fuse_all: cannot read the %s entry points (%s)", ENTRY_POINT_GROUP, error)
        entry_points = []
    for entry in entry_points:
        _add(found, entry.value, entry.load)
    modules = sorted({m.name for m in pkgutil.iter_modules() if m.name.startswith(MODULE_PREFIX)})
    for module in modules:
        where = f"{module}.registration:TARGET"
        _add(found, where, lambda module=module: importlib.import_module(f"{module}.registration").TARGET,
             only_new=True)
    return found


def _add(found: dict, where: str, load: Callable[[], Any], only_new: bool = False) -> None:
    try:
        spec = load()
        if callable(spec) and not isinstance(spec, TargetSpec):
            spec = spec()
        if not isinstance(spec, TargetSpec):
            raise TypeError(f"expected a TargetSpec, got {type(spec).__name__}")
    except ModuleNotFoundError as error:
        if only_new and error.name and error.name.endswith(".registration"):
            return          # a fuse_all_codegen_* module without a registration: not a target
        log.warning("fuse_all: target %s cannot be loaded (%s: %s)", where, type(error).__name__, error)
        return
    except Exception as error:  # noqa: BLE001 - one broken plugin must not take the others down
        log.warning("fuse_all: target %s cannot be loaded (%s: %s)", where, type(error).__name__, error)
        return
    if spec.name in found:
        if not only_new and found[spec.name] is not spec:
            log.warning("fuse_all: two targets named %r (%s); keeping the first", spec.name, where)
        return
    found[spec.name] = spec

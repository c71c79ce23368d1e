"""The debug folder: with `FUSE_ALL_DEBUG=1` (or torch's `TORCH_COMPILE_DEBUG=1`), one folder per graph.

    <root>/<graph>/aten_graph.txt        the captured ATen graph with user source lines
                   fx_graph_runnable.py  a standalone repro: the graph on random inputs, eager vs fuse_all
                   ir_before_fusion.txt  the lowered IR
                   ir_after_fusion.txt   the scheduled program
                   fusion_report.txt     what fused, and why every other pair did not
                   fusion.svg            the picture of it (ops grouped into kernels, unfused edges' reasons)
                   output_code.py        the runnable host program
                   kernels/<name>.<ext>  each kernel's source
                   graph.json            graph id, Dynamo compile id, AOT graph name, compile phases

With `TORCH_COMPILE_DEBUG=1` <root> is `fuse_all/` inside torch's own run folder
(`torch_compile_debug/run_<time>-pid_<pid>/fuse_all/`) and <graph> is named like Inductor's folders, by
AOTAutograd's graph name and a counter (`model__0_forward_1.0`); graph.json maps it to our graph id.
Otherwise <root> is `$FUSE_ALL_DEBUG_DIR`, else `./fuse_all_debug/run_<timestamp>_<pid>`, and <graph> is
the graph id. The root is printed once per process on stderr. Folders are created 0700 and files written
through O_EXCL temporary files and a rename (never through a symlink); a root that another user owns or may
write to (or, for the default one, a run folder someone created before us) is refused with a warning and a
fresh private folder (`tempfile.mkdtemp`) is used instead. Debug output is best effort: a folder that cannot
be written logs a warning and the compile goes on.
"""
from __future__ import annotations

import itertools
import logging
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path, PurePosixPath
from typing import Mapping

from fuse_all_ir import UnsafeDirectory, atomic_write, check_private

from . import torch_compat

log = logging.getLogger("fuse_all")

ENABLE_VARIABLES = ("FUSE_ALL_DEBUG", "TORCH_COMPILE_DEBUG")
DIR_VARIABLE = "FUSE_ALL_DEBUG_DIR"

ATEN_GRAPH = "aten_graph.txt"
IR_BEFORE_FUSION = "ir_before_fusion.txt"
IR_AFTER_FUSION = "ir_after_fusion.txt"
FUSION_REPORT = "fusion_report.txt"
OUTPUT_CODE = "output_code.py"
FX_GRAPH_RUNNABLE = "fx_graph_runnable.py"
FUSION_SVG = "fusion.svg"
GRAPH_JSON = "graph.json"
KERNELS = "kernels"

_TRUE = {"1", "true", "yes", "on"}

_lock = threading.Lock()
_default_root: Path | None = None
_announced: set[Path] = set()
_prepared: dict[Path, Path] = {}   # root asked for -> root used (itself, or a private replacement)


def kernel_suffix(language: str) -> str:
    """The file suffix of a kernel source of target `language` (`fuse_all_ir.targets`), else .txt."""
    from fuse_all_ir import registered_targets
    spec = registered_targets().get(language)
    return spec.kernel_suffix if spec is not None else ".txt"


def debug_enabled(env: Mapping[str, str] | None = None) -> bool:
    """True when FUSE_ALL_DEBUG or TORCH_COMPILE_DEBUG is set to 1/true/yes/on."""
    env = os.environ if env is None else env
    return any(env.get(name, "").strip().lower() in _TRUE for name in ENABLE_VARIABLES)


def torch_layout(env: Mapping[str, str] | None = None) -> bool:
    """Our folders go inside torch's run folder: TORCH_COMPILE_DEBUG=1 and no FUSE_ALL_DEBUG_DIR."""
    env = os.environ if env is None else env
    return env.get("TORCH_COMPILE_DEBUG", "").strip().lower() in _TRUE and not env.get(DIR_VARIABLE)


def debug_root(env: Mapping[str, str] | None = None) -> Path:
    """The folder that holds this process's graph folders (absolute)."""
    global _default_root
    env = os.environ if env is None else env
    if env.get(DIR_VARIABLE):
        return Path(env[DIR_VARIABLE]).expanduser().absolute()
    if torch_layout(env):
        torch_run = torch_compat.torch_debug_dir()
        if torch_run:
            return Path(torch_run).absolute() / "fuse_all"
    with _lock:
        if _default_root is None:
            # One run folder per process, fixed at its first compile, so all its graphs land together.
            stamp = time.strftime("%Y%m%d_%H%M%S")
            _default_root = Path.cwd() / "fuse_all_debug" / f"run_{stamp}_{os.getpid()}"
        return _default_root


class DebugDir:
    """The debug folder of one graph."""

    def __init__(self, path: Path):
        self.path = Path(path)

    @classmethod
    def for_graph(cls, graph_id: str, *, force: bool = False, aot_name: str | None = None) -> DebugDir | None:
        """The folder of `graph_id`, created; None when debug output is off (and not `force`d) or the
        folder cannot be created. `aot_name` (AOTAutograd's graph name) names it in torch's layout."""
        if not (force or debug_enabled()):
            return None
        if not graph_id or any(c in graph_id for c in "/\\") or graph_id in (".", ".."):
            raise ValueError(f"not a graph id: {graph_id!r}")
        root = debug_root()
        try:
            root = _prepared_root(root)
            if torch_layout() and aot_name and _SAFE_NAME.fullmatch(aot_name):
                folder = _new_numbered_folder(root, aot_name)
            else:
                folder = root / graph_id
                _private_subfolder(folder)
            _private_subfolder(folder / KERNELS)
        except OSError as error:
            log.warning("fuse-all: cannot create the debug folder under %s: %s", root, error)
            return None
        _announce(root)
        return cls(folder)

    def write(self, name: str, text: str) -> Path | None:
        """Write `text` to `name` (a relative path such as "kernels/kernel_0.cpp"); the written path, or
        None when writing failed (logged)."""
        target = self.path / _relative(name)
        try:
            for folder in reversed([p for p in target.parents if self.path in p.parents or p == self.path]):
                _private_subfolder(folder)
            atomic_write(target, text.encode("utf-8"))
        except OSError as error:
            log.warning("fuse-all: cannot write debug file %s: %s", target, error)
            return None
        return target

    def write_kernel(self, name: str, source: str, language: str) -> Path | None:
        """kernels/<name><suffix>: the registered target's `kernel_suffix` (.cpp, .py, ...)."""
        return self.write(f"{KERNELS}/{name}{kernel_suffix(language)}", source)


_SAFE_NAME = re.compile(r"[A-Za-z0-9_.-]+\Z")


def _new_numbered_folder(root: Path, name: str) -> Path:
    """`<root>/<name>.<n>` for the first n not taken (Inductor's scheme), created."""
    for n in itertools.count():
        folder = root / f"{name}.{n}"
        try:
            os.mkdir(folder, 0o700)
            return folder
        except FileExistsError:
            continue
    raise AssertionError("unreachable")


def _prepared_root(root: Path) -> Path:
    """`root`, created and checked; a refused one is replaced by a private folder (once per process)."""
    with _lock:
        if root in _prepared:
            return _prepared[root]
    try:
        if root == _default_root:     # ./fuse_all_debug/run_<stamp>_<pid>: its name is predictable
            root.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            check_private(root.parent, tighten=False)
            try:
                os.mkdir(root, 0o700)
            except FileExistsError:
                raise UnsafeDirectory(f"{root} existed before this process created it") from None
        else:
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
            check_private(root, tighten=False)
            return root               # checked again next time: the user may remove or change it
    except UnsafeDirectory as why:
        used = Path(tempfile.mkdtemp(prefix="fuse_all_debug_"))
        log.warning("fuse-all: not writing debug output under %s (%s); using %s", root, why, used)
    else:
        used = root
    with _lock:
        return _prepared.setdefault(root, used)


def _private_subfolder(folder: Path) -> None:
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        check_private(folder, tighten=False, follow_symlinks=False)


def _relative(name: str) -> PurePosixPath:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or not path.parts or ".." in path.parts:
        raise ValueError(f"debug file names are relative paths inside the graph folder, got {name!r}")
    return path


def _announce(root: Path) -> None:
    with _lock:
        if root in _announced:
            return
        _announced.add(root)
    print(f"fuse-all: debug output in {root}", file=sys.stderr, flush=True)

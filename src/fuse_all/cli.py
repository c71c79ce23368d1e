"""`python -m fuse_all` / `fuse-all`: doctor, cache info|clear, explain SCRIPT [ARGS], report DIR.

Subcommands are entries of `COMMANDS` (name -> (help, add_arguments, run)); another module adds one by
adding an entry (the profiler's `profile` lives with the profiler).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import runpy
import shutil
import stat
import sys
from pathlib import Path
from typing import Callable

from . import config

Out = Callable[[str], None]


# ---- doctor ------------------------------------------------------------------------------------------

def _version(module: str) -> str:
    try:
        imported = __import__(module)
        return str(getattr(imported, "__version__", "?"))
    except Exception as error:  # noqa: BLE001 - doctor reports, it does not fail
        return f"not importable ({type(error).__name__}: {error})"


def _folder_state(path: Path) -> str:
    """'ok (0700, yours)' or what is wrong with it."""
    if not path.exists():
        return "not created yet"
    info = path.stat()
    mode = stat.S_IMODE(info.st_mode)
    problems = []
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        problems.append(f"owned by uid {info.st_uid}, not you")
    if mode & 0o022:
        problems.append("writable by others")
    return f"{'ok' if not problems else 'UNSAFE: ' + ', '.join(problems)} (mode {mode:o})"


def _cxx() -> str:
    if os.environ.get("CXX"):
        found = shutil.which(os.environ["CXX"].split()[0])
        return f"$CXX={os.environ['CXX']} ({found or 'not found'})"
    for name in ("g++", "c++", "clang++"):
        if shutil.which(name):
            return shutil.which(name)
    return "none found: CPU graphs will run in ATen (install g++ or set $CXX)"


def doctor(args, out: Out = print) -> int:
    import torch
    from . import artifacts, debug
    out(f"fuse-all {_version('fuse_all')}  python {platform.python_version()}  {platform.platform()}")
    out(f"torch {torch.__version__}  triton {_version('triton')}")
    from fuse_all_ir import registered_targets
    target_modules = [spec.create.__module__.split(".")[0] for spec in registered_targets().values()]
    for module in dict.fromkeys(("fuse_all_capture", "fuse_all_ir", *target_modules, "fuse_all_cudagraphs",
                                 "fuse_all_lsp")):
        out(f"  {module}: {_version(module)}")
    out(f"backend registered: {'fuse_all' in torch.compiler.list_backends()}")
    for spec in registered_targets().values():
        caches = f"; caches {', '.join(d + '/' for d in spec.cache_dirs)}" if spec.cache_dirs else ""
        out(f"target {spec.name}: {', '.join(spec.device_types)} tensors{caches}"
            + (f" ({spec.description})" if spec.description else ""))
    out(f"C++ compiler: {_cxx()}")
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            out(f"GPU {index}: {torch.cuda.get_device_name(index)} (CUDA {torch.version.cuda}): Triton kernels")
    else:
        out("GPU: none (CUDA not available): CPU graphs get C++ kernels")
    root = config.cache_root()
    out(f"cache root: {root}  {_folder_state(root)}")
    if root.is_dir():
        for child in sorted(p for p in root.iterdir() if p.is_dir()):
            out(f"  {child.name}/: {_folder_state(child)}")
    records = artifacts.default_artifact_dir()
    out(f"artifact records: {records}  {_folder_state(records)}")
    out(f"debug folder: {'on, under ' + str(debug.debug_root()) if debug.debug_enabled() else 'off'}")
    for name in ("TORCH_LOGS", "TORCH_TRACE", "TORCH_COMPILE_DEBUG", *(v.name for v in config.VARIABLES)):
        if os.environ.get(name):
            out(f"  {name}={os.environ[name]}")
    return 0


# ---- cache ---------------------------------------------------------------------------------------------

def _size(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file() and not p.is_symlink()]
    return len(files), sum(p.stat().st_size for p in files)


def cache(args, out: Out = print) -> int:
    root = config.cache_root()
    if not root.is_dir():
        out(f"{root}: no cache yet")
        return 0
    entries = sorted(p for p in root.iterdir() if p.is_dir() and p.name != "artifacts")
    if args.action == "info":
        out(f"{root}  {_folder_state(root)}")
        for entry in entries:
            count, size = _size(entry)
            out(f"  {entry.name:<12} {count:6d} files  {size / 1e6:9.1f} MB")
        return 0
    if hasattr(os, "getuid") and root.stat().st_uid != os.getuid():
        out(f"{root} is not yours: not touching it")
        return 1
    for entry in entries:
        shutil.rmtree(entry)
        out(f"removed {entry}")
    return 0


# ---- explain -------------------------------------------------------------------------------------------

def explain(args, out: Out = print) -> int:
    """Run SCRIPT as __main__ with torch.compile's default backend set to fuse_all, then explain."""
    import torch
    import fuse_all
    script = Path(args.script)
    if not script.is_file():
        out(f"fuse-all explain: no such script: {script}")
        return 2
    original_compile = torch.compile

    def compile_with_fuse_all(model=None, **kwargs):
        kwargs.setdefault("backend", "fuse_all")
        return original_compile(model, **kwargs) if model is not None else original_compile(**kwargs)

    fuse_all.reset()
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [str(script), *args.args]
    sys.path.insert(0, str(script.resolve().parent))
    torch.compile = compile_with_fuse_all
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as done:
        if done.code not in (None, 0):
            out(f"fuse-all explain: {script} exited with {done.code}")
    finally:
        torch.compile = original_compile
        sys.argv, sys.path[:] = saved_argv, saved_path
    out("")
    out(explain_text(fuse_all.compiled_graphs()))
    return 0


def explain_text(graphs) -> str:
    if not graphs:
        return "fuse-all: nothing was compiled (does the script call torch.compile and run the result?)"
    lines = [f"fuse-all: {len(graphs)} compiled graphs"]
    for graph in graphs:
        where = f" [{graph.compile_id}]" if graph.compile_id else ""
        lines.append("")
        lines.append(f"{graph.kind} graph {graph.graph_id}{where}"
                     f"{' of ' + graph.function if getattr(graph, 'function', None) else ''} on {graph.device}: "
                     f"{len(graph.kernels)} kernels, {len(graph.externs)} ATen calls, {graph.compile_time_s:.2f} s")
        if graph.fallback_reason:
            lines.append(f"  runs in ATen: {graph.fallback_reason}")
        report = graph.report.to_json() if graph.report is not None else {"groups": [], "rejected": []}
        for group in report["groups"]:
            ops = ", ".join(op.removeprefix("aten.") for op in group["aten_ops"])
            lines.append(f"  {group['kernel']}: {ops}  ({group['why']})")
        for extern in graph.externs:
            lines.append(f"  ATen {extern.target}: {extern.reason}")
        for rejected in report["rejected"]:
            lines.append(f"  not fused {rejected['producer']} -> {rejected['consumer']}: {rejected['reason']}")
        if graph.fusion_svg:
            lines.append(f"  picture: {graph.fusion_svg}")
    return "\n".join(lines)


# ---- report --------------------------------------------------------------------------------------------

def report(args, out: Out = print) -> int:
    folder = Path(args.dir)
    if not folder.is_dir():
        out(f"fuse-all report: not a folder: {folder}")
        return 2
    graphs = sorted(folder.rglob("graph.json"))
    traces = [p for p in sorted(folder.rglob("*.log")) if _is_trace(p)]
    if not graphs and not traces:
        out(f"fuse-all report: {folder} holds neither a fuse-all debug folder nor a TORCH_TRACE log")
        return 1
    for path in graphs:
        facts = json.loads(path.read_text())
        out(_facts_line(facts, str(path.parent.relative_to(folder))))
    for path in traces:
        out(f"TORCH_TRACE {path.relative_to(folder)}:")
        for compile_id, facts, names in _trace_summaries(path):
            out(_facts_line(facts, f"[{compile_id}]"))
            kernels = [n for n in names if "_kernel_" in n]
            shown = [n for n in names if "_kernel_" not in n] + ([f"{len(kernels)} kernel sources"] if kernels else [])
            out(f"    artifacts: {', '.join(shown)}")
    return 0


def _facts_line(facts: dict, where: str) -> str:
    text = (f"{where}: {facts.get('kind')} graph {facts.get('graph_id')} [{facts.get('compile_id')}] on "
            f"{facts.get('device')}: {facts.get('kernels')} kernels, {facts.get('aten_calls')} ATen calls, "
            f"{facts.get('fused_ops')} ops fused, {facts.get('rejected_pairs')} pairs not fused, "
            f"{facts.get('compile_time_s', 0):.2f} s")
    phases = facts.get("phases_s") or {}
    if phases:
        text += " (" + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()) + ")"
    if facts.get("fallback_reason"):
        text += f"; runs in ATen: {facts['fallback_reason']}"
    return text


def _is_trace(path: Path) -> bool:
    with open(path, encoding="utf-8", errors="replace") as f:
        first = f.readline()
    return bool(re.match(r"[VIWE]\d{4} ", first)) and "{" in first


def _trace_summaries(path: Path):
    """(compile id, summary facts, our artifact names) per compiled graph of a TORCH_TRACE log."""
    names: dict[str, list[str]] = {}
    summaries = []
    envelope, payload = None, []

    def flush():
        if envelope is None:
            return
        artifact = envelope.get("artifact") or {}
        name = artifact.get("name", "")
        if not name.startswith("fuse_all_"):
            return
        compile_id = f"{envelope.get('frame_id')}/{envelope.get('frame_compile_id')}"
        names.setdefault(compile_id, []).append(name)
        if name.endswith("_summary"):
            summaries.append((compile_id, json.loads("\n".join(payload)), names.pop(compile_id)))

    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("\t"):
                payload.append(line[1:].rstrip("\n"))
                continue
            flush()
            try:
                envelope, payload = json.loads(line[line.index("{"):]), []
            except ValueError:
                envelope, payload = None, []
    flush()
    return summaries


# ---- main ----------------------------------------------------------------------------------------------

def _cache_arguments(parser):
    parser.add_argument("action", choices=("info", "clear"))


def _explain_arguments(parser):
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)


def _report_arguments(parser):
    parser.add_argument("dir", help="a debug folder (FUSE_ALL_DEBUG / TORCH_COMPILE_DEBUG) or a TORCH_TRACE folder")


COMMANDS = {
    "doctor": ("versions, compilers, GPU, cache folders and their permissions", lambda p: None, doctor),
    "cache": ("show (info) or delete (clear) fuse-all's compile caches", _cache_arguments, cache),
    "explain": ("run a script with the fuse_all backend, then explain every compiled graph", _explain_arguments,
                explain),
    "report": ("summarise a debug folder or a TORCH_TRACE folder", _report_arguments, report),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fuse-all", description="fuse-all, a torch.compile backend")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, add_arguments, _) in COMMANDS.items():
        add_arguments(commands.add_parser(name, help=help_text, description=help_text))
    args = parser.parse_args(argv)
    return COMMANDS[args.command][2](args)


if __name__ == "__main__":
    sys.exit(main())

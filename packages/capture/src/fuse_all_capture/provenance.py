"""Source provenance: which user line each ATen node came from, and which function Dynamo compiled.

Dynamo records a Python traceback in `node.meta["stack_trace"]` for every op it traces, and AOTAutograd
copies it onto the ATen nodes it produces (forward and, via `seq_nr`, backward). We turn that text into
`node.meta["source_loc"] = {"file", "line", "code", "function"}` using the innermost frame that is not
torch's own code: for a model from `transformers` that is the library's `forward`, which is what the
user reads when they step into the model.
"""
from __future__ import annotations

import ast
import linecache
import os
import re
from dataclasses import dataclass
from typing import Any, Iterable

from .compat import torch_source_dirs

SOURCE_LOC = "source_loc"

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+?)\s*$')
# Dynamo names the continuation after a graph break `torch_dynamo_resume_in_<function>_at_<line>`.
_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<name>.+)_at_(?P<line>\d+)$")


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str
    code: str


@dataclass(frozen=True)
class FunctionInfo:
    """The user function Dynamo compiled. Lines are 1-based; `first_line` is the `def` line."""

    name: str
    file: str
    first_line: int
    last_line: int | None = None
    qualname: str | None = None  # e.g. "BertModel.forward", "outer.<locals>.inner"


def parse_stack_trace(text: str | None) -> list[Frame]:
    """Frames of a traceback text, outermost first; the code line is the one after each `File` line."""
    if not text:
        return []
    lines = text.splitlines()
    frames = []
    for index, line in enumerate(lines):
        match = _FRAME.match(line)
        if not match:
            continue
        code = ""
        if index + 1 < len(lines) and not _FRAME.match(lines[index + 1]):
            candidate = lines[index + 1].strip()
            # Python 3.11 adds a `^^^^` marker line under the code; it is never the code itself.
            if candidate and set(candidate) - set("^~ "):
                code = candidate
        file = match["file"]
        if not file.startswith("<"):
            file = os.path.abspath(file)
        frames.append(Frame(file, int(match["line"]), match["function"], code))
    return frames


def is_user_file(file: str) -> bool:
    """False for torch's own sources and for code that has no file (`<string>`, `<eval_with_key>`)."""
    if not file or file.startswith("<") or not os.path.isabs(file):
        return False
    return not file.startswith(torch_source_dirs())


def innermost_user_frame(frames: list[Frame]) -> Frame | None:
    for frame in reversed(frames):
        if is_user_file(frame.file):
            return frame
    return None


def outermost_user_frame(frames: list[Frame]) -> Frame | None:
    for frame in frames:
        if is_user_file(frame.file):
            return frame
    return None


def source_loc(frame: Frame) -> dict[str, Any]:
    code = frame.code or linecache.getline(frame.file, frame.line).strip()
    return {"file": frame.file, "line": frame.line, "code": code, "function": frame.function}


def annotate_nodes(nodes: Iterable[Any], by_seq_nr: dict[int, dict[str, Any]] | None = None) -> dict[int, dict[str, Any]]:
    """Set `meta["source_loc"]` on every node whose stack trace has a user frame.

    A node without its own trace borrows the location of a forward node with the same `seq_nr` from
    `by_seq_nr` (backward nodes carry the seq_nr of the forward op they differentiate). Returns the
    seq_nr -> location map of this graph, to serve a later backward graph.
    """
    by_seq_nr = by_seq_nr or {}
    seen: dict[int, dict[str, Any]] = {}
    parsed: dict[str, dict[str, Any] | None] = {}  # many nodes of one user line share a trace text
    for node in nodes:
        text = node.meta.get("stack_trace")
        location = None
        if text:
            if text not in parsed:
                frame = innermost_user_frame(parse_stack_trace(text))
                parsed[text] = source_loc(frame) if frame else None
            location = parsed[text]
        seq_nr = node.meta.get("seq_nr")
        if location is None and seq_nr is not None:
            location = by_seq_nr.get(seq_nr)
        if location is None:
            continue
        node.meta[SOURCE_LOC] = dict(location)
        if seq_nr is not None:
            seen.setdefault(seq_nr, location)
    return seen


# ---- which function was compiled -----------------------------------------------------------------------

def function_from_code(code: Any) -> FunctionInfo | None:
    """FunctionInfo of the frame Dynamo compiles, with the `def` line and end line found by `ast`."""
    file = getattr(code, "co_filename", None)
    name = getattr(code, "co_name", None)
    if not file or not name or file.startswith("<"):
        return None
    file = os.path.abspath(file)
    if not is_user_file(file):
        return None  # torch's own frame (e.g. Module._call_impl): the stack traces know the user's function
    hint = code.co_firstlineno
    resume = _RESUME.match(name)
    if resume:
        name, hint = resume["name"], int(resume["line"])
    span = function_span(file, name, hint)
    if span is not None:
        return FunctionInfo(name, file, span[1], span[2], span[0])
    # No readable source (e.g. a notebook cell): fall back to what the code object knows.
    lines = [line for _, _, line in code.co_lines() if line is not None] if hasattr(code, "co_lines") else []
    return FunctionInfo(name, file, code.co_firstlineno, max(lines) if lines else None)


def function_from_frames(frames: list[Frame]) -> FunctionInfo | None:
    """Fallback when the compiled code object is unknown: the outermost user frame of a stack trace."""
    frame = outermost_user_frame(frames)
    if frame is None:
        return None
    span = function_span(frame.file, frame.function, frame.line)
    if span is not None:
        return FunctionInfo(frame.function, frame.file, span[1], span[2], span[0])
    return FunctionInfo(frame.function, frame.file, frame.line, None)


def function_span(file: str, name: str, line: int) -> tuple[str, int, int] | None:
    """(qualified name, def line, last line) of the innermost function called `name` around `line`.

    `line` may be a decorator line (what `co_firstlineno` points at) or any line of the body. Names that
    are not in the file (`<lambda>` aside) give None.
    """
    found = _find_function(file, name, line)
    if found is None:
        return None
    qualname, node = found
    return qualname, node.lineno, node.end_lineno or node.lineno


def _find_function(file: str, name: str, line: int) -> tuple[str, Any] | None:
    best = None
    for qualname, node in _functions(file):
        if getattr(node, "name", "<lambda>") != name:
            continue
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        if start <= line <= (node.end_lineno or node.lineno):
            if best is None or node.lineno >= best[1].lineno:  # a nested function starts later: innermost wins
                best = (qualname, node)
    return best


def unwrap_decorators(function: FunctionInfo, stacks: list[list[Frame]]) -> FunctionInfo:
    """Step from a decorator's wrapper into the function it wraps.

    Dynamo compiles the frame it is called on; for a decorated `forward` (transformers decorates most of
    them) that is the decorator's `wrapper(*args, **kwargs)`, a place no user looks for their model. We
    step in while the current function takes `*args`/`**kwargs` and every traced op of the graph passes
    through one and the same callee: then the current function only forwards its arguments.
    """
    for _ in range(8):  # decorators stack, but not deeply
        found = _find_function(function.file, function.name, function.first_line)
        arguments = getattr(found[1], "args", None) if found else None
        if arguments is None or not (arguments.vararg or arguments.kwarg):
            return function
        callees = set()
        for frames in stacks:
            user = [f for f in frames if is_user_file(f.file)]
            here = [i for i, f in enumerate(user) if f.file == function.file and f.function == function.name
                    and function.first_line <= f.line <= (function.last_line or f.line)]
            if not here or here[0] + 1 >= len(user):
                return function  # an op traced in the wrapper itself
            callee = user[here[0] + 1]
            callees.add((callee.file, callee.function, function_span(callee.file, callee.function, callee.line)))
        if len(callees) != 1:
            return function
        file, name, span = callees.pop()
        if span is None:
            return function
        function = FunctionInfo(name, file, span[1], span[2], span[0])
    return function


_AST_CACHE: dict[str, tuple[tuple[int, int], list[tuple[str, ast.AST]]]] = {}


def _functions(file: str) -> list[tuple[str, ast.AST]]:
    """Every def/lambda of a file with its qualified name, cached until the file changes."""
    try:
        stat = os.stat(file)
    except OSError:
        return []
    key = (stat.st_mtime_ns, stat.st_size)
    cached = _AST_CACHE.get(file)
    if cached is not None and cached[0] == key:
        return cached[1]
    try:
        with open(file, "rb") as handle:
            tree = ast.parse(handle.read(), filename=file)
    except (OSError, SyntaxError, ValueError):
        return []
    found: list[tuple[str, ast.AST]] = []
    _collect(tree, "", found)
    _AST_CACHE[file] = (key, found)
    return found


def _collect(node: ast.AST, prefix: str, found: list[tuple[str, ast.AST]]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            name = getattr(child, "name", "<lambda>")
            found.append((prefix + name, child))
            _collect(child, f"{prefix}{name}.<locals>.", found)
        elif isinstance(child, ast.ClassDef):
            _collect(child, f"{prefix}{child.name}.", found)
        else:
            _collect(child, prefix, found)

"""Find compiled functions and `torch.compile(...)` call sites in Python source with `ast`.

The user's code is only parsed, never imported or run.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class FunctionInfo:
    name: str
    qualname: str
    class_name: str | None
    def_line: int
    first_line: int  # the first decorator's line, or the def line
    last_line: int
    name_line: int
    name_start: int  # code-point columns of the name on name_line
    name_end: int
    compile_decorator: bool
    backend: str | None  # the backend= constant of @torch.compile(...), when there is one


@dataclass(frozen=True)
class CompileCall:
    line: int
    end_line: int
    start: int  # code-point columns of the call on `line` / `end_line`
    end: int
    target: str | None  # dotted name of the callable passed, e.g. "model" or "model.forward"
    constructed: str | None  # dotted name of the class when the argument is `Net(...)` directly
    backend: str | None


@dataclass(frozen=True)
class Import:
    module: str  # absolute or relative ("." prefixed) module name
    attribute: str | None  # None for `import module`


@dataclass
class SourceScan:
    functions: list[FunctionInfo] = field(default_factory=list)
    calls: list[CompileCall] = field(default_factory=list)
    imports: dict[str, Import] = field(default_factory=dict)
    # module-level and function-level `name = Ctor(...)`: the dotted constructor of the last one
    constructions: dict[str, str] = field(default_factory=dict)
    syntax_error: str | None = None

    def functions_at(self, line: int) -> list[FunctionInfo]:
        """Functions whose span holds `line`, innermost first."""
        holding = [f for f in self.functions if f.first_line <= line <= f.last_line]
        return sorted(holding, key=lambda f: f.first_line, reverse=True)

    def method(self, class_name: str, name: str) -> FunctionInfo | None:
        return next((f for f in self.functions if f.class_name == class_name and f.name == name), None)

    def function(self, name: str) -> FunctionInfo | None:
        return next((f for f in self.functions if f.class_name is None and f.name == name), None)

    def calls_at(self, line: int) -> list[CompileCall]:
        return [call for call in self.calls if call.line <= line <= call.end_line]


def dotted_name(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _constructor(node: ast.AST) -> str | None:
    """`Net(...)`, `Net(...).eval()`, `Net(...).to(device)` -> "Net"."""
    while isinstance(node, ast.Call):
        inner = node.func
        if isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Call):
            node = inner.value
            continue
        return dotted_name(inner)
    return None


def _string_keyword(call: ast.Call, name: str) -> str | None:
    for keyword in call.keywords:
        if keyword.arg == name and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
            return keyword.value.value
    return None


class _Scanner(ast.NodeVisitor):
    def __init__(self, lines: list[str]):
        self.lines = lines
        self.scan = SourceScan()
        self.torch_names = {"torch"}  # names bound to the torch module
        self.compile_names: set[str] = set()  # names bound to torch.compile
        self.scope: list[tuple[str, str]] = []  # ("class" | "def", name)
        self.decorator_calls: set[int] = set()

    def _column(self, line: int, byte_offset: int) -> int:
        """ast columns are UTF-8 byte offsets; features work in code points."""
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return len(text.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))

    def is_torch_compile(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.compile_names
        return (
            isinstance(node, ast.Attribute) and node.attr == "compile" and dotted_name(node.value) in self.torch_names
        )

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            local = alias.asname or alias.name.split(".")[0]
            if alias.name == "torch":
                self.torch_names.add(local)
            self.scan.imports[local] = Import(alias.name if alias.asname else local, None)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = "." * node.level + (node.module or "")
        for alias in node.names:
            local = alias.asname or alias.name
            if module == "torch" and alias.name == "compile":
                self.compile_names.add(local)
            self.scan.imports[local] = Import(module, alias.name)

    def visit_Assign(self, node: ast.Assign) -> None:
        constructed = _constructor(node.value)
        if constructed and not (isinstance(node.value, ast.Call) and self.is_torch_compile(node.value.func)):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.scan.constructions[target.id] = constructed
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(("class", node.name))
        self.generic_visit(node)
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        compile_decorator, backend = False, None
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            if self.is_torch_compile(target):
                compile_decorator = True
                if isinstance(decorator, ast.Call):
                    self.decorator_calls.add(id(decorator))
                    backend = _string_keyword(decorator, "backend")
        name_line, name_start = self._name_position(node)
        class_name = self.scope[-1][1] if self.scope and self.scope[-1][0] == "class" else None
        self.scan.functions.append(
            FunctionInfo(
                name=node.name,
                qualname=".".join([name for _, name in self.scope] + [node.name]),
                class_name=class_name,
                def_line=node.lineno,
                first_line=min([node.lineno] + [d.lineno for d in node.decorator_list]),
                last_line=node.end_lineno or node.lineno,
                name_line=name_line,
                name_start=name_start,
                name_end=name_start + len(node.name),
                compile_decorator=compile_decorator,
                backend=backend,
            )
        )
        self.scope.append(("def", node.name))
        self.generic_visit(node)
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def _name_position(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[int, int]:
        line = self.lines[node.lineno - 1] if node.lineno <= len(self.lines) else ""
        start = self._column(node.lineno, node.col_offset)
        index = line.find(node.name, start)
        return node.lineno, index if index >= 0 else start

    def visit_Call(self, node: ast.Call) -> None:
        if self.is_torch_compile(node.func) and id(node) not in self.decorator_calls:
            argument = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "model"), None)
            end_line = node.end_lineno or node.lineno
            self.scan.calls.append(
                CompileCall(
                    line=node.lineno,
                    end_line=end_line,
                    start=self._column(node.lineno, node.col_offset),
                    end=self._column(end_line, node.end_col_offset or 0),
                    target=dotted_name(argument) if argument is not None else None,
                    constructed=_constructor(argument) if isinstance(argument, ast.Call) else None,
                    backend=_string_keyword(node, "backend"),
                )
            )
        self.generic_visit(node)


def scan_source(text: str) -> SourceScan:
    """Scan one module's text; a file that does not parse yields an empty scan with the error."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError) as error:
        return SourceScan(syntax_error=str(error))
    scanner = _Scanner(re.split(r"\r\n|\r|\n", text))
    scanner.visit(tree)
    return scanner.scan

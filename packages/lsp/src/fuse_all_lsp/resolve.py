"""Which function a `torch.compile(x)` call compiles, found statically.

`x` may be a function, a module instance (Dynamo compiles its `forward`), a bound `forward`, or
any of those imported from a module of the workspace. Other files are read and parsed, never run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from .pysource import CompileCall, FunctionInfo, SourceScan


@dataclass(frozen=True)
class Target:
    file: str
    function: FunctionInfo


ScanFile = Callable[[str], "SourceScan | None"]


def module_file(module: str, importer: str, roots: list[str]) -> str | None:
    """The .py file of `module` imported from `importer`, looked up beside it and under `roots`."""
    if module.startswith("."):
        level = len(module) - len(module.lstrip("."))
        base = os.path.dirname(importer)
        for _ in range(level - 1):
            base = os.path.dirname(base)
        bases, parts = [base], [p for p in module.lstrip(".").split(".") if p]
    else:
        bases, parts = [os.path.dirname(importer), *roots], module.split(".")
    for base in bases:
        stem = os.path.join(base, *parts)
        for candidate in (stem + ".py", os.path.join(stem, "__init__.py")):
            if parts and os.path.isfile(candidate):
                return candidate
    return None


class CallResolver:
    def __init__(self, path: str, scan: SourceScan, roots: list[str], scan_file: ScanFile):
        self.path = path
        self.scan = scan
        self.roots = roots
        self.scan_file = scan_file

    def resolve(self, call: CompileCall) -> Target | None:
        if call.constructed:
            return self._class_method(call.constructed, "forward")
        if not call.target:
            return None
        *base, last = call.target.split(".")
        if not base:
            return self._name(last)
        if len(base) == 1 and base[0] in self.scan.constructions:
            return self._class_method(self.scan.constructions[base[0]], last)
        return self._imported(".".join(base), last, function=True)

    def _name(self, name: str) -> Target | None:
        function = self.scan.function(name)
        if function is not None:
            return Target(self.path, function)
        if name in self.scan.constructions:
            return self._class_method(self.scan.constructions[name], "forward")
        imported = self.scan.imports.get(name)
        if imported is not None and imported.attribute is not None:
            return self._in_module(imported.module, imported.attribute, None) or self._in_module(
                imported.module, imported.attribute, "forward"
            )
        return None

    def _class_method(self, class_name: str, method: str) -> Target | None:
        *module, name = class_name.split(".")
        if module:
            return self._imported(".".join(module), name, method=method)
        found = self.scan.method(name, method)
        if found is not None:
            return Target(self.path, found)
        imported = self.scan.imports.get(name)
        if imported is not None and imported.attribute is not None:
            return self._in_module(imported.module, imported.attribute, method)
        return None

    def _imported(self, alias: str, name: str, function: bool = False, method: str | None = None) -> Target | None:
        """`alias.name` where `alias` is an imported module (or a dotted path through one)."""
        head, *rest = alias.split(".")
        imported = self.scan.imports.get(head)
        if imported is None:
            return None
        module = imported.module if imported.attribute is None else f"{imported.module}.{imported.attribute}"
        module = ".".join([module, *rest])
        return self._in_module(module, name, None if function else method)

    def _in_module(self, module: str, name: str, method: str | None) -> Target | None:
        file = module_file(module, self.path, self.roots)
        scan = self.scan_file(file) if file else None
        if file is None or scan is None:
            return None
        found = scan.method(name, method) if method else scan.function(name)
        return Target(file, found) if found is not None else None

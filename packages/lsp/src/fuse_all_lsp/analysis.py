"""One open document seen against the current records: what each LSP feature answers there.

Pure: no I/O but reading other workspace modules through `scan_file`, no server state.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec

from . import profile_view, render
from .index import RecordIndex, Shown, assign_to_functions
from .pysource import CompileCall, FunctionInfo, scan_source
from .resolve import CallResolver, ScanFile

SOURCE = "fuse-all"
OPEN_OUTPUT_CODE = "fuse-all.openOutputCode"
COMPILE_FILE = "fuse-all.compileFile"
PROFILE_FILE = "fuse-all.profileFile"
SHOW_FUSION = "fuse-all.showFusion"


@dataclass(frozen=True)
class CallTarget:
    label: str
    shown: list[Shown]
    resolved: bool


class Analysis:
    def __init__(
        self, path: str, text: str, index: RecordIndex, roots: list[str], scan_file: ScanFile, codec: PositionCodec
    ):
        self.path = path
        self.index = index
        self.scan = scan_source(text)
        self.lines = re.split(r"\r\n|\r|\n", text)
        self.codec = codec
        self.owned = assign_to_functions(index.of_file(path), self.scan)
        self.hits = index.hits(path)
        self.scan_file = scan_file
        self.resolver = CallResolver(path, self.scan, roots, scan_file)

    def _range(self, line: int, start: int, end_line: int | None = None, end: int | None = None) -> types.Range:
        """A 1-based line and code-point columns -> an LSP range in the client's encoding."""
        end_line = line if end_line is None else end_line
        if end is None:
            end = len(self.lines[end_line - 1]) if 0 < end_line <= len(self.lines) else 0
        return types.Range(
            start=self.codec.position_to_client_units(self.lines, types.Position(line - 1, start)),
            end=self.codec.position_to_client_units(self.lines, types.Position(end_line - 1, end)),
        )

    def _line_range(self, line: int) -> types.Range:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return self._range(line, len(text) - len(text.lstrip()))

    def _name_range(self, function: FunctionInfo) -> types.Range:
        return self._range(function.name_line, function.name_start, end=function.name_end)

    def compiled_functions(self) -> list[tuple[FunctionInfo, list[Shown]]]:
        """Functions with records, and decorated ones still waiting for their first compile."""
        found = [(f, self.owned.get(f, [])) for f in self.scan.functions if f.compile_decorator or f in self.owned]
        return sorted(found, key=lambda pair: pair[0].def_line)

    def call_target(self, call: CompileCall) -> CallTarget:
        target = self.resolver.resolve(call)
        if target is None:
            label = call.target or call.constructed or "the callable"
            return CallTarget(label, self.index.of_file(self.path), False)
        if target.file == self.path:
            return CallTarget(target.function.qualname, self.owned.get(target.function, []), True)
        scan = self.scan_file(target.file)
        owned = assign_to_functions(self.index.of_file(target.file), scan) if scan else {}
        label = f"{target.function.qualname} ({Path(target.file).name})"
        return CallTarget(label, owned.get(target.function, []), True)

    def _header_at(self, line: int) -> tuple[FunctionInfo, list[Shown]] | None:
        for function, shown in self.compiled_functions():
            if function.first_line <= line <= function.def_line:
                return function, shown
        return None

    def hover(self, line: int) -> types.Hover | None:
        header = self._header_at(line)
        if header is not None:
            function, shown = header
            text = (
                render.function_hover(function.qualname, shown)
                if shown
                else render.not_compiled_hover(function.qualname, function.backend)
            )
            return _hover(text, self._name_range(function))
        for call in self.scan.calls_at(line):
            target = self.call_target(call)
            if target.shown:
                text = render.function_hover(target.label, target.shown)
                if not target.resolved:
                    text = (
                        f"Could not tell statically which function {render.code_span(target.label)} is; "
                        f"showing every record compiled from this file.\n\n{text}"
                    )
            else:
                text = render.not_compiled_hover(target.label, call.backend)
            return _hover(text, self._range(call.line, call.start, call.end_line, call.end))
        hits = self.hits.get(line, [])
        sections = [profile_view.hover_section(line, hits), render.line_hover(line, hits)]
        text = "\n\n---\n\n".join(section for section in sections if section)
        return _hover(text, self._line_range(line)) if text else None

    def code_lenses(self) -> list[types.CodeLens]:
        lenses = []
        for function, shown in self.compiled_functions():
            lenses += self._lenses(function.first_line, shown)
        for call in self.scan.calls:
            lenses += self._lenses(call.line, self.call_target(call).shown)
        return lenses

    def _lenses(self, line: int, shown: list[Shown]) -> list[types.CodeLens]:
        """The summary (opens the generated code), Profile, and the fusion picture when there is one."""
        where = self._range(line, 0, end=0)
        lenses = [self._lens(line, shown)]
        timing = profile_view.graph_time(shown)
        title = f"{timing} · Profile again" if timing else "Profile"
        lenses.append(types.CodeLens(where, types.Command(title=title, command=PROFILE_FILE, arguments=[_uri(self.path)])))
        pictures = [s.record for s in shown if s.record.fusion_svg]
        for record in pictures:
            title = "Fusion picture" + (f": {record.graph_kind or record.graph_id}" if len(pictures) > 1 else "")
            lenses.append(types.CodeLens(where, types.Command(title=title, command=SHOW_FUSION, arguments=[record.fusion_svg, record.graph_id])))
        return lenses

    def _lens(self, line: int, shown: list[Shown]) -> types.CodeLens:
        if not shown:
            command = types.Command(
                title="fuse-all: not compiled yet · Compile this file",
                command=COMPILE_FILE,
                arguments=[_uri(self.path)],
            )
            return types.CodeLens(range=self._range(line, 0, end=0), command=command)
        newest = shown[-1].record
        first_kernel = next((k.output_code_line for k in newest.kernels if k.output_code_line), None)
        arguments = [newest.output_code, first_kernel or 1] if newest.output_code else []
        command = types.Command(
            title=render.lens_title(shown), command=OPEN_OUTPUT_CODE if arguments else "", arguments=arguments
        )
        return types.CodeLens(range=self._range(line, 0, end=0), command=command)

    def definitions(self, line: int) -> list[types.Location]:
        header = self._header_at(line)
        if header is not None:
            shown = header[1]
        else:
            calls = self.scan.calls_at(line)
            shown = self.call_target(calls[0]).shown if calls else []
        if shown:
            pairs = [(s.record, k) for s in shown for k in s.record.kernels]
        else:
            pairs = [(h.shown.record, h.kernel) for h in self.hits.get(line, []) if h.kernel is not None]
        locations = {}
        for record, kernel in pairs:
            if record.output_code and kernel.output_code_line:
                locations[(record.output_code, kernel.output_code_line)] = types.Location(
                    uri=_uri(record.output_code),
                    range=types.Range(
                        types.Position(kernel.output_code_line - 1, 0), types.Position(kernel.output_code_line - 1, 0)
                    ),
                )
        return list(locations.values())

    def inlay_hints(self, first_line: int, last_line: int) -> list[types.InlayHint]:
        """`→ kernel_0` after each line whose ops went into a kernel; once profiled, the line's time instead
        (VS Code cuts a line's hints at 43 characters together: the kernel names move to the tooltip)."""
        hints = []
        for line in sorted(self.hits):
            if not first_line <= line <= min(last_line, len(self.lines)):
                continue
            end = self._range(line, len(self.lines[line - 1])).start
            hits = self.hits[line]
            cost = profile_view.line_cost(hits)
            label = profile_view.inlay_label(cost) if cost else render.inlay_label(hits)
            if label is None:
                continue
            tooltip = "\n".join(
                part
                for part in (render.inlay_label(hits) if cost else None, render.inlay_tooltip(hits),
                             profile_view.inlay_tooltip(cost) if cost else None)
                if part
            )
            hints.append(types.InlayHint(position=end, label=label, padding_left=True, tooltip=tooltip or None))
        return hints

    def diagnostics(self) -> list[types.Diagnostic]:
        messages: dict[tuple[int, str], types.DiagnosticSeverity] = {}
        for line, hits in self.hits.items():
            if line > len(self.lines):
                continue
            for hit in hits:
                message = render.hit_message(hit)
                if message is not None:
                    severity = (
                        types.DiagnosticSeverity.Information if hit.graph_break else types.DiagnosticSeverity.Hint
                    )
                    messages[(line, message)] = severity
        by_name: dict[int, FunctionInfo] = {}
        for function, shown in self.compiled_functions():
            by_name[function.def_line] = function
            for item in shown:
                fallback = render.cudagraph_fallback(item.record)
                if fallback:
                    messages[(function.def_line, fallback)] = types.DiagnosticSeverity.Information
            if shown and all(item.stale for item in shown):
                name = Path(self.path).name
                messages[
                    (
                        function.def_line,
                        f"{render.STALE}: fuse-all records of {function.name} predate the last change to {name}",
                    )
                ] = types.DiagnosticSeverity.Hint
        diagnostics = []
        for (line, message), severity in sorted(messages.items()):
            where = self._name_range(by_name[line]) if line in by_name else self._line_range(line)
            diagnostics.append(types.Diagnostic(range=where, message=message, severity=severity, source=SOURCE))
        return diagnostics


def _hover(markdown: str, where: types.Range) -> types.Hover:
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=markdown), range=where)


def _uri(path: str) -> str:
    return Path(path).as_uri()

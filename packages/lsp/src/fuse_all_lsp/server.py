"""The pygls server: settings, the record store, and the LSP features wired to `Analysis`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from .__about__ import __version__
from .analysis import COMPILE_FILE, OPEN_OUTPUT_CODE, PROFILE_FILE, SHOW_FUSION, SOURCE, Analysis
from .compile_command import compile_file as compile_file_command
from .index import RecordIndex, SourceHashes, select_current
from .pysource import SourceScan, scan_source
from .records import default_artifact_dir
from .store import RecordStore

log = logging.getLogger(__name__)
STATUS_REQUEST = "fuse-all/status"


@dataclass
class Settings:
    artifact_dir: str | None = None
    python: str | None = None
    poll_interval_s: float = 1.0
    profile_entry: str | None = None  # what fuse-all.profileFile runs instead of the file: a script or "-m module"
    profile_args: tuple[str, ...] = ()

    def update(self, options: Any) -> None:
        if not isinstance(options, dict):
            return
        if isinstance(options.get("fuseAll"), dict):
            options = options["fuseAll"]
        if isinstance(options.get("artifactDir"), str):
            self.artifact_dir = options["artifactDir"] or None
        if isinstance(options.get("python"), str):
            self.python = options["python"] or None
        if isinstance(options.get("profileEntry"), str):
            self.profile_entry = options["profileEntry"].strip() or None
        arguments = options.get("profileArgs")
        if isinstance(arguments, list) and all(isinstance(argument, str) for argument in arguments):
            self.profile_args = tuple(arguments)
        interval = options.get("pollInterval")
        if isinstance(interval, (int, float)) and not isinstance(interval, bool) and interval > 0:
            self.poll_interval_s = max(float(interval), 0.05)


class FuseAllServer(LanguageServer):
    def __init__(self, artifact_dir: str | None = None, python: str | None = None) -> None:
        super().__init__("fuse-all-lsp", __version__)
        self.settings = Settings()
        self.fallback = Settings(artifact_dir=artifact_dir, python=python)  # from the command line
        self.hashes = SourceHashes()
        self.store = self._new_store()
        self._scans: dict[str, tuple[tuple[int, int], SourceScan | None]] = {}
        self._poller: asyncio.Task[None] | None = None

    @property
    def artifact_dir(self) -> Path:
        chosen = self.settings.artifact_dir or self.fallback.artifact_dir
        return Path(chosen) if chosen else default_artifact_dir()

    @property
    def python(self) -> str:
        return self.settings.python or self.fallback.python or sys.executable

    def _new_store(self) -> RecordStore:
        return RecordStore(self.artifact_dir, on_skip=self._log_skip)

    def apply_settings(self, options: Any) -> None:
        before = self.artifact_dir
        self.settings.update(options)
        if self.artifact_dir != before:
            self.store = self._new_store()
            self.log(types.MessageType.Info, f"reading records from {self.artifact_dir}")

    def log(self, level: types.MessageType, message: str) -> None:
        log.log(logging.WARNING if level <= types.MessageType.Warning else logging.INFO, message)
        # Without a connected client (yet), the logging line above is enough.
        with contextlib.suppress(Exception):
            self.window_log_message(types.LogMessageParams(type=level, message=f"fuse-all: {message}"))

    def _log_skip(self, path: str, reason: str) -> None:
        self.log(types.MessageType.Warning, f"skipped record {path}: {reason}")

    def scan_file(self, path: str) -> SourceScan | None:
        """A parsed workspace module that is not necessarily open, cached by (mtime, size)."""
        try:
            stat = os.stat(path)
            key = (stat.st_mtime_ns, stat.st_size)
            cached = self._scans.get(path)
            if cached is not None and cached[0] == key:
                return cached[1]
            with open(path, encoding="utf-8", errors="replace") as handle:
                scan: SourceScan | None = scan_source(handle.read())
        except OSError:
            return None
        self._scans[path] = (key, scan)
        return scan

    def roots(self) -> list[str]:
        try:
            folders = self.workspace.folders.values()
        except RuntimeError:
            return []
        roots = [to_fs_path(folder.uri) for folder in folders] or [self.workspace.root_path]
        return [root for root in roots if root]

    def analysis(self, uri: str) -> Analysis | None:
        path = to_fs_path(uri)
        if path is None or not uri.startswith("file:"):
            return None
        self.store.refresh()
        document = self.workspace.get_text_document(uri)
        try:
            text = document.source  # read from disk when the client did not open the document
        except (OSError, UnicodeDecodeError):
            return None
        index = RecordIndex(select_current(self.store.records(), self.hashes))
        return Analysis(path, text, index, self.roots(), self.scan_file, document.position_codec)

    def publish(self, uri: str) -> None:
        analysis = self.analysis(uri)
        if analysis is None:
            return
        version = self.workspace.get_text_document(uri).version
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=analysis.diagnostics(), version=version)
        )

    def refresh_views(self) -> None:
        """Push what changed to the client: diagnostics, and lenses and hints it can re-query."""
        for uri in list(self.workspace.text_documents):
            self.publish(uri)
        capabilities = self.client_capabilities.workspace
        if capabilities and capabilities.code_lens and capabilities.code_lens.refresh_support:
            self.workspace_code_lens_refresh(None)
        if capabilities and capabilities.inlay_hint and capabilities.inlay_hint.refresh_support:
            self.workspace_inlay_hint_refresh(None)

    async def poll_records(self) -> None:
        while True:
            await asyncio.sleep(self.settings.poll_interval_s)
            try:
                if self.store.refresh():
                    self.refresh_views()
            except Exception:  # a bad poll must not end polling
                log.exception("polling the artifact directory failed")

    def status(self) -> dict[str, Any]:
        self.store.refresh()
        return {
            "version": __version__,
            "artifactDir": str(self.artifact_dir),
            "python": self.python,
            "records": [record.path for record in self.store.records()],
            "skipped": [{"path": path, "reason": reason} for path, reason in sorted(self.store.skipped.items())],
            "torchImported": "torch" in sys.modules,
        }


async def _compile_named_file(ls: FuseAllServer, arguments: tuple, profile: bool) -> dict[str, Any]:
    """The compile (or profile) command on the file whose URI is the command's first argument."""
    uri = arguments[0] if arguments and isinstance(arguments[0], str) else None
    if uri is None or to_fs_path(uri) is None:
        action = "profile" if profile else "compile"
        ls.window_show_message(
            types.ShowMessageParams(type=types.MessageType.Error, message=f"{SOURCE}: no file to {action}")
        )
        return {"ok": False, "error": "no file given"}
    return await compile_file_command(ls, uri, profile=profile)


def create_server(artifact_dir: str | None = None, python: str | None = None) -> FuseAllServer:
    """The server; `artifact_dir` and `python` are defaults that the client's settings override."""
    server = FuseAllServer(artifact_dir, python)

    @server.feature(types.INITIALIZE)
    def initialize(ls: FuseAllServer, params: types.InitializeParams) -> None:
        ls.apply_settings(params.initialization_options)

    @server.feature(types.INITIALIZED)
    def initialized(ls: FuseAllServer, params: types.InitializedParams) -> None:
        ls.log(types.MessageType.Info, f"fuse-all-lsp {__version__}, records from {ls.artifact_dir}")
        ls._poller = asyncio.get_running_loop().create_task(ls.poll_records())

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: FuseAllServer, params: types.DidChangeConfigurationParams) -> None:
        ls.apply_settings(params.settings)
        ls.refresh_views()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: FuseAllServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: FuseAllServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: FuseAllServer, params: types.DidSaveTextDocumentParams) -> None:
        ls.refresh_views()

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: FuseAllServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[])
        )

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls: FuseAllServer, params: types.HoverParams) -> types.Hover | None:
        analysis = ls.analysis(params.text_document.uri)
        return analysis.hover(params.position.line + 1) if analysis else None

    @server.feature(types.TEXT_DOCUMENT_CODE_LENS)
    def code_lens(ls: FuseAllServer, params: types.CodeLensParams) -> list[types.CodeLens]:
        analysis = ls.analysis(params.text_document.uri)
        return analysis.code_lenses() if analysis else []

    @server.feature(types.TEXT_DOCUMENT_DEFINITION)
    def definition(ls: FuseAllServer, params: types.DefinitionParams) -> list[types.Location]:
        analysis = ls.analysis(params.text_document.uri)
        return analysis.definitions(params.position.line + 1) if analysis else []

    @server.feature(types.TEXT_DOCUMENT_INLAY_HINT)
    def inlay_hint(ls: FuseAllServer, params: types.InlayHintParams) -> list[types.InlayHint]:
        analysis = ls.analysis(params.text_document.uri)
        return analysis.inlay_hints(params.range.start.line + 1, params.range.end.line + 1) if analysis else []

    @server.feature(STATUS_REQUEST)
    def status(ls: FuseAllServer, params: Any) -> dict[str, Any]:
        return ls.status()

    @server.command(OPEN_OUTPUT_CODE)
    async def open_output_code(ls: FuseAllServer, *arguments: Any) -> bool:
        if len(arguments) < 1 or not isinstance(arguments[0], str) or not os.path.isabs(arguments[0]):
            return False
        line = arguments[1] if len(arguments) > 1 and isinstance(arguments[1], int) and arguments[1] > 0 else 1
        where = types.Range(types.Position(line - 1, 0), types.Position(line - 1, 0))
        result = await ls.window_show_document_async(
            types.ShowDocumentParams(uri=Path(arguments[0]).as_uri(), take_focus=True, selection=where)
        )
        return bool(result and result.success)

    @server.command(COMPILE_FILE)
    async def compile_file(ls: FuseAllServer, *arguments: Any) -> dict[str, Any]:
        return await _compile_named_file(ls, arguments, profile=False)

    @server.command(PROFILE_FILE)
    async def profile_file(ls: FuseAllServer, *arguments: Any) -> dict[str, Any]:
        return await _compile_named_file(ls, arguments, profile=True)

    @server.command(SHOW_FUSION)
    async def show_fusion(ls: FuseAllServer, *arguments: Any) -> bool:
        """Editors without a webview (the VS Code client shows it itself): open the SVG outside the editor."""
        if not arguments or not isinstance(arguments[0], str) or not os.path.isabs(arguments[0]):
            return False
        if not arguments[0].endswith(".svg") or not os.path.isfile(arguments[0]):
            return False
        result = await ls.window_show_document_async(
            types.ShowDocumentParams(uri=Path(arguments[0]).as_uri(), external=True)
        )
        return bool(result and result.success)

    return server

"""Helpers for tests that drive the server through a pytest-lsp client."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities


def capabilities() -> types.ClientCapabilities:
    """VS Code's capabilities plus those a current editor has beyond them."""
    caps = client_capabilities("visual-studio-code")
    assert caps.workspace is not None and caps.window is not None
    caps.workspace.code_lens = types.CodeLensWorkspaceClientCapabilities(refresh_support=True)
    caps.workspace.inlay_hint = types.InlayHintWorkspaceClientCapabilities(refresh_support=True)
    caps.window.work_done_progress = True
    caps.window.show_document = types.ShowDocumentClientCapabilities(support=True)
    return caps


def open_document(client: LanguageClient, path: Path) -> str:
    uri = path.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=1, text=path.read_text(encoding="utf-8")
            )
        )
    )
    return uri


async def eventually(check: Callable[[], Any], timeout_s: float = 10.0, what: str = "condition") -> Any:
    """Poll `check` until it returns something truthy (servers answer asynchronously)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.05)


async def hover_text(client: LanguageClient, uri: str, line: int, character: int = 0) -> str | None:
    """Hover markdown at a 1-based line, or None."""
    result = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line - 1, character)
        )
    )
    if result is None:
        return None
    assert isinstance(result.contents, types.MarkupContent)
    assert result.contents.kind == types.MarkupKind.Markdown
    return result.contents.value


def plain(value: Any) -> Any:
    """pygls hands results of custom requests back as namedtuples; make them JSON-like again."""
    if hasattr(value, "_asdict"):
        return {key: plain(item) for key, item in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


async def status(client: LanguageClient) -> dict[str, Any]:
    """The server's own view: artifact dir, records read and skipped, whether torch got imported."""
    return plain(await client.protocol.send_request_async("fuse-all/status", None))

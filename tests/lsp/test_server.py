"""End to end through a pytest-lsp client, on records of a real CPU compile of the sample
(`compiled_sample`; a failing compile fails the tests).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sample_project
from fuse_all_lsp import load_records
from lsp_testing import eventually, hover_text, open_document, status
from lsprotocol import types

pytestmark = pytest.mark.asyncio
line_of = sample_project.line_of
LENS_TITLE = re.compile(r"^\d+ kernels? · \d+ fused ops? · compile \d+ ms$")


def kernels_of(sample, function: str):
    return [k for r in load_records(sample.artifact_dir) if r.function.name == function for k in r.kernels]


async def started(start_server, sample):
    client = await start_server(artifact_dir=sample.artifact_dir, root=sample.workspace)
    return client, open_document(client, sample.source)


async def test_hover_on_a_decorated_function_shows_its_kernels(start_server, compiled_sample):
    client, uri = await started(start_server, compiled_sample)
    kernels = kernels_of(compiled_sample, "pointwise")
    assert kernels, "the compile left no record for pointwise"
    for line in (line_of("@torch.compile"), line_of("def pointwise")):
        text = await hover_text(client, uri, line, 5)
        assert text is not None and "`pointwise`" in text
        assert re.search(r"\d+ kernels? · \d+ fused ops? · compile \d+ ms", text)
        assert "```cpp" in text and "aten.cos" in text and "aten.sin" in text
        for kernel in kernels:
            assert kernel.name in text
            assert kernel.source.splitlines()[0] in text
        assert f"line {line_of('torch.cos(x)')} `a = torch.cos(x)`" in text


async def test_hover_inside_a_compiled_function_names_the_kernel_of_that_line(start_server, compiled_sample):
    client, uri = await started(start_server, compiled_sample)
    cos_line = line_of("torch.cos(x)")
    text = await hover_text(client, uri, cos_line, 8)
    assert text is not None and text.startswith(f"**fuse-all** · line {cos_line} → ")
    cos_kernels = [k for k in kernels_of(compiled_sample, "pointwise") if "aten.cos.default" in k.aten_ops]
    assert cos_kernels and all(k.name in text for k in cos_kernels)
    assert "```cpp" in text
    assert await hover_text(client, uri, line_of("import torch")) is None


async def test_hover_on_a_compile_call_shows_the_forward_it_compiles(start_server, compiled_sample):
    client, uri = await started(start_server, compiled_sample)
    text = await hover_text(client, uri, line_of("opt = torch.compile(model"), 12)
    assert text is not None and "`MLP.forward`" in text
    assert "aten.relu" in text and "```cpp" in text
    assert "pointwise" not in text, "only the graphs of the callable passed"
    for kernel in kernels_of(compiled_sample, "forward"):
        assert kernel.name in text


async def test_code_lens_above_each_compiled_function_opens_the_generated_code(start_server, compiled_sample):
    client, uri = await started(start_server, compiled_sample)
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri))
    )
    by_line = {lens.range.start.line + 1: lens for lens in lenses if lens.command.command != "fuse-all.profileFile"}
    assert set(by_line) == {line_of("@torch.compile"), line_of("def forward"), line_of("opt = torch.compile(model")}
    profile_lenses = {lens.range.start.line + 1 for lens in lenses if lens.command.command == "fuse-all.profileFile"}
    assert profile_lenses == set(by_line), "a Profile lens beside each summary"
    for lens in by_line.values():
        assert lens.command is not None and LENS_TITLE.match(lens.command.title), lens.command
        assert lens.command.command == "fuse-all.openOutputCode"
        output_code, line = lens.command.arguments
        assert Path(output_code).is_file() and line >= 1

    command = by_line[line_of("@torch.compile")].command
    assert (
        await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command=command.command, arguments=command.arguments)
        )
        is True
    )
    shown = client.shown_documents[-1]
    assert shown.uri == Path(command.arguments[0]).as_uri()
    assert shown.selection.start.line == command.arguments[1] - 1


async def test_go_to_definition_lands_on_the_kernel_in_output_code(start_server, compiled_sample):
    client, uri = await started(start_server, compiled_sample)
    kernels = kernels_of(compiled_sample, "pointwise")
    for line in (line_of("def pointwise"), line_of("torch.cos(x)")):
        locations = await client.text_document_definition_async(
            types.DefinitionParams(
                text_document=types.TextDocumentIdentifier(uri), position=types.Position(line - 1, 6)
            )
        )
        assert locations, f"no definition from line {line}"
        for location in locations:
            lines = Path(location.uri.removeprefix("file://")).read_text().splitlines()
            around = "\n".join(lines[max(0, location.range.start.line - 2) : location.range.start.line + 3])
            assert any(k.name in around for k in kernels), around


async def test_inlay_hints_say_which_kernel_each_line_went_into(start_server, compiled_sample):
    client, uri = await started(start_server, compiled_sample)
    hints = await client.text_document_inlay_hint_async(
        types.InlayHintParams(
            text_document=types.TextDocumentIdentifier(uri),
            range=types.Range(types.Position(0, 0), types.Position(len(sample_project.SAMPLE_SOURCE.splitlines()), 0)),
        )
    )
    by_line = {hint.position.line + 1: hint for hint in hints}
    cos_kernels = {k.name for k in kernels_of(compiled_sample, "pointwise") if "aten.cos.default" in k.aten_ops}
    cos_hint = by_line[line_of("torch.cos(x)")]
    assert cos_hint.label.startswith("→ ") and any(name in cos_hint.label for name in cos_kernels)
    assert cos_hint.position.character == len("    a = torch.cos(x)")
    relu_hint = by_line[line_of("torch.relu(h)")]
    assert any(k.name in relu_hint.label for k in kernels_of(compiled_sample, "forward"))


async def test_server_never_imports_torch(start_server, compiled_sample):
    client, uri = await started(start_server, compiled_sample)
    for line in range(1, len(sample_project.SAMPLE_SOURCE.splitlines()) + 1):
        await hover_text(client, uri, line)
    await client.text_document_code_lens_async(types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri)))
    await eventually(lambda: uri in client.diagnostics, what="diagnostics")
    state = await status(client)
    assert len(state["records"]) >= 2 and state["skipped"] == []
    assert state["torchImported"] is False

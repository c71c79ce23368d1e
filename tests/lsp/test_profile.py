"""The profile in the editor, end to end through pytest-lsp: records of a real CPU run of the sample under
`python -m fuse_all.profiling`, per-line inlay hints and hovers, the Profile lens and command, and the
fusion picture's lens and command."""

from __future__ import annotations

import json
import re
import shutil
import sys

import pytest
import sample_project
from fuse_all_lsp import load_records
from lsp_testing import eventually, hover_text, open_document, status
from lsprotocol import types

pytestmark = pytest.mark.asyncio
line_of = sample_project.line_of
TIME_HINT = re.compile(r"^(▲ )?\d+(\.\d+)? (µs|ms|s)/call · (\d+%|<1%) · \d+ (kernels?(\+\d+ ATen)?|ATen calls?)$")


async def started(start_server, sample):
    client = await start_server(artifact_dir=sample.artifact_dir, root=sample.workspace)
    return client, open_document(client, sample.source)


async def inlay_hints(client, uri: str, lines: int = 40) -> list[types.InlayHint]:
    return await client.text_document_inlay_hint_async(
        types.InlayHintParams(
            text_document=types.TextDocumentIdentifier(uri),
            range=types.Range(types.Position(0, 0), types.Position(lines, 0)),
        )
    )


def profiled_lines(sample) -> dict[int, list]:
    found: dict[int, list] = {}
    for record in load_records(sample.artifact_dir):
        assert record.profile is not None, record.graph_id
        for entry in record.profile.lines:
            found.setdefault(entry.line, []).append((record, entry))
    return found


async def test_every_profiled_line_gets_a_time_hint_from_the_record(start_server, profiled_sample):
    client, uri = await started(start_server, profiled_sample)
    hints = [hint for hint in await inlay_hints(client, uri) if TIME_HINT.match(hint.label)]
    by_line = {hint.position.line + 1: hint for hint in hints}
    expected = profiled_lines(profiled_sample)
    assert set(by_line) == set(expected) >= {line_of("torch.cos(x)"), line_of("self.fc(x)"), line_of("torch.relu(h)")}
    for line, entries in expected.items():
        ((record, entry),) = entries
        label = by_line[line].label
        count = f"{len(entry.kernels)} kernel" if entry.kernels else f"{len(entry.externs)} ATen call"
        assert count in label, label
        share = f"{entry.share * 100:.0f}%" if entry.share >= 0.01 else "<1%"
        assert f"· {share} ·" in label
        tooltip = by_line[line].tooltip
        assert f"graph {record.graph_id}: " in tooltip and "CPU time" in tooltip
        assert all(f"→ {name}" in tooltip or f"{name}:" in tooltip for name in entry.kernels)
        assert len(label) <= 43, "VS Code cuts a line's hints at 43 characters"
        # One hint at the end of the line: the time replaces the kernel names once profiled.
        assert len([h for h in await inlay_hints(client, uri) if h.position.line + 1 == line]) == 1
        assert by_line[line].position.character == len(profiled_sample.source.read_text().splitlines()[line - 1])
    assert (await status(client))["torchImported"] is False


async def test_hover_on_a_hot_line_lists_its_kernels_times_bandwidth_and_unfused_edges(start_server, profiled_sample):
    client, uri = await started(start_server, profiled_sample)
    (record,) = [r for r in load_records(profiled_sample.artifact_dir) if r.function.name == "forward"]
    relu = line_of("torch.relu(h)")
    text = await hover_text(client, uri, relu, 12)
    assert text.startswith(f"**fuse-all profile** · line {relu} · ")
    assert f"graph `{record.graph_id}` (inference)" in text and "CPU time" in text
    (kernel,) = record.kernels
    measured = record.profile.kernel(kernel.name)
    assert measured.bytes == kernel.bytes == (4 * 8 + 4) * 4  # reads h (4x8 floats), writes 4 sums
    row = next(line for line in text.splitlines() if line.startswith(f"| `{kernel.name}`"))
    assert "relu" in row and "sum" in row and re.search(r"\d+(\.\d+)? (GB|MB)/s \(144 B moved\)", row)
    # The unfused edge into this line, with its reason; and the kernel's code below the profile.
    (rejected,) = record.rejected_fusions
    assert f"not fused: {rejected.producer} → {rejected.consumer} — {rejected.reason}" in text
    assert "```cpp" in text

    matmul = await hover_text(client, uri, line_of("self.fc(x)"), 12)
    assert "| ATen `aten.addmm.default` |" in matmul and "runs in ATen: aten.addmm.default" in matmul


async def test_the_function_hover_and_lens_show_the_time_per_call(start_server, profiled_sample):
    client, uri = await started(start_server, profiled_sample)
    (record,) = [r for r in load_records(profiled_sample.artifact_dir) if r.function.name == "pointwise"]
    assert record.profile.calls == 3 and record.profile.warmup_calls == 1  # the sample calls it 4 times
    text = await hover_text(client, uri, line_of("def pointwise"), 5)
    assert "Profile: " in text and "per call (CPU time, mean of 3 calls, first 1 call left out)" in text
    assert "hottest: line " in text
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri))
    )
    profile = [lens for lens in lenses if lens.command.command == "fuse-all.profileFile"]
    at_def = next(lens for lens in profile if lens.range.start.line + 1 == line_of("@torch.compile"))
    assert re.match(r"^\d+(\.\d+)? (µs|ms)/call · Profile again$", at_def.command.title)
    assert list(at_def.command.arguments) == [uri]


async def test_the_profile_command_runs_the_file_under_the_profiler_and_the_hints_appear(
    start_server, compiled_sample, tmp_path
):
    workspace = tmp_path / "ws"
    shutil.copytree(compiled_sample.workspace, workspace, ignore=shutil.ignore_patterns("artifacts", "cache"))
    source, artifacts = workspace / "example.py", workspace / "artifacts"
    client = await start_server(artifact_dir=artifacts, root=workspace, options={"python": sys.executable})
    uri = open_document(client, source)
    assert not [hint for hint in await inlay_hints(client, uri) if TIME_HINT.match(hint.label)]
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="fuse-all.profileFile", arguments=[uri])
    )
    assert result["ok"] is True and result["records"] == 2, result
    reports = next(iter(client.progress_reports.values()))
    assert reports[0].title == "fuse-all: profiling example.py" and reports[-1].message == "2 graphs profiled"
    assert all(record.profile is not None for record in load_records(artifacts))
    hints = [hint for hint in await inlay_hints(client, uri) if TIME_HINT.match(hint.label)]
    assert {hint.position.line + 1 for hint in hints} >= {line_of("torch.cos(x)"), line_of("self.fc(x)")}


async def test_a_fusion_picture_gets_a_lens_a_hover_link_and_opens_outside_editors_without_webviews(
    start_server, compiled_sample, tmp_path
):
    artifacts = tmp_path / "artifacts"
    shutil.copytree(compiled_sample.artifact_dir, artifacts)
    svg = tmp_path / "fusion.svg"
    cos = line_of("torch.cos(x)")
    svg.write_text(
        f'<svg xmlns="http://www.w3.org/2000/svg"><g class="node" data-file="{compiled_sample.source}" '
        f'data-line="{cos}"><title>aten.cos.default</title><rect width="40" height="20"/></g></svg>'
    )
    (path,) = [p for p in artifacts.glob("*.json") if json.loads(p.read_text())["function"]["name"] == "pointwise"]
    document = json.loads(path.read_text())
    path.write_text(json.dumps({**document, "schema_version": 2, "fusion_svg": str(svg)}))
    client = await start_server(artifact_dir=artifacts, root=compiled_sample.workspace)
    uri = open_document(client, compiled_sample.source)
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri))
    )
    (picture,) = [lens for lens in lenses if lens.command.command == "fuse-all.showFusion"]
    assert picture.command.title == "Fusion picture" and picture.range.start.line + 1 == line_of("@torch.compile")
    assert list(picture.command.arguments) == [str(svg), document["graph_id"]]
    text = await hover_text(client, uri, line_of("def pointwise"), 5)
    assert "Fusion picture: [fusion.svg](command:fuse-all.showFusion?" in text
    assert await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="fuse-all.showFusion", arguments=picture.command.arguments)
    )
    shown = client.shown_documents[-1]
    assert shown.uri == svg.as_uri() and shown.external is True
    # Only SVG files that exist are opened.
    for arguments in ([str(tmp_path / "missing.svg")], [str(path)], ["fusion.svg"]):
        assert not await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="fuse-all.showFusion", arguments=arguments)
        )


async def test_records_without_a_picture_or_profile_show_neither(start_server, compiled_sample):
    client, uri = await started(start_server, compiled_sample)
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri))
    )
    assert not [lens for lens in lenses if lens.command.command == "fuse-all.showFusion"]
    assert {lens.command.title for lens in lenses if lens.command.command == "fuse-all.profileFile"} == {"Profile"}
    assert not [hint for hint in await inlay_hints(client, uri) if TIME_HINT.match(hint.label)]
    text = await hover_text(client, uri, line_of("torch.cos(x)"))
    assert "fuse-all profile" not in text and "Fusion picture" not in text


async def test_a_malformed_profile_skips_the_record_with_the_field_named(start_server, compiled_sample, tmp_path):
    artifacts = tmp_path / "artifacts"
    shutil.copytree(compiled_sample.artifact_dir, artifacts)
    path = sorted(artifacts.glob("*.json"))[0]
    document = json.loads(path.read_text())
    bad = {"basis": "gpu", "calls": 1, "graph_us": 3.0}
    path.write_text(json.dumps({**document, "schema_version": 2, "profile": bad}))
    client = await start_server(artifact_dir=artifacts)
    skipped = (await status(client))["skipped"]
    assert [entry["path"] for entry in skipped] == [str(path)]
    assert skipped[0]["reason"].startswith("profile.basis: expected")
    await eventually(lambda: any("profile.basis" in m.message for m in client.log_messages), what="a log line")


@pytest.mark.parametrize("entry", ["bench.py", "-m bench"])
async def test_the_profile_command_runs_the_configured_entry_with_its_arguments(
    start_server, compiled_sample, tmp_path, entry
):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    source = workspace / "example.py"
    shutil.copy(compiled_sample.source, source)
    (workspace / "bench.py").write_text(
        "import sys\nimport torch\nfrom example import pointwise\n\n"
        "for _ in range(int(sys.argv[1])):\n    pointwise(torch.randn(16))\n"
    )
    artifacts = workspace / "artifacts"
    options = {"python": sys.executable, "profileEntry": entry, "profileArgs": ["6"]}
    client = await start_server(artifact_dir=artifacts, root=workspace, options=options)
    uri = open_document(client, source)
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="fuse-all.profileFile", arguments=[uri])
    )
    assert result["ok"] is True and result["records"] == 1, result
    (record,) = load_records(artifacts)
    assert record.function.name == "pointwise" and record.function.file == str(source)
    assert record.profile.calls == 5 and record.profile.warmup_calls == 1  # bench.py called it 6 times
    reports = next(iter(client.progress_reports.values()))
    assert reports[0].title == f"fuse-all: profiling {'bench' if entry.startswith('-m') else 'bench.py'}"

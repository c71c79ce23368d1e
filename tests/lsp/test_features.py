"""End to end on records written by the tests themselves: what a real compile of a small sample
cannot be relied on to produce (rejected fusions, graph breaks, CUDA graph fallbacks, stale or
broken records), and the compile command.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import sample_project
from lsp_testing import eventually, hover_text, open_document, status
from lsprotocol import types
from sample_project import line_of, make_record, source_line, write_record

pytestmark = pytest.mark.asyncio


def kernel(
    name: str, source: Path, lines: list[int], ops: list[str], code: str | None = None, language: str = "cpp"
) -> dict:
    return {
        "name": name,
        "language": language,
        "kind": "pointwise",
        "source": code or f"void {name}() {{}}",
        "aten_ops": ops,
        "source_lines": [source_line(source, line, op) for line, op in zip(lines, ops, strict=True)],
        "output_code_line": None,
    }


@pytest.fixture
def sample(tmp_path: Path) -> tuple[Path, Path]:
    return sample_project.write_sample(tmp_path / "ws"), tmp_path / "artifacts"


def pointwise_record(source: Path, **fields) -> dict:
    first, last = line_of("def pointwise"), line_of("return a * b")
    fields.setdefault("kernels", [kernel("k_cos", source, [line_of("torch.cos(x)")], ["aten.cos.default"])])
    return make_record(source, fields.pop("graph_id", "g_pointwise_0"), "pointwise", first, last, **fields)


async def test_diagnostics_for_rejected_fusions_graph_breaks_externs_and_cudagraph_fallbacks(start_server, sample):
    source, artifacts = sample
    sin, out = line_of("torch.sin(a)"), line_of("return a * b")
    write_record(
        artifacts,
        pointwise_record(
            source,
            mode="reduce-overhead",
            device="cuda:0",
            cudagraphs={"enabled": False, "decision": "input 0 is mutated in place"},
            fusion={
                "groups": [],
                "rejected": [
                    {
                        "producer": "buf0",
                        "consumer": "buf2",
                        "reason": "different iteration spaces: (16,) vs (4, 4)",
                        "source_lines": [source_line(source, sin, "aten.sin.default")],
                    }
                ],
            },
            graph_breaks=[{"file": str(source), "line": out, "reason": "call to print()"}],
            externs=[
                {
                    "target": "aten.mm.default",
                    "reason": "matmul runs in ATen",
                    "source_lines": [source_line(source, out, "aten.mm.default")],
                }
            ],
        ),
    )
    client = await start_server(artifact_dir=artifacts)
    uri = open_document(client, source)
    diagnostics = await eventually(lambda: client.diagnostics.get(uri), what="diagnostics")
    found = {(d.range.start.line + 1, d.severity, d.message) for d in diagnostics}
    assert all(d.source == "fuse-all" for d in diagnostics)
    assert (
        sin,
        types.DiagnosticSeverity.Hint,
        "not fused: buf0 → buf2 — different iteration spaces: (16,) vs (4, 4)",
    ) in found
    assert (out, types.DiagnosticSeverity.Information, "graph break: call to print()") in found
    assert (out, types.DiagnosticSeverity.Hint, "runs in ATen: aten.mm.default — matmul runs in ATen") in found
    fallback = [d for d in diagnostics if d.message.startswith("CUDA graphs not used")]
    assert len(fallback) == 1 and "input 0 is mutated in place" in fallback[0].message
    assert (
        fallback[0].range.start.line + 1 == line_of("def pointwise")
        and fallback[0].severity == types.DiagnosticSeverity.Information
    )
    text = await hover_text(client, uri, line_of("def pointwise"))
    assert (
        "not fused: `buf0` → `buf2`" in text
        and "graph break at line" in text
        and "CUDA graphs off: input 0 is mutated" in text
    )


async def test_records_of_an_older_version_of_the_file_are_marked_stale(start_server, sample):
    source, artifacts = sample
    write_record(artifacts, pointwise_record(source))
    source.write_text(source.read_text() + "\n# edited after the compile\n")
    client = await start_server(artifact_dir=artifacts)
    uri = open_document(client, source)
    text = await hover_text(client, uri, line_of("def pointwise"))
    assert "⚠ stale" in text and "changed since this compile" in text
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri))
    )
    assert lenses[0].command.title.startswith("⚠ stale · 1 kernel · 1 fused op · compile 250 ms")
    diagnostics = await eventually(lambda: client.diagnostics.get(uri), what="diagnostics")
    assert any("⚠ stale" in d.message for d in diagnostics)


async def test_fresh_records_hide_stale_ones_of_the_same_function(start_server, sample):
    source, artifacts = sample
    old = pointwise_record(
        source, graph_id="g_old_0", created=1.0, kernels=[kernel("k_old", source, [6], ["aten.cos.default"])]
    )
    old["function"]["source_sha256"] = "0" * 64
    write_record(artifacts, old)
    write_record(artifacts, pointwise_record(source, graph_id="g_new_0", created=2.0))
    client = await start_server(artifact_dir=artifacts)
    text = await hover_text(client, open_document(client, source), line_of("def pointwise"))
    assert "k_cos" in text and "k_old" not in text and "stale" not in text


async def test_records_appear_and_disappear_without_restarting_the_server(start_server, sample):
    source, artifacts = sample
    client = await start_server(artifact_dir=artifacts)
    uri = open_document(client, source)
    assert "no artifact records yet" in await hover_text(client, uri, line_of("def pointwise"))
    await eventually(lambda: uri in client.diagnostics, what="diagnostics after opening")
    assert client.refreshes[types.WORKSPACE_CODE_LENS_REFRESH] == 0
    path = write_record(artifacts, pointwise_record(source))
    # The server polls the directory and asks the client to re-query what it shows.
    await eventually(lambda: client.refreshes[types.WORKSPACE_CODE_LENS_REFRESH] == 1, what="a code lens refresh")
    await eventually(lambda: client.refreshes[types.WORKSPACE_INLAY_HINT_REFRESH] == 1, what="an inlay hint refresh")
    assert "k_cos" in await hover_text(client, uri, line_of("def pointwise"))
    path.unlink()
    await eventually(lambda: client.refreshes[types.WORKSPACE_CODE_LENS_REFRESH] == 2, what="a second refresh")
    assert "no artifact records yet" in await hover_text(client, uri, line_of("def pointwise"))


async def test_long_kernels_are_shortened_and_triton_is_fenced_as_python(start_server, sample):
    source, artifacts = sample
    body = "\n".join(
        ["@triton.jit", "def triton_poi_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):"]
        + [f"    tmp{i} = tl.load(in_ptr0 + {i})" for i in range(98)]
    )
    record = pointwise_record(
        source, kernels=[kernel("triton_poi_0", source, [6], ["aten.cos.default"], body, "triton")]
    )
    write_record(artifacts, record)
    client = await start_server(artifact_dir=artifacts)
    text = await hover_text(client, open_document(client, source), line_of("def pointwise"))
    assert "```python\n@triton.jit\n" in text
    assert "tmp37 = tl.load" in text and "tmp38 = tl.load" not in text
    assert "… (60 more lines)" in text


async def test_every_decorator_form_and_an_imported_model_are_matched(start_server, tmp_path):
    workspace, artifacts = tmp_path / "ws", tmp_path / "artifacts"
    workspace.mkdir()
    models = workspace / "models.py"
    models.write_text(
        "import torch\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        return x.relu()\n"
    )
    main = workspace / "main.py"
    main.write_text(
        textwrap.dedent("""\
        import torch
        from models import Net

        @torch.compile
        def bare(x):
            return x.cos()

        @torch.compile(backend="fuse_all")
        def called(x):
            return x.sin()

        @torch.compile(backend="inductor")
        def elsewhere(x):
            return x.exp()

        opt = torch.compile(Net(), backend="fuse_all")
    """)
    )
    write_record(
        artifacts,
        make_record(main, "g_bare_0", "bare", 4, 6, kernels=[kernel("k_bare", main, [6], ["aten.cos.default"])]),
    )
    write_record(
        artifacts,
        make_record(
            main, "g_called_0", "called", 8, 10, kernels=[kernel("k_called", main, [10], ["aten.sin.default"])]
        ),
    )
    write_record(
        artifacts,
        make_record(models, "g_net_0", "forward", 4, 5, kernels=[kernel("k_net", models, [5], ["aten.relu.default"])]),
    )
    client = await start_server(artifact_dir=artifacts, root=workspace)
    uri = open_document(client, main)
    assert "k_bare" in await hover_text(client, uri, 5)
    assert "k_called" in await hover_text(client, uri, 8)
    assert "backend `inductor`" in await hover_text(client, uri, 13)
    call = await hover_text(client, uri, 16)
    assert "`Net.forward (models.py)`" in call and "k_net" in call and "k_bare" not in call
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri))
    )
    titles = {
        lens.range.start.line + 1: lens.command.title for lens in lenses if lens.command.command != "fuse-all.profileFile"
    }
    assert titles[4] == titles[8] == "1 kernel · 1 fused op · compile 250 ms"
    assert titles[12] == "fuse-all: not compiled yet · Compile this file" and titles[16].startswith("1 kernel")


async def test_artifact_dir_comes_from_the_environment_then_the_cache_dir(start_server, tmp_path):
    client = await start_server(env={"FUSE_ALL_ARTIFACT_DIR": str(tmp_path / "from-env")})
    assert (await status(client))["artifactDir"] == str(tmp_path / "from-env")
    client = await start_server(env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert (await status(client))["artifactDir"] == str(tmp_path / "cache" / "fuse-all" / "artifacts")
    client = await start_server(arguments=("--artifact-dir", str(tmp_path / "flag")), options={"artifactDir": ""})
    assert (await status(client))["artifactDir"] == str(tmp_path / "flag"), "an empty setting keeps the flag"
    client = await start_server(
        artifact_dir=tmp_path / "setting", env={"FUSE_ALL_ARTIFACT_DIR": str(tmp_path / "from-env")}
    )
    assert (await status(client))["artifactDir"] == str(tmp_path / "setting")
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"fuseAll": {"artifactDir": str(tmp_path / "changed")}})
    )
    assert (await status(client))["artifactDir"] == str(tmp_path / "changed")


FAKE_COMPILE = """\
import os, sys


def pointwise(x):
    return x


sys.path.insert(0, {tests!r})
from pathlib import Path
from sample_project import make_record, write_record
print("compiling", flush=True)
source = Path(__file__).resolve()
kernel = {{"name": "k_from_run", "language": "cpp", "source": "void k_from_run() {{}}",
          "aten_ops": ["aten.cos.default"], "source_lines": [{{"file": str(source), "line": 5, "code": "return x"}}]}}
record = make_record(source, "g_run_0", "pointwise", 4, 5, kernels=[kernel])
write_record(Path(os.environ["FUSE_ALL_ARTIFACT_DIR"]), record)
sys.exit({exit_code})
"""


@pytest.mark.parametrize("exit_code", [0, 3])
async def test_compile_command_runs_the_file_with_the_artifact_dir_and_reports_progress(
    start_server, tmp_path, exit_code
):
    """The file stands in for a compile: it writes a record where FUSE_ALL_ARTIFACT_DIR says."""
    source = tmp_path / "ws" / "example.py"
    source.parent.mkdir()
    source.write_text(FAKE_COMPILE.format(tests=str(Path(__file__).parent), exit_code=exit_code))
    artifacts = tmp_path / "artifacts"
    client = await start_server(artifact_dir=artifacts, options={"python": sys.executable})
    uri = open_document(client, source)
    assert await hover_text(client, uri, 4) is None
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="fuse-all.compileFile", arguments=[uri])
    )
    assert {key: result[key] for key in ("ok", "returncode", "records")} == {
        "ok": exit_code == 0,
        "returncode": exit_code,
        "records": 1,
    }
    assert "compiling" in result["output"]
    ((_token, reports),) = client.progress_reports.items()
    assert isinstance(reports[0], types.WorkDoneProgressBegin) and "example.py" in reports[0].title
    assert isinstance(reports[-1], types.WorkDoneProgressEnd)
    assert reports[-1].message == ("1 graph compiled" if exit_code == 0 else "example.py exited with 3")
    assert "k_from_run" in await hover_text(client, uri, 4)
    if exit_code:
        assert any("exited with 3" in message.message for message in client.messages)



@pytest.mark.parametrize("command, action", [("fuse-all.compileFile", "compile"), ("fuse-all.profileFile", "profile")])
@pytest.mark.parametrize("arguments", [[], [42], ["untitled:Untitled-1"]])
async def test_compile_and_profile_commands_without_a_file_say_so(start_server, tmp_path, command, action, arguments):
    client = await start_server(artifact_dir=tmp_path / "artifacts")
    result = await client.workspace_execute_command_async(types.ExecuteCommandParams(command=command, arguments=arguments))
    assert result == {"ok": False, "error": "no file given"}
    await eventually(lambda: [m for m in client.messages if m.message == f"fuse-all: no file to {action}"],
                     what="an error message")
    assert not (tmp_path / "artifacts").exists()

async def test_bad_records_are_skipped_with_a_log_line_and_the_server_keeps_serving(start_server, sample):
    source, artifacts = sample
    artifacts.mkdir()
    write_record(artifacts, pointwise_record(source))
    bad = {
        "truncated.json": b'{"schema": "fuse-all-artifact", "schema_version": 1, "graph_id": "g_',
        "latin1.json": b'{"schema": "fuse-all-artifact", "name": "\xe9"}',
        "foreign.json": b'{"schema": "not-ours"}',
        "newer.json": b'{"schema": "fuse-all-artifact", "schema_version": 7}',
        "types.json": b'{"schema": "fuse-all-artifact", "schema_version": 1, "graph_id": "g", "function": 3}',
        "deep.json": b"[" * 100_000,
    }
    for name, data in bad.items():
        (artifacts / name).write_bytes(data)
    with open(artifacts / "huge.json", "wb") as handle:
        handle.truncate(9 * 1024 * 1024)
    client = await start_server(artifact_dir=artifacts)
    uri = open_document(client, source)
    assert "k_cos" in await hover_text(client, uri, line_of("def pointwise"))
    state = await status(client)
    assert {Path(entry["path"]).name for entry in state["skipped"]} == set(bad) | {"huge.json"}
    logged = await eventually(
        lambda: [m.message for m in client.log_messages if "skipped record" in m.message], what="log lines"
    )
    assert len(logged) == len(bad) + 1
    assert any("huge.json: larger than 8 MiB" in line for line in logged)
    assert any("newer.json: schema_version 7 is newer" in line for line in logged)

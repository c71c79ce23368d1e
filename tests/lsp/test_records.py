"""Reading records: the contract's shape, the default directory, and every way a record can be bad."""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path

import pytest
import sample_project
from fuse_all_lsp import default_artifact_dir, load_records, read_record
from fuse_all_lsp.index import SourceHashes
from fuse_all_lsp.records import MAX_RECORD_BYTES, RecordError, parse_record
from fuse_all_lsp.store import RecordStore


@pytest.fixture
def sample_records(tmp_path: Path) -> tuple[Path, list[Path]]:
    source = sample_project.write_sample(tmp_path / "ws")
    return source, sample_project.write_fixture_records(source, tmp_path / "artifacts")


def test_fixture_records_parse_into_the_documented_fields(sample_records):
    source, paths = sample_records
    record = read_record(paths[0])
    assert record.graph_id == "g_fixture01_0"
    assert record.function.name == "pointwise" and record.function.file == str(source)
    assert record.function.first_line == sample_project.line_of("def pointwise")
    kernel = record.kernels[0]
    assert kernel.language == "cpp" and "aten.cos.default" in kernel.aten_ops
    assert {s.line for s in kernel.source_lines} == {sample_project.line_of(t) for t in ("cos(x)", "sin(a)", "a * b")}
    assert (
        Path(record.output_code)
        .read_text()
        .splitlines()[kernel.output_code_line - 1]
        .startswith('extern "C" void ' + kernel.name)
    )
    assert record.fused_op_count == 4
    assert record.cudagraphs is not None and record.cudagraphs.enabled is False


@pytest.mark.parametrize(
    ("env", "platform", "expected"),
    [
        ({"FUSE_ALL_ARTIFACT_DIR": "/x/records", "XDG_CACHE_HOME": "/c"}, "linux", "/x/records"),
        ({"XDG_CACHE_HOME": "/c"}, "linux", "/c/fuse-all/artifacts"),
        ({}, "linux", str(Path.home() / ".cache/fuse-all/artifacts")),
        ({"XDG_CACHE_HOME": ""}, "linux", str(Path.home() / ".cache/fuse-all/artifacts")),
        ({"XDG_CACHE_HOME": "/c"}, "darwin", str(Path.home() / "Library/Caches/fuse-all/artifacts")),
        ({"LOCALAPPDATA": "/appdata"}, "win32", "/appdata/fuse-all/artifacts"),
    ],
)
def test_default_artifact_dir_follows_the_contract(env, platform, expected):
    assert default_artifact_dir(env, platform) == Path(expected)


def _valid(tmp_path: Path) -> dict:
    source = sample_project.write_sample(tmp_path / "ws")
    return sample_project.make_record(
        source,
        "g_ok_0",
        "pointwise",
        5,
        8,
        kernels=[
            {
                "name": "k0",
                "language": "cpp",
                "source": "void k0() {}",
                "aten_ops": ["aten.cos.default"],
                "source_lines": [
                    {"file": str(source), "line": 6, "code": "a = torch.cos(x)", "aten_op": "aten.cos.default"}
                ],
            }
        ],
    )


def _with(document: dict, dotted: str, value) -> dict:
    """A copy of `document` with the field at `dotted` ("kernels.0.aten_ops") set, or deleted for ...`."""
    changed = copy.deepcopy(document)
    *parents, last = dotted.split(".")
    target = changed
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if value is Ellipsis:
        del target[last]
    else:
        target[last] = value
    return changed


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("schema", "someone-elses-artifact", "not a fuse-all record"),
        ("schema_version", 3, "newer than this server reads"),
        ("schema_version", "1", "schema_version: expected an integer"),
        ("schema_version", True, "schema_version: expected an integer"),
        ("graph_id", "../../etc/passwd", "graph_id"),
        ("function", ..., "function: missing"),
        ("function.first_line", "5", "function.first_line: expected a line number"),
        ("function.first_line", True, "function.first_line: expected a line number"),
        ("function.last_line", 2, "is before first_line"),
        ("function.file", "relative/example.py", "expected an absolute path"),
        ("kernels", {"k0": {}}, "kernels: expected a list"),
        ("kernels", ..., "kernels: missing"),
        ("kernels.0.aten_ops", 5, "kernels[0].aten_ops: expected a list"),
        ("kernels.0.aten_ops", ["aten.cos", 5], "kernels[0].aten_ops[1]: expected a string"),
        ("kernels.0.source", None, "kernels[0].source: expected a string"),
        ("kernels.0.source_lines.0.line", 0, "source_lines[0].line: expected a line number"),
        ("kernels.0.output_code_line", -3, "output_code_line"),
        ("compile_time_s", "fast", "compile_time_s: expected a finite number"),
        ("compile_time_s", float("nan"), "compile_time_s: expected a finite number"),
        ("cudagraphs", {"enabled": "no"}, "cudagraphs.enabled: expected true or false"),
        ("fusion", [], "fusion: expected an object"),
        ("fusion.rejected", [{"producer": "buf0", "consumer": "buf1"}], "fusion.rejected[0].reason: missing"),
        ("graph_breaks", [{"file": "/a.py", "line": 3, "reason": 7}], "graph_breaks[0].reason: expected a string"),
        ("output_code", "out/output_code.py", "output_code: expected an absolute path"),
        ("kernels.0.source_language", "py\n```", "kernels[0].source_language: expected a language id"),
        ("kernels.0.source_language", 3, "kernels[0].source_language: expected a language id"),
    ],
)
def test_each_contract_violation_is_rejected_with_its_field(tmp_path, field, value, message):
    with pytest.raises(RecordError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_record(_with(_valid(tmp_path), field, value))


def test_optional_fields_may_be_missing_or_null_and_unknown_fields_are_ignored(tmp_path):
    document = _valid(tmp_path)
    for key in ("externs", "fusion", "graph_breaks", "cudagraphs", "output_code", "mode", "created", "compile_time_s"):
        document.pop(key, None)
    document["kernels"][0].pop("output_code_line", None)
    document["function"]["source_sha256"] = None
    document["added_in_a_later_minor_version"] = {"anything": [1, 2]}
    record = parse_record(document)
    assert record.externs == () and record.cudagraphs is None and record.output_code is None
    assert record.compile_time_s is None and record.function.source_sha256 is None


def _write_bad_files(directory: Path, valid: dict) -> dict[str, str]:
    """File name -> the reason the store must give for skipping it."""
    directory.mkdir(parents=True, exist_ok=True)
    text = json.dumps(valid)
    files = {
        "malformed.json": (b"{not json", "not valid JSON"),
        "truncated.json": (text[: len(text) // 2].encode(), "not valid JSON"),
        "empty.json": (b"", "not valid JSON"),
        "latin1.json": (text.replace("torch.cos", "torch.\xe7os").encode("latin-1"), "not UTF-8"),
        "foreign.json": (json.dumps({"schema": "other", "kernels": []}).encode(), "not a fuse-all record"),
        "newer.json": (json.dumps({**valid, "schema_version": 99}).encode(), "newer than this server reads"),
        "list.json": (b"[1, 2, 3]", "expected an object"),
        "deep.json": (b"[" * 200_000 + b"]" * 200_000, "JSON"),
        "wrong-types.json": (json.dumps({**valid, "kernels": "cos"}).encode(), "kernels: expected a list"),
    }
    reasons = {}
    for name, (data, reason) in files.items():
        (directory / name).write_bytes(data)
        reasons[name] = reason
    with open(directory / "huge.json", "w", encoding="utf-8") as handle:
        handle.write('{"schema": "fuse-all-artifact", "padding": "')
        handle.write("x" * MAX_RECORD_BYTES)
        handle.write('"}')
    reasons["huge.json"] = "larger than 8 MiB"
    return reasons


def test_store_skips_every_bad_file_with_a_reason_and_keeps_the_good_one(tmp_path):
    directory = tmp_path / "artifacts"
    reasons = _write_bad_files(directory, _valid(tmp_path))
    sample_project.write_record(directory, _valid(tmp_path))
    (directory / "a-folder.json").mkdir()
    (directory / "notes.txt").write_text("not a record")
    skipped: dict[str, str] = {}
    records = load_records(directory, on_skip=lambda path, reason: skipped.setdefault(os.path.basename(path), reason))
    assert [r.graph_id for r in records] == ["g_ok_0"]
    assert set(skipped) == set(reasons)
    for name, reason in reasons.items():
        assert reason in skipped[name], (name, skipped[name])


def test_store_rereads_only_changed_files_and_notices_removals(tmp_path):
    directory = tmp_path / "artifacts"
    valid = _valid(tmp_path)
    path = sample_project.write_record(directory, valid)
    skips: list[str] = []
    store = RecordStore(directory, on_skip=lambda p, reason: skips.append(reason))
    assert store.refresh() is True and len(store.records()) == 1
    assert store.refresh() is False, "nothing changed, nothing re-read"
    path.write_text("{broken", encoding="utf-8")
    assert store.refresh() is True and store.records() == [] and len(skips) == 1
    assert store.refresh() is False and len(skips) == 1, "a bad file is logged once, not on every scan"
    sample_project.write_record(directory, _with(valid, "graph_id", "g_ok_1"))
    path.unlink()
    assert store.refresh() is True
    assert [r.graph_id for r in store.records()] == ["g_ok_1"] and store.skipped == {}


def test_missing_directory_is_empty_not_an_error(tmp_path):
    assert load_records(tmp_path / "does-not-exist") == []


def test_source_hashes_read_only_regular_files(tmp_path):
    """Records name files; one naming a device or a fifo must not hang the stale check."""
    source = tmp_path / "a.py"
    source.write_bytes(b"x = 1\n")
    fifo = tmp_path / "fifo.py"
    os.mkfifo(fifo)
    hashes = SourceHashes()
    assert hashes.sha256(str(source)) == hashlib.sha256(b"x = 1\n").hexdigest()
    assert hashes.sha256("/dev/zero") is None
    assert hashes.sha256(str(fifo)) is None
    assert hashes.sha256(str(tmp_path / "missing.py")) is None


def test_a_kernel_of_any_target_is_fenced_in_its_source_language(tmp_path):
    """The record names the target and its source's language id (the compiler's target registry wrote
    it), so a target the server has never heard of is shown right; older records fall back to the
    language ids of the two first targets."""
    from fuse_all_lsp.render import kernel_section

    document = _valid(tmp_path)
    document["kernels"][0].update(language="meta_noop", source_language="text", source="kernel_0: noop")
    record = parse_record(document)
    assert record.kernels[0].fence_language == "text"
    assert "```text\nkernel_0: noop\n```" in kernel_section(record, record.kernels[0])
    for language, fence in (("triton", "python"), ("cpp", "cpp"), ("meta_noop", "")):
        document["kernels"][0].update(language=language)
        document["kernels"][0].pop("source_language")
        assert parse_record(document).kernels[0].fence_language == fence
        document["kernels"][0]["source_language"] = None

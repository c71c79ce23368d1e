"""The cache rules shared by every cache (fuse_all_ir.cache_dirs): one root, private folders, planted or
damaged entries never trusted, temp files never followed through symlinks, stale temp files swept."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import fuse_all
import fuse_all_ir as ir
from fuse_all_ir import cache_dirs


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("FUSE_ALL_CACHE_DIR", str(root))
    return root


@pytest.mark.parametrize("env, platform, expected", [
    ({"FUSE_ALL_CACHE_DIR": "/c/fa", "XDG_CACHE_HOME": "/xdg"}, "linux", "/c/fa"),
    ({"XDG_CACHE_HOME": "/xdg"}, "linux", "/xdg/fuse-all"),
    ({"XDG_CACHE_HOME": ""}, "linux", "~/.cache/fuse-all"),
    ({}, "linux", "~/.cache/fuse-all"),
    ({}, "darwin", "~/Library/Caches/fuse-all"),
    ({"LOCALAPPDATA": "/local"}, "win32", "/local/fuse-all"),
])
def test_one_cache_root(env, platform, expected, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert ir.cache_root(env, platform) == Path(expected.replace("~", str(tmp_path)))


def test_every_cache_lives_under_the_root_and_is_private(cache):
    from fuse_all_codegen_cpp import cache_dir
    from fuse_all_codegen_triton import autotune
    assert cache_dir() == cache / "cpp"
    assert Path(autotune.cache_root()) == cache / "triton"
    module = ir.load_host_program("x = 1\n")
    assert Path(module.__fuse_all_path__).parent.parent == cache / "host"
    for folder in (cache, cache / "cpp", cache / "triton", cache / "host", Path(module.__fuse_all_path__).parent):
        assert folder.stat().st_mode & 0o777 == 0o700, folder


def test_a_named_root_is_checked_but_not_chmodded_a_default_one_is(tmp_path, monkeypatch):
    named = tmp_path / "mine"
    named.mkdir(mode=0o755)
    named.chmod(0o755)
    monkeypatch.setenv("FUSE_ALL_CACHE_DIR", str(named))
    assert ir.private_dir("cpp") == named / "cpp"
    assert named.stat().st_mode & 0o777 == 0o755 and (named / "cpp").stat().st_mode & 0o777 == 0o700
    monkeypatch.delenv("FUSE_ALL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    (tmp_path / "xdg" / "fuse-all").mkdir(mode=0o755, parents=True)
    (tmp_path / "xdg" / "fuse-all").chmod(0o755)
    assert ir.private_dir("host") == tmp_path / "xdg" / "fuse-all" / "host"
    assert (tmp_path / "xdg" / "fuse-all").stat().st_mode & 0o777 == 0o700


def test_a_world_writable_root_is_refused(tmp_path, monkeypatch, caplog):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)                              # like /tmp
    monkeypatch.setenv("FUSE_ALL_CACHE_DIR", str(shared))
    used = ir.private_dir("cpp")
    assert not used.is_relative_to(shared) and used.stat().st_mode & 0o777 == 0o700
    assert "writable by group/others" in caplog.text


PROGRAM = "def call(args):\n    a, b = args\n    return (a + b, a * b)\n"
MARKER_CODE = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\n" + PROGRAM


def _host_file(cache, source):
    import hashlib
    return cache / "host" / hashlib.sha256(source.encode()).hexdigest()[:24] / "output_code.py"


def test_planted_host_program_in_a_folder_others_may_write_is_never_run(cache, tmp_path, caplog):
    """The digest is predictable: another user who can write to host/ could plant output_code.py."""
    ir.load_host_program(PROGRAM)
    marker = tmp_path / "pwned"
    planted = _host_file(cache, PROGRAM)
    planted.write_text(MARKER_CODE.format(marker=str(marker)))
    (cache / "host").chmod(0o777)
    module = ir.load_host_program(PROGRAM)
    assert module.call([2, 3]) == (5, 6)
    assert not marker.exists()
    assert "writable by group/others" in caplog.text
    assert not Path(module.__fuse_all_path__).is_relative_to(cache)     # a private folder of this process
    assert planted.read_text() != PROGRAM                                  # refused, not touched


def test_planted_host_program_with_the_right_name_is_replaced_not_run(cache, tmp_path):
    marker = tmp_path / "pwned"
    planted = _host_file(cache, PROGRAM)
    planted.parent.mkdir(mode=0o700, parents=True)
    planted.write_text(MARKER_CODE.format(marker=str(marker)))
    module = ir.load_host_program(PROGRAM)
    assert module.call([2, 3]) == (5, 6) and not marker.exists()
    assert planted.read_text() == PROGRAM


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give files to another user")
def test_host_folder_or_file_owned_by_another_user_is_not_trusted(cache, tmp_path, caplog):
    ir.load_host_program(PROGRAM)
    marker = tmp_path / "pwned"
    planted = _host_file(cache, PROGRAM)
    planted.write_text(MARKER_CODE.format(marker=str(marker)))
    os.chown(planted, 12345, 12345)                        # a file of someone else's in our folder: rewritten
    assert ir.load_host_program(PROGRAM).call([2, 3]) == (5, 6) and not marker.exists()
    assert planted.read_text() == PROGRAM and planted.stat().st_uid == os.getuid()
    planted.write_text(MARKER_CODE.format(marker=str(marker)))
    os.chown(cache / "host", 12345, 12345)                 # the folder itself: refused
    module = ir.load_host_program(PROGRAM)
    assert module.call([2, 3]) == (5, 6) and not marker.exists()
    assert "owned by uid 12345" in caplog.text and not Path(module.__fuse_all_path__).is_relative_to(cache)


@pytest.mark.parametrize("damage", ["truncated at a line", "truncated mid-line", "empty", "one byte flipped"])
def test_damaged_host_program_is_rebuilt(cache, damage):
    """A crash mid-write (or a disk error) must not make every later run fail or fall back."""
    ir.load_host_program(PROGRAM)
    path = _host_file(cache, PROGRAM)
    damaged = {"truncated at a line": PROGRAM[: PROGRAM.index("return")],
               "truncated mid-line": PROGRAM[:-9],
               "empty": "",
               "one byte flipped": PROGRAM.replace("a * b", "a - b")}[damage]
    path.write_text(damaged)
    module = ir.load_host_program(PROGRAM)
    assert module.call([2, 3]) == (5, 6)
    assert path.read_text() == PROGRAM


@pytest.mark.parametrize("damage", ["truncated", "flipped byte", "empty", "valid checksum, other code"])
def test_damaged_host_bytecode_is_recompiled(cache, damage):
    import hashlib
    import marshal
    ir.load_host_program(PROGRAM)
    (blob,) = _host_file(cache, PROGRAM).parent.glob("*.bin")
    data = blob.read_bytes()
    other = marshal.dumps(compile(PROGRAM.replace("a * b", "a - b"), "x", "exec"))
    blob.write_bytes({"truncated": data[: len(data) // 2],
                      "flipped byte": data[:40] + bytes([data[40] ^ 1]) + data[41:],
                      "empty": b"",
                      "valid checksum, other code": hashlib.sha256(other).digest() + other}[damage])
    blob.chmod(0o600 if damage != "valid checksum, other code" else 0o666)   # the last: "planted" by others
    assert ir.load_host_program(PROGRAM).call([2, 3]) == (5, 6)
    assert blob.read_bytes() == data


def test_host_program_is_not_written_through_a_symlink(cache, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    path = _host_file(cache, PROGRAM)
    path.parent.mkdir(mode=0o700, parents=True)
    path.symlink_to(victim)
    module = ir.load_host_program(PROGRAM)
    assert module.call([1, 1]) == (2, 1)
    assert victim.read_text() == "precious" and not path.is_symlink()


GRAPH_RUN = """
import torch, fuse_all
fn = lambda x: (x.sin() + 1, x.cos())
x = torch.randn(33)
out = torch.compile(fn, backend="fuse_all")(x)
torch.testing.assert_close(out, fn(x))
record = fuse_all.compiled_graphs()[-1]
print(record.fallback_reason, record.output_code, sep="\\n")
"""


def test_damaged_graph_output_code_is_rebuilt_through_torch_compile(cache):
    """Issue 9.10: a truncated output_code.py made every later process fail ("expected 2 outputs")."""
    def run():
        result = subprocess.run([sys.executable, "-c", GRAPH_RUN], capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        reason, output_code = result.stdout.splitlines()[-2:]
        assert reason == "None"
        return Path(output_code)
    path = run()
    text = path.read_text()
    path.write_text(text[: text.rindex("return")])            # loses the last line
    assert run() == path and path.read_text() == text


def test_stale_temp_files_are_swept_live_ones_kept(tmp_path):
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    names = {
        f"output_code.py.{dead}.k2j4h5g6.tmp": False,            # its writer is gone
        f"output_code.py.{os.getpid()}.a1b2c3d4.tmp": True,      # a live writer
        "x.json.zz.tmp": True,                                   # unknown writer, recent
        "keep.json": True,
    }
    for name in names:
        (tmp_path / name).write_text("x")
    old = tmp_path / "ancient.tmp"
    old.write_text("x")
    os.utime(old, (time.time() - 2 * cache_dirs.STALE_TEMP_S, time.time() - 2 * cache_dirs.STALE_TEMP_S))
    removed = cache_dirs.sweep_stale_temps(tmp_path, force=True)
    assert sorted(removed) == sorted([f"output_code.py.{dead}.k2j4h5g6.tmp", "ancient.tmp"])
    for name, kept in names.items():
        assert (tmp_path / name).exists() == kept, name


def test_atomic_write_uses_exclusive_private_temp_files(tmp_path, monkeypatch):
    import tempfile
    made = []
    real = tempfile.mkstemp

    def spy(*args, **kwargs):
        fd, name = real(*args, **kwargs)
        made.append((name, os.stat(name).st_mode & 0o777))
        return fd, name
    monkeypatch.setattr(tempfile, "mkstemp", spy)
    ir.atomic_write(tmp_path / "a.json", "{}")
    (name, mode), = made
    assert Path(name).parent == tmp_path and mode == 0o600 and f".{os.getpid()}." in name
    assert not Path(name).exists() and (tmp_path / "a.json").read_text() == "{}"


# ---- the Triton autotune cache ------------------------------------------------------------------------

def test_autotune_entries_damaged_or_planted_are_ignored_and_rewritten(cache):
    from fuse_all_codegen_triton import autotune
    key = autotune.cache_key("h", [{"XBLOCK": 64}], "1024x0", "dev", "3.x")
    path = Path(autotune.cache_root()) / "autotune" / f"{key}.json"
    autotune.store_choice(key, {"XBLOCK": 64, "num_warps": 4})
    good = path.read_text()
    for damaged in (good[: len(good) // 2], "", "[1, 2]", '{"config": [64]}', '{"config": {"XBLOCK": "64"}}',
                    '{"config": {"XBLOCK": true}}'):
        path.write_text(damaged)
        assert autotune.load_choice(key) is None, damaged     # a miss: the caller benchmarks again ...
        autotune.store_choice(key, {"XBLOCK": 64, "num_warps": 4})
        assert autotune.load_choice(key) == {"XBLOCK": 64, "num_warps": 4}   # ... and overwrites it
    path.chmod(0o666)                                          # writable by others: not trusted
    assert autotune.load_choice(key) is None
    path.chmod(0o600)
    (cache / "triton" / "autotune").chmod(0o777)               # a folder others may write: not used
    assert autotune.load_choice(key) is None
    assert json.loads(path.read_text())["config"] == {"XBLOCK": 64, "num_warps": 4}

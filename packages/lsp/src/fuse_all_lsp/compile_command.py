"""`fuse-all.compileFile` / `fuse-all.profileFile`: run the user's file with their interpreter so its
compiles write records (and, profiling, `python -m fuse_all.profiling` adds where the time went).

The file runs in a child process with FUSE_ALL_ARTIFACT_DIR pointing at the server's artifact
directory; the server itself never imports the user's code or torch.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.uris import to_fs_path

from .render import plural

if TYPE_CHECKING:
    from .server import FuseAllServer

TICK_S = 0.5
OUTPUT_TAIL_LINES = 20


def _new_records(directory: Path, since_ns: int) -> int:
    try:
        return sum(
            1
            for entry in os.scandir(directory)
            if entry.name.endswith(".json") and not entry.name.startswith(".") and entry.stat().st_mtime_ns >= since_ns
        )
    except OSError:
        return 0


class _Progress:
    """$/progress reports when the client created the token; silent when it did not."""

    def __init__(self, server: FuseAllServer):
        self.server = server
        self.token = f"fuse-all-compile-{uuid.uuid4()}"
        self.active = False
        self.cancelled = False

    async def begin(self, title: str) -> None:
        window = self.server.client_capabilities.window
        if not (window and window.work_done_progress):
            return
        try:
            await self.server.work_done_progress.create_async(self.token)
        except Exception:  # the client refused the token: compile without progress
            return
        self.active = True
        self.server.work_done_progress.begin(
            self.token, types.WorkDoneProgressBegin(title=title, cancellable=True, percentage=0)
        )
        self.server.work_done_progress.tokens[self.token].add_done_callback(self._on_done)

    def _on_done(self, future: Any) -> None:
        self.cancelled = future.cancelled()

    def report(self, message: str) -> None:
        if self.active:
            self.server.work_done_progress.report(self.token, types.WorkDoneProgressReport(message=message))

    def end(self, message: str) -> None:
        if self.active:
            self.server.work_done_progress.end(self.token, types.WorkDoneProgressEnd(message=message))
            self.server.work_done_progress.tokens.pop(self.token, None)


def profile_target(server: FuseAllServer, path: str) -> tuple[list[str], str]:
    """What fuse-all.profileFile runs, and where: the file, or the `profileEntry` setting (a script, relative
    to the workspace folder holding the file, or `-m module` run there) with `profileArgs`."""
    entry, arguments = server.settings.profile_entry, list(server.settings.profile_args)
    if not entry:
        return [path, *arguments], os.path.dirname(path)
    root = next((r for r in server.roots() if os.path.commonpath([r, path]) == r), os.path.dirname(path))
    if entry.startswith("-m "):
        return ["-m", entry[3:].strip(), *arguments], root
    script = entry if os.path.isabs(entry) else os.path.join(root, entry)
    return [script, *arguments], os.path.dirname(script)


async def compile_file(server: FuseAllServer, uri: str, profile: bool = False) -> dict[str, Any]:
    path = to_fs_path(uri) or ""
    directory = server.artifact_dir
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)   # private, as the compiler wants it
    target, cwd = profile_target(server, path) if profile else ([path], os.path.dirname(path))
    progress = _Progress(server)
    shown = target[1] if target[0] == "-m" else Path(target[0]).name
    await progress.begin(f"fuse-all: {'profiling' if profile else 'compiling'} {shown}")
    started_ns = time.time_ns()
    environment = dict(os.environ, FUSE_ALL_ARTIFACT_DIR=str(directory), PYTHONUNBUFFERED="1")
    runner = ["-m", "fuse_all.profiling"] if profile else []
    try:
        process = await asyncio.create_subprocess_exec(
            server.python,
            *runner,
            *target,
            cwd=cwd or None,
            env=environment,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except OSError as error:
        message = f"cannot run {server.python}: {error.strerror or error}"
        progress.end(message)
        server.window_show_message(
            types.ShowMessageParams(type=types.MessageType.Error, message=f"fuse-all: {message}")
        )
        return {"ok": False, "error": message}

    tail: deque[str] = deque(maxlen=OUTPUT_TAIL_LINES)
    assert process.stdout is not None
    reader = asyncio.ensure_future(process.stdout.readline())
    while True:
        done, _ = await asyncio.wait({reader}, timeout=TICK_S)
        if progress.cancelled:
            process.kill()
        if reader in done:
            line = reader.result()
            if not line:
                break
            tail.append(line.decode("utf-8", errors="replace").rstrip())
            reader = asyncio.ensure_future(process.stdout.readline())
        progress.report(
            f"{plural(_new_records(directory, started_ns), 'graph')} compiled" + (f" · {tail[-1][:80]}" if tail else "")
        )
    returncode = await process.wait()

    records = _new_records(directory, started_ns)
    server.store.refresh()
    server.refresh_views()
    ok = returncode == 0 and not progress.cancelled
    summary = (
        f"{plural(records, 'graph')} {'profiled' if profile else 'compiled'}"
        if ok
        else ("cancelled" if progress.cancelled else f"{shown} exited with {returncode}")
    )
    progress.end(summary)
    if not ok and not progress.cancelled:
        detail = "\n".join(list(tail)[-5:])
        server.window_show_message(
            types.ShowMessageParams(type=types.MessageType.Error, message=f"fuse-all: {summary}\n{detail}")
        )
    else:
        server.log(types.MessageType.Info, f"{shown}: {summary}")
    return {"ok": ok, "returncode": returncode, "records": records, "output": list(tail)}

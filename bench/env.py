"""Make the repository's fuse_all importable and registered, on any machine, and describe the machine.

The GPU machine has no pip/hatch installs of this repository, so the entry point `torch_dynamo_backends`
is missing there: the source folders go on `sys.path` and the backend is registered by hand. On a dev
machine with the editable install the entry point wins and nothing is registered twice.
"""
from __future__ import annotations

import contextlib
import glob
import os
import platform
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def add_repo_paths() -> None:
    """Put `src` and every `packages/*/src` first on sys.path: the benchmark measures this checkout."""
    for path in [os.path.join(REPO, "src")] + sorted(glob.glob(os.path.join(REPO, "packages", "*", "src"))):
        if path not in sys.path:
            sys.path.insert(0, path)



@contextlib.contextmanager
def temporary_environ(values: dict[str, str]):
    """Set environment variables for a block, restoring the previous values (or their absence) afterwards."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

def register_fuse_all() -> str | None:
    """Make `backend="fuse_all"` work; returns None, or why it cannot (one line) so its cells can say so."""
    import torch
    try:
        import fuse_all
    except Exception as exc:  # noqa: BLE001 - a broken backend must not stop eager/Inductor measurements
        return f"import fuse_all: {type(exc).__name__}: {_first_line(exc)}"
    try:
        torch._dynamo.lookup_backend("fuse_all")          # the installed entry point, if any
    except Exception:  # noqa: BLE001 - not installed (GPU machine) or entry point broken: register it
        from torch._dynamo.backends.registry import _COMPILER_FNS
        if "fuse_all" not in _COMPILER_FNS:
            torch._dynamo.register_backend(fuse_all.fuse_all, "fuse_all")
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def one_line(exc: BaseException, limit: int = 160) -> str:
    """`Type: first line of the message` of the root cause, cut to `limit` characters (for a table cell).
    Dynamo wraps a backend's error ("BackendCompilerFailed: backend='fuse_all' raised:" and the real
    message on the next lines), so the chain is followed down to the exception that started it."""
    for _ in range(10):
        inner = getattr(exc, "inner_exception", None) or exc.__cause__
        if inner is None:
            break
        exc = inner
    text = f"{type(exc).__name__}: {_first_line(exc)}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(device: str) -> dict:
    """Versions and device name, for the results header."""
    import torch
    info = {"python": platform.python_version(), "torch": torch.__version__, "cpu": platform.processor() or
            platform.machine(), "cores": os.cpu_count(), "threads": torch.get_num_threads(),
            # other processes on a shared machine make CPU numbers noisy: say how busy it was
            "load_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None}
    try:
        import triton
        info["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        info["triton"] = "not installed"
    for name in ("torchvision", "timm", "transformers"):
        try:
            info[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001
            info[name] = "not installed"
    if device == "cuda":
        info["device"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
    else:
        info["device"] = _cpu_model() or info["cpu"]
    return info


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None

"""Choosing a launch config on the first call: benchmark the candidates with the real arguments, and
remember the winner on disk so the next process skips both the benchmark and the losers' compiles.

Cache: ``$FUSE_ALL_CACHE_DIR/triton/autotune`` (default ``~/.cache/fuse-all/triton/autotune``), folders
mode 0700, one small JSON file per key. The key is the kernel source hash + the candidate list + a size
bucket (powers of two of xnumel/rnumel, so dynamic shapes share entries) + device name + Triton version.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile

from .indexing import next_power_of_2

BENCH_TARGET_MS = 2.0    # time one candidate's timed batch takes, roughly
MAX_REPS = 100


def cache_root() -> str:
    base = os.environ.get("FUSE_ALL_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "fuse-all")
    return os.path.join(base, "triton")


def _ensure_dir(path: str) -> str:
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def size_bucket(xnumel: int, rnumel: int | None) -> str:
    return f"{next_power_of_2(xnumel)}x{next_power_of_2(rnumel) if rnumel is not None else 0}"


def cache_key(source_hash: str, configs: list, bucket: str, device_name: str, triton_version: str) -> str:
    text = json.dumps([source_hash, configs, bucket, device_name, triton_version], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def load_choice(key: str) -> dict | None:
    path = os.path.join(cache_root(), "autotune", key + ".json")
    try:
        with open(path) as f:
            data = json.load(f)
        return data["config"] if isinstance(data, dict) and isinstance(data.get("config"), dict) else None
    except (OSError, ValueError, KeyError):
        return None


def store_choice(key: str, config: dict, timings_ms: list | None = None) -> None:
    folder = _ensure_dir(os.path.join(_ensure_dir(cache_root()), "autotune"))
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"config": config, "timings_ms": timings_ms}, f)
        os.replace(tmp, os.path.join(folder, key + ".json"))
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def benchmark(launchers: list, synchronize, make_event) -> list[float]:
    """Milliseconds per launch of each zero-argument launcher. Cheap on purpose (this runs during the
    first call): one warm-up launch, one timed launch to size the batch, then a batch of ~2 ms; the best
    of two batches."""
    times = []
    for launch in launchers:
        launch()
        synchronize()
        start, end = make_event(), make_event()
        start.record()
        launch()
        end.record()
        synchronize()
        once = max(start.elapsed_time(end), 1e-3)
        reps = int(max(3, min(MAX_REPS, BENCH_TARGET_MS / once)))
        best = float("inf")
        for _ in range(2):
            start.record()
            for _ in range(reps):
                launch()
            end.record()
            synchronize()
            best = min(best, start.elapsed_time(end) / reps)
        times.append(best)
    return times

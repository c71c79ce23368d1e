"""Choosing a launch config on the first call: benchmark the candidates with the real arguments, and
remember the winner on disk so the next process skips both the benchmark and the losers' compiles.

Cache: ``<cache root>/triton/autotune`` (`fuse_all_ir.cache_root`: ``$FUSE_ALL_CACHE_DIR`` or
``~/.cache/fuse-all``), private folders (0700, owner checked), one small JSON file per key; a damaged
entry is ignored and rewritten. The key is the kernel source hash + the candidate list + a size
bucket (powers of two of xnumel/rnumel, so dynamic shapes share entries) + the device (name, compute
capability, SM count: `device_identity`) + the Triton and torch versions + `KEY_FORMAT`. With the caches
disabled (`fuse_all_ir.caches_disabled`) nothing is remembered (`private_dir` gives a fresh folder).
"""
from __future__ import annotations

import hashlib
import json
import os

from fuse_all_ir import atomic_write, compile_timing, portable_caches, private_dir, read_regular_file

from .indexing import next_power_of_2

BENCH_TARGET_MS = 2.0    # time one candidate's timed batch takes, roughly
MAX_REPS = 100


def cache_root() -> str:
    """`<cache root>/triton` (`fuse_all_ir.cache_root`), private (see `fuse_all_ir.private_dir`)."""
    return str(private_dir("triton"))


def size_bucket(xnumel: int, rnumel: int | None) -> str:
    return f"{next_power_of_2(xnumel)}x{next_power_of_2(rnumel) if rnumel is not None else 0}"


KEY_FORMAT = "fuse-all-autotune-2"   # bump when the meaning of an entry changes


def device_identity(properties) -> str:
    """The GPU as it matters to a tuning choice: name, compute capability (the arch Triton compiles for)
    and SM count (a MIG slice has the name of the whole GPU), from `torch.cuda.get_device_properties`."""
    arch = f"{getattr(properties, 'major', '?')}.{getattr(properties, 'minor', '?')}"
    gcn = getattr(properties, "gcnArchName", "")      # ROCm's arch name
    return f"{properties.name}|cc{arch}{'|' + gcn if gcn else ''}|{getattr(properties, 'multi_processor_count', '?')}SM"


def cache_key(source_hash: str, configs: list, bucket: str, device: str, triton_version: str,
              torch_version: str | None = None) -> str:
    if torch_version is None:
        import torch
        torch_version = torch.__version__
    text = json.dumps([KEY_FORMAT, source_hash, configs, bucket, device, triton_version, torch_version],
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def load_choice(key: str) -> dict | None:
    """The remembered config, or None when there is none or the entry is damaged (not JSON, not the
    schema, not a regular file of this user): then the caller benchmarks again and overwrites it."""
    data = read_regular_file(os.path.join(private_dir("triton", "autotune"), key + ".json"))
    if data is None:
        return None
    try:
        entry = json.loads(data)
    except ValueError:
        return None
    config = entry.get("config") if isinstance(entry, dict) else None
    if not isinstance(config, dict) or not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                                               for k, v in config.items()):
        return None
    portable_caches.record_autotune_choice(key, data)   # torch.compiler.save_cache_artifacts() carries it
    return config


def store_choice(key: str, config: dict, timings_ms: list | None = None) -> None:
    data = json.dumps({"config": config, "timings_ms": timings_ms}).encode()
    portable_caches.record_autotune_choice(key, data)
    try:
        atomic_write(os.path.join(private_dir("triton", "autotune"), key + ".json"), data)
    except OSError:
        pass   # remembering the choice is an optimisation


def benchmark(launchers: list, synchronize, make_event) -> list[float]:
    """Milliseconds per launch of each zero-argument launcher. Cheap on purpose (this runs during the
    first call): one warm-up launch, one timed launch to size the batch, then a batch of ~2 ms; the best
    of two batches."""
    with compile_timing.phase("autotune"):
        return _benchmark(launchers, synchronize, make_event)


def _benchmark(launchers: list, synchronize, make_event) -> list[float]:
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

"""Run a function on a CPU process group: `world` processes started with torch.multiprocessing (spawn), the
gloo backend, rendezvous on a free port of 127.0.0.1. Each rank's return value comes back to the test.

The function must be importable by name in the children (a test module under --import-mode=importlib is
not), so the rank functions live in modules beside this one.
"""
from __future__ import annotations

import os
import socket
import sys
import tempfile
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def run_ranks(fn: Callable[..., Any], *args: Any, world: int = 2) -> list[Any]:
    """fn(rank, world, *args) on every rank of a fresh gloo group; returns the results in rank order.
    A failing rank fails the call with that rank's traceback (torch.multiprocessing's ProcessRaisedException)."""
    with tempfile.TemporaryDirectory(prefix="fuse-all-dist-") as results:
        mp.spawn(_rank_main, args=(world, free_port(), fn, args, results), nprocs=world, join=True)
        return [torch.load(os.path.join(results, f"rank{r}.pt"), weights_only=False) for r in range(world)]


def _rank_main(rank: int, world: int, port: int, fn, args, results: str) -> None:
    os.environ.update(MASTER_ADDR=HOST, MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    if sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")   # keep gloo's own connections on loopback too
    torch.set_num_threads(1)   # `world` processes share the CI machine's cores
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        result = fn(rank, world, *args)
        torch.save(result, os.path.join(results, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()

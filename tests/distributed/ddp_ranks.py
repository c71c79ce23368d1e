"""What each rank runs in the DDP tests (importable by name in the spawned processes)."""
from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import tiny_models

ORDERS = ("compile(DDP)", "DDP(compile)")


def _wrap(order: str, module: torch.nn.Module, backend, bucket_bytes: int) -> torch.nn.Module:
    def ddp(m):
        return DDP(m, bucket_cap_mb=bucket_bytes / 2**20)
    if order == "compile(DDP)":
        return torch.compile(ddp(module), backend=backend)
    if order == "DDP(compile)":
        return ddp(torch.compile(module, backend=backend))
    return ddp(module)   # "eager"


def _train(model, module, batch_of, rank: int, steps: int, dtype=torch.float32) -> list[dict]:
    optimizer = torch.optim.SGD(module.parameters(), lr=0.05, momentum=0.9)
    states = []
    for step in range(steps):
        batch = tuple(t.to(dtype) if t.is_floating_point() else t for t in batch_of(rank, step))
        optimizer.zero_grad(set_to_none=True)
        loss = tiny_models.loss_of(model, batch)
        loss.backward()
        grads = [p.grad.detach().clone() for p in module.parameters()]
        optimizer.step()
        states.append({"loss": [loss.detach().clone()], "grads": grads,
                       "params": [p.detach().clone() for p in module.parameters()],
                       "buffers": [b.detach().clone() for b in module.buffers()]})
    return states


def _graph_count(order: str, base, batch_of, rank: int, bucket_bytes: int, backend: str) -> int:
    """How many graphs Dynamo hands the backend for one training step (DDPOptimizer: one per bucket split)."""
    from torch._dynamo.backends.registry import lookup_backend
    inner, count = lookup_backend(backend), [0]

    def counting(gm, example_inputs, **kwargs):
        count[0] += 1
        return inner(gm, example_inputs, **kwargs)
    torch._dynamo.reset()
    module = copy.deepcopy(base)
    tiny_models.loss_of(_wrap(order, module, counting, bucket_bytes), batch_of(rank, 0)).backward()
    return count[0]


def train_ddp(rank: int, world: int, model_name: str, order: str, bucket_bytes: int, steps: int) -> dict:
    """Uncompiled DDP in float32 and float64, then fuse_all in wrapping `order`, `steps` SGD steps each from
    the same start; plus how many graphs fuse_all and aot_eager compile in that order."""
    import fuse_all
    # DDP sizes its first gradient bucket from bucket_cap_mb when that is given, Dynamo's DDPOptimizer from
    # this constant (1 MiB; it rejects a smaller bucket_cap_mb): the same split for models of a few KB
    dist._DEFAULT_FIRST_BUCKET_BYTES = bucket_bytes
    build, batch_of = tiny_models.MODELS[model_name]
    torch.manual_seed(0)
    base = build()
    result = {}
    for dtype in (torch.float32, torch.float64):
        module = copy.deepcopy(base).to(dtype)
        result[str(dtype)] = _train(_wrap("eager", module, None, bucket_bytes), module, batch_of, rank, steps, dtype)
    fuse_all.reset()
    module = copy.deepcopy(base)
    result["fuse_all"] = _train(_wrap(order, module, "fuse_all", bucket_bytes), module, batch_of, rank, steps)
    records = fuse_all.compiled_graphs()
    result["fuse_all_graphs"] = sum(r.kind in ("forward", "inference") for r in records)
    result["fallbacks"] = [(r.graph_id, r.fallback_reason) for r in records if r.fallback_reason]
    result["aot_eager_graphs"] = _graph_count(order, base, batch_of, rank, bucket_bytes, "aot_eager")
    return result

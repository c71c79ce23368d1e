"""DDP on one GPU over NCCL (world size 1), both wrapping orders, default and reduce-overhead: several SGD
steps judged against uncompiled DDP in float64, relative to uncompiled float32 DDP's own error (issue 15).
The two-process CPU/gloo tests are in tests/distributed; this is the CUDA half of that check."""
from __future__ import annotations

import copy
import socket
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "distributed"))
import tiny_models  # noqa: E402

import fuse_all  # noqa: E402

pytestmark = pytest.mark.cuda
STEPS = 3


@pytest.fixture(scope="module")
def nccl_group():
    if not dist.is_nccl_available():
        pytest.skip("NCCL is not available in this torch build")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _train(model, module, batch_of, dtype):
    optimizer = torch.optim.SGD(module.parameters(), lr=0.05, momentum=0.9)
    states = []
    for step in range(STEPS):
        batch = tuple(t.cuda() for t in batch_of(0, step))
        batch = tuple(t.to(dtype) if t.is_floating_point() else t for t in batch)
        optimizer.zero_grad(set_to_none=True)
        loss = tiny_models.loss_of(model, batch)
        loss.backward()
        states.append([loss.detach().clone()] + [p.grad.detach().clone() for p in module.parameters()])
        optimizer.step()
    states.append([p.detach().clone() for p in module.parameters()])
    return states


def _error(value, reference):
    return (torch.linalg.vector_norm((value.double() - reference)) /
            torch.linalg.vector_norm(reference).clamp_min(1e-30)).item()


@pytest.mark.parametrize("mode", [None, "reduce-overhead"], ids=["default", "reduce-overhead"])
@pytest.mark.parametrize("order", ["compile(DDP)", "DDP(compile)"])
@pytest.mark.parametrize("model_name", ["resnet", "transformer"])
def test_ddp_one_gpu_trains_like_uncompiled(nccl_group, model_name, order, mode):
    build, batch_of = tiny_models.MODELS[model_name]
    torch.manual_seed(0)
    base = build().cuda()
    reference = {}
    for dtype in (torch.float32, torch.float64):
        module = copy.deepcopy(base).to(dtype)
        reference[dtype] = _train(DDP(module), module, batch_of, dtype)
    torch._dynamo.reset()
    fuse_all.reset()
    module = copy.deepcopy(base)
    if order == "compile(DDP)":
        model = torch.compile(DDP(module), backend="fuse_all", mode=mode)
    else:
        model = DDP(torch.compile(module, backend="fuse_all", mode=mode))
    compiled = _train(model, module, batch_of, torch.float32)
    records = fuse_all.compiled_graphs()
    assert records and not [r.fallback_reason for r in records if r.fallback_reason]
    for step, (got, eager32, exact) in enumerate(zip(compiled, reference[torch.float32], reference[torch.float64])):
        for i, (g, e, x) in enumerate(zip(got, eager32, exact)):
            bound = max(10 * _error(e, x), 1e-4)
            assert _error(g, x) <= bound, f"step {step} tensor {i}: {_error(g, x):.2e} > {bound:.2e}"

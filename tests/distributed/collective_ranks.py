"""What each rank runs in the collective tests (importable by name in the spawned processes)."""
from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import tiny_models

COLLECTIVE_NAMESPACE = "_c10d_functional."


def program_steps(records) -> list[dict]:
    """The records' kernels and ATen calls in run order, with the buffers each reads and writes."""
    steps = []
    for record in records:
        kernels = {k.name: k for k in record.kernels}
        for step in record.steps:
            if hasattr(step, "target"):
                reads = [a.name for a in _buffer_refs((step.args, step.kwargs))]
                steps.append({"graph": record.graph_id, "kind": "extern", "target": step.target, "reads": reads,
                              "writes": [o for o in step.outputs if o],
                              "fx_nodes": [o.fx_node for o in step.origins]})
            else:
                kernel = kernels[step.kernel]
                steps.append({"graph": record.graph_id, "kind": "kernel", "target": kernel.name,
                              "reads": list(kernel.inputs), "writes": list(kernel.outputs),
                              "aten_ops": sorted({o.aten_op for o in kernel.origins})})
    return steps


def _buffer_refs(tree) -> list:
    found = []
    torch.utils._pytree.tree_map(lambda a: found.append(a) if type(a).__name__ == "BufferRef" else None, tree)
    return found


def collective_order_of(fn, *args) -> list[str]:
    """Names of the collective nodes of fn's ATen graph (AOTAutograd, no compiler) in graph order."""
    from torch._dynamo.backends.common import aot_autograd
    names = []

    def keep_order(gm, example_inputs):
        names.extend(n.name for n in gm.graph.nodes if str(n.target).startswith(COLLECTIVE_NAMESPACE))
        return gm
    torch._dynamo.reset()
    torch.compile(fn, backend=aot_autograd(fw_compiler=keep_order))(*args)
    torch._dynamo.reset()
    return names


def tensor_parallel_step(rank: int, world: int) -> dict:
    """A row-parallel linear layer written with functional collectives: pointwise prologue, matmul,
    all_reduce, a second all_reduce of another pointwise result, then a pointwise+mean epilogue."""
    import torch.distributed._functional_collectives as funcol

    import fuse_all
    group = dist.group.WORLD

    def layer(x, w, b):
        h = torch.relu(x * 2 + 1)
        y = funcol.all_reduce(h @ w, "sum", group)
        shift = funcol.all_reduce(torch.sigmoid(b) * 3, "avg", group)
        return torch.tanh(y + shift) * 3 - y.mean(dim=1, keepdim=True)

    torch.manual_seed(rank)
    x, w, b = torch.randn(8, 16), torch.randn(16, 32), torch.randn(32)
    graph_order = collective_order_of(layer, x, w, b)
    fuse_all.reset()
    out = torch.compile(layer, backend="fuse_all")(x, w, b)
    records = fuse_all.compiled_graphs()
    return {"out": out, "eager": layer(x, w, b), "wide": layer(x.double(), w.double(), b.double()),
            "steps": program_steps(records), "graph_order": graph_order,
            "fallbacks": [r.fallback_reason for r in records if r.fallback_reason]}


def _snapshot(loss, module) -> dict:
    return {"loss": [loss.detach().clone()], "grads": [p.grad.detach().clone() for p in module.parameters()],
            "params": [p.detach().clone() for p in module.parameters()]}


def ddp_python_reducer(rank: int, world: int, steps: int) -> dict:
    """compile(DDP(nn.Sequential)) with optimize_ddp="python_reducer" and compiled autograd: DDP's gradient
    all-reduce (one functional all_reduce per parameter, from post-accumulate-grad hooks) is traced into the
    backward graph that fuse_all compiles."""
    import fuse_all
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))

    def train(module, dtype, compiled: bool):
        import contextlib
        model = DDP(module)
        # torch's switch for compiled autograd around backward() (torch._dynamo.config.compiled_autograd
        # only takes effect for a backward() called inside a compiled region)
        def backward_compiler():
            return (torch._dynamo.compiled_autograd._enable(torch.compile(backend="fuse_all"))
                    if compiled else contextlib.nullcontext())
        if compiled:
            model = torch.compile(model, backend="fuse_all")
        optimizer = torch.optim.SGD(module.parameters(), lr=0.05, momentum=0.9)
        states = []
        for step in range(steps):
            x, y = (t.to(dtype) for t in _regression_batch(rank, step))
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            with backward_compiler():
                loss.backward()
            states.append(_snapshot(loss, module))
            optimizer.step()
            states[-1]["params"] = [p.detach().clone() for p in module.parameters()]
        return states

    result = {}
    for dtype in (torch.float32, torch.float64):
        result[str(dtype)] = train(copy.deepcopy(base).to(dtype), dtype, compiled=False)
    torch._dynamo.config.optimize_ddp = "python_reducer"    # read when DDP is constructed
    fuse_all.reset()
    result["fuse_all"] = train(copy.deepcopy(base), torch.float32, compiled=True)
    records = fuse_all.compiled_graphs()
    result["steps"] = program_steps(records)
    result["kinds"] = [r.kind for r in records]
    result["fallbacks"] = [r.fallback_reason for r in records if r.fallback_reason]
    return result


def _regression_batch(rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(6, 16, generator=g), torch.randn(6, 8, generator=g)


def fsdp2_training(rank: int, world: int, steps: int) -> dict:
    """fully_shard on each Transformer block and the root, then torch.compile: uncompiled FSDP2 in float32
    and float64 against fuse_all, `steps` SGD steps from the same start."""
    from torch.distributed.fsdp import fully_shard

    import fuse_all
    torch.manual_seed(0)
    base = tiny_models.TinyTransformer()
    batch_of = tiny_models.transformer_batch

    def train(dtype, compiled: bool):
        module = copy.deepcopy(base).to(dtype)
        for block in module.blocks:
            fully_shard(block)
        fully_shard(module)
        model = torch.compile(module, backend="fuse_all") if compiled else module
        optimizer = torch.optim.SGD(module.parameters(), lr=0.05, momentum=0.9)
        states = []
        for step in range(steps):
            optimizer.zero_grad(set_to_none=True)
            loss = tiny_models.loss_of(model, batch_of(rank, step))
            loss.backward()
            grads = [p.grad.full_tensor().detach() for p in module.parameters()]   # shards -> whole tensors
            optimizer.step()
            states.append({"loss": [loss.detach().clone()], "grads": grads,
                           "params": [p.detach().full_tensor() for p in module.parameters()]})
        return states

    result = {str(dtype): train(dtype, compiled=False) for dtype in (torch.float32, torch.float64)}
    fuse_all.reset()
    result["fuse_all"] = train(torch.float32, compiled=True)
    records = fuse_all.compiled_graphs()
    result["steps"] = program_steps(records)
    result["graphs"] = len(records)
    result["fallbacks"] = [r.fallback_reason for r in records if r.fallback_reason]
    return result

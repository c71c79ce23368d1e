"""Collectives inside fuse_all graphs (CPU, gloo, 2 processes): functional collectives (`all_reduce`,
`wait_tensor`) run as ATen calls in the graph's order, no kernel is fused across one, and the compute
between them is fused as usual. Checked from `fuse_all.compiled_graphs()` records (`steps`: kernels and ATen
calls in run order). Plus FSDP2 (`fully_shard`) training under fuse_all.
"""
import pytest
import torch

import collective_ranks
import dist_testing
import fuse_all_model_testing as mt

pytestmark = pytest.mark.distributed
COLLECTIVE = collective_ranks.COLLECTIVE_NAMESPACE


def collectives(steps: list[dict]) -> list[dict]:
    return [s for s in steps if s["kind"] == "extern" and s["target"].startswith(COLLECTIVE)]


def assert_nothing_fused_across_collectives(steps: list[dict]) -> None:
    """Within each graph, whatever computes a collective's input runs before it and whatever reads its result
    runs after it: no kernel straddles a collective."""
    for position, step in enumerate(steps):
        if step not in collectives(steps):
            continue
        same_graph = [(i, s) for i, s in enumerate(steps) if s["graph"] == step["graph"]]
        for i, other in same_graph:
            if set(other["writes"]) & set(step["reads"]):
                assert i < position, f"{other['target']} writes {step['target']}'s input but runs after it"
            if set(other["reads"]) & set(step["writes"]):
                assert i > position, f"{other['target']} reads {step['target']}'s result but runs before it"


def kernel_ops(steps: list[dict]) -> list[list[str]]:
    return [s["aten_ops"] for s in steps if s["kind"] == "kernel"]


def test_functional_collectives_run_in_graph_order_between_fused_kernels():
    ranks = dist_testing.run_ranks(collective_ranks.tensor_parallel_step)
    for rank, result in enumerate(ranks):
        assert result["fallbacks"] == []
        mt.assert_as_close_to_fp64_as_eager({"out": result["out"]}, {"out": result["eager"]},
                                            {"out": result["wide"]}, what=f"rank {rank} output")
        steps = result["steps"]
        order = [name for s in collectives(steps) for name in s["fx_nodes"]]
        assert order == result["graph_order"], (order, result["graph_order"])
        assert [s["target"] for s in collectives(steps)] == [
            "_c10d_functional.all_reduce.default", "_c10d_functional.wait_tensor.default"] * 2
        assert_nothing_fused_across_collectives(steps)
        kernels = kernel_ops(steps)
        # relu(x * 2 + 1): one kernel before the first all_reduce; sigmoid(b) * 3: one kernel; the epilogue
        # tanh(y + shift) * 3 - mean(y): one reduction kernel with its pointwise ops fused
        assert len(kernels) == 3, kernels
        assert {"aten.mul.Tensor", "aten.add.Tensor", "aten.relu.default"} <= set(kernels[0])
        assert {"aten.sigmoid.default", "aten.mul.Tensor"} <= set(kernels[1])
        assert {"aten.tanh.default", "aten.mean.dim", "aten.sub.Tensor", "aten.add.Tensor"} <= set(kernels[2])
    torch.testing.assert_close(ranks[0]["out"], ranks[1]["out"])   # all-reduced: the same on every rank


def _judge_training(result: dict, steps: int, what: str) -> None:
    for step in range(steps):
        for part in ("loss", "grads", "params"):
            named = [{str(i): t for i, t in enumerate(run[step][part])}
                     for run in (result["fuse_all"], result["torch.float32"], result["torch.float64"])]
            mt.assert_as_close_to_fp64_as_eager(*named, what=f"{what} step {step} {part}")


def test_ddp_python_reducer_traces_gradient_all_reduce_into_the_backward_graph():
    """optimize_ddp="python_reducer" + compiled autograd: the backward graph fuse_all compiles holds one
    all_reduce/wait_tensor pair per parameter; training matches uncompiled DDP."""
    steps = 2
    ranks = dist_testing.run_ranks(collective_ranks.ddp_python_reducer, steps)
    for rank, result in enumerate(ranks):
        assert result["fallbacks"] == []
        _judge_training(result, steps, f"rank {rank}")
        found = collectives(result["steps"])
        targets = [s["target"].split(".")[1] for s in found]
        assert targets == ["all_reduce", "wait_tensor"] * 4, targets   # 2 Linear layers: weight and bias
        assert_nothing_fused_across_collectives(result["steps"])
        # the division of each gradient by the world size before its all_reduce is a fused kernel
        assert any("aten.div.Tensor" in ops for ops in kernel_ops(result["steps"]))
    for a, b in zip(ranks[0]["fuse_all"][-1]["params"], ranks[1]["fuse_all"][-1]["params"]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_fsdp2_training_matches_uncompiled_fsdp2():
    """fully_shard per block + root, compiled with fuse_all. In torch 2.14 FSDP2's hooks (parameter
    all-gather, gradient reduce-scatter) are Dynamo-disabled: they run eagerly between the compiled graphs.
    Any collective that does reach a graph must still run in order and unfused."""
    steps = 2
    ranks = dist_testing.run_ranks(collective_ranks.fsdp2_training, steps)
    for rank, result in enumerate(ranks):
        assert result["fallbacks"] == []
        assert result["graphs"] >= 2, result["graphs"]
        _judge_training(result, steps, f"rank {rank}")
        assert_nothing_fused_across_collectives(result["steps"])

"""DDP training under fuse_all on CPU (gloo, 2 processes), both wrapping orders:
`torch.compile(DDP(model), backend="fuse_all")` and `DDP(torch.compile(model, backend="fuse_all"))`; in both,
Dynamo's DDPOptimizer splits the graph at gradient-bucket boundaries and compiles each piece, and DDP's
reducer all-reduces outside the graphs. Several SGD steps from the same start as uncompiled DDP: every step's loss,
gradients (after DDP's all-reduce), parameters and buffers are judged against uncompiled DDP in float64,
relative to uncompiled float32 DDP's own error (fuse_all_model_testing.assert_as_close_to_fp64_as_eager).
"""
import pytest
import torch

import ddp_ranks
import dist_testing
import fuse_all_model_testing as mt

pytestmark = pytest.mark.distributed
STEPS = 3
# a few KB per gradient bucket, so Dynamo really splits these tiny models (3 graphs each)
BUCKET_BYTES = {"resnet": 4096, "transformer": 32768}


@pytest.mark.parametrize("order", ddp_ranks.ORDERS)
@pytest.mark.parametrize("model_name", ["resnet", "transformer"])
def test_ddp_training_matches_uncompiled_ddp(model_name, order):
    ranks = dist_testing.run_ranks(ddp_ranks.train_ddp, model_name, order, BUCKET_BYTES[model_name], STEPS)
    for rank, result in enumerate(ranks):
        assert result["fallbacks"] == [], f"rank {rank}: graphs ran in ATen"
        for step in range(STEPS):
            for part in ("loss", "grads", "params", "buffers"):
                named = [{str(i): t for i, t in enumerate(run[step][part])}
                         for run in (result["fuse_all"], result["torch.float32"], result["torch.float64"])]
                mt.assert_as_close_to_fp64_as_eager(*named, what=f"rank {rank} step {step} {part}")
    # DDP averaged the gradients: both ranks hold the same parameters although their batches differ
    assert not torch.equal(ranks[0]["fuse_all"][0]["loss"][0], ranks[1]["fuse_all"][0]["loss"][0])
    for a, b in zip(ranks[0]["fuse_all"][-1]["params"], ranks[1]["fuse_all"][-1]["params"]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    # Dynamo's bucket splits (DDPOptimizer, one graph per bucket group) in both orders: DDP's forward marks
    # itself active while the inner compiled module runs, so DDP(compile) is split the same way.
    # fuse_all compiles as many graphs as aot_eager in the same setup.
    for result in ranks:
        assert result["fuse_all_graphs"] == result["aot_eager_graphs"] > 1, result

"""Training through the fuse_all_cudagraphs backend with AOTAutograd's real forward/backward calls, on the
CPU FakeEngine with a shared pool's worst case modelled (a replay overwrites with NaN the outputs of every
graph captured after it into the same pool; see conftest.py): loss, gradients, parameters and BatchNorm
statistics match eager at every step, and after warm-up forward and backward graphs only replay."""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import training_loops as tl  # noqa: E402


def stats_of(made):
    return lambda: [(g.name.rsplit(" ", 1)[-1].rstrip("]"), g.stats) for g in made]


CASES = [("convnet", style) for style in tl.STYLES] + [
    ("transformer", style) for style in ("fresh_batches", "keep_losses", "two_forwards_one_backward")]


@pytest.mark.parametrize("model_name,style", CASES)
def test_training_loop_matches_eager_and_replays_after_warmup(fake_backend, model_name, style):
    optimizer = "adam" if style in ("fresh_batches", "grad_accumulation") else "sgd"
    dynamic = style == "dynamic_shapes"
    log = tl.train_side_by_side(
        model_name, style, optimizer,
        lambda fn: torch.compile(fn, backend="fuse_all_cudagraphs"),
        stats_of(fake_backend), device="cpu", steps=tl.warmup_steps(style) + 3, atol=1e-5, rtol=1e-4)
    tl.assert_graphs_replay_after_warmup(log, tl.warmup_steps(style))
    assert not dynamic or len({name for name, _ in stats_of(fake_backend)()}) >= 2


def test_the_same_loops_fail_without_graph_order_checks(fake_backend, monkeypatch):
    """The clobbering fake is strict enough to catch a wrong replay: with the pool's ordering check
    switched off, gradient accumulation reads a .grad that the second backward overwrote."""
    from fuse_all_cudagraphs.pool import GraphPool

    monkeypatch.setattr(GraphPool, "conflicts", lambda self, record: ([], []))
    with pytest.raises(AssertionError, match="NaN|Mismatch|not close"):
        tl.train_side_by_side("convnet", "grad_accumulation", "sgd",
                              lambda fn: torch.compile(fn, backend="fuse_all_cudagraphs"),
                              stats_of(fake_backend), device="cpu", steps=5)


def test_reset_retires_every_graph_of_the_pools(fake_backend):
    import fuse_all_cudagraphs.backend as backend_module

    tl.train_side_by_side("convnet", "same_batch", "sgd", lambda fn: torch.compile(fn, backend="fuse_all_cudagraphs"),
                          stats_of(fake_backend), device="cpu", steps=3)
    pools = {g.pool for g in fake_backend}
    assert len(pools) == 1 and next(iter(pools)).graph_names() != []
    backend_module.reset()
    assert all(pool.graph_names() == [] for pool in pools)
    assert all(state.graph is None for g in fake_backend for state in g._table.states.values())


def test_fuse_all_reduce_overhead_trains_on_the_fake_engine(monkeypatch, clobbering_engine):
    """The fuse_all backend's own wiring (host programs compiled by the C++ codegen, forward and backward
    in one pool per Dynamo graph, stats in compiled_graphs()) on the clobbering fake engine."""
    import dataclasses

    import fuse_all
    import fuse_all.backend as fuse_all_backend
    import fuse_all_cudagraphs
    from fuse_all_cudagraphs import GraphedCallable

    engine = clobbering_engine
    monkeypatch.setattr(fuse_all_cudagraphs, "wrap",
                        lambda fn, inputs, **options: GraphedCallable(fn, inputs, engine=engine, **options))
    as_cuda = fuse_all_backend._maybe_cudagraphs  # CPU graphs pass its device check as if on CUDA
    monkeypatch.setattr(fuse_all_backend, "_maybe_cudagraphs", lambda call, graph, opts, record: as_cuda(
        call, dataclasses.replace(graph, device="cuda:0"), opts, record))
    torch.compiler.reset()

    def stats():
        return [(g.kind, g.cudagraphs["stats"]) for g in fuse_all.compiled_graphs() if "stats" in g.cudagraphs]

    log = tl.train_side_by_side("convnet", "fresh_batches", "adam",
                                lambda fn: torch.compile(fn, backend="fuse_all", mode="reduce-overhead"),
                                stats, device="cpu", steps=tl.WARMUP_STEPS + 3, atol=1e-4, rtol=1e-4)
    tl.assert_graphs_replay_after_warmup(log)
    assert sorted(kind for kind, _ in stats()) == ["backward", "forward"]
    torch.compiler.reset()


def test_training_with_every_0_dim_tensor_playing_a_cpu_scalar(fake_backend, clobbering_engine):
    """The FakeEngine taking every 0-dim tensor (e.g. the loss's incoming gradient) for a CPU scalar: the
    graphs read them from device buffers, AOTAutograd's real calls still match eager and nothing runs
    plainly after warm-up. Their values happen to be constant here; test_host_scalars.py checks changing
    values. (Not the convnet: BatchNorm's num_batches_tracked, written by the forward, would play a
    written CPU scalar and rightly run plainly; on a GPU it is a CUDA tensor.)"""
    clobbering_engine.host_scalars = True
    log = tl.train_side_by_side("transformer", "fresh_batches", "adam",
                                lambda fn: torch.compile(fn, backend="fuse_all_cudagraphs"),
                                stats_of(fake_backend), device="cpu", steps=tl.WARMUP_STEPS + 3, atol=1e-5,
                                rtol=1e-4)
    tl.assert_graphs_replay_after_warmup(log)
    scalars = sum(len(state.graph.host_scalars) for g in fake_backend for state in g._table.states.values()
                  if state.graph is not None)
    assert scalars >= 1

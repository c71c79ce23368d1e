"""`fuse_all.reset()` (which `torch.compiler.reset()` calls) releases the CUDA graphs fuse_all captured."""
import torch

import fuse_all
from fuse_all import backend


def test_reset_releases_every_live_graphed_callable(graphed):
    x = torch.randn(3)
    g = graphed(lambda a: (a[0].sin(),), [x])
    g([x]), g([x])                                   # warm-up, then capture
    assert g.pool.graph_names() and g.stats["captures"] == 1
    backend._GRAPHED.add(g)                          # what _maybe_cudagraphs does for a CUDA graph
    fuse_all.reset()
    assert g.pool.graph_names() == [] and len(backend._GRAPHED) == 0
    out = [g([x]) for _ in range(2)][-1]
    assert g.stats["captures"] == 2 and torch.equal(out[0], x.sin())   # captured afresh, still correct

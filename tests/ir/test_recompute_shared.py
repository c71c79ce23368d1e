"""`FusionChoices.recompute_shared_pointwise`: which shared values are recomputed in their consumers."""
from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

import fuse_all_ir as ir
from fuse_all_ir.lowering import RECOMPUTE_MAX_OPS


class Recompute(ir.FusionChoices):
    recompute_shared_pointwise = True


def _lower(fn, inputs, choices):
    return ir.lower(make_fx(fn)(*inputs), inputs, "g", validate=True, choices=choices)


def _pointwise_buffers(compiled):
    return sorted(n.name for n in compiled.lowered.nodes.values() if n.kind == "pointwise")


def bn_backward_like(g, out, x, mean):
    m, c = torch.where(out <= 0, 0, g), x - mean
    return m.sum((0, 2)), (m * c).sum((0, 2)), m * 2 - c * (m * c).sum((0, 2), keepdim=True)


INPUTS = [torch.randn(4, 6, 5), torch.randn(4, 6, 5), torch.randn(4, 6, 5), torch.randn(1, 6, 1)]


def test_small_shared_values_are_recomputed_not_written():
    kept = _lower(bn_backward_like, INPUTS, ir.FusionChoices())
    recomputed = _lower(bn_backward_like, INPUTS, Recompute())
    # off: the masked gradient and the centred input are buffers (each written once, read back three times)
    assert len(_pointwise_buffers(kept)) == len(_pointwise_buffers(recomputed)) + 2
    assert len(recomputed.lowered.inlined) > len(kept.lowered.inlined)


def test_large_or_externally_read_shared_values_stay_buffers():
    def big(x):
        y = x
        for i in range(RECOMPUTE_MAX_OPS // 3):   # ~5 expression nodes each: over the limit, under the 64 of a chain
            y = (y * 1.01 + i).sin()
        return y.sum(0), y.sum(1)

    def feeds_matmul(x):
        s = x.relu() * 3
        return s @ s.t(), s.sum(0)
    for fn, x in ((big, torch.randn(8, 8)), (feeds_matmul, torch.randn(8, 8))):
        kept = _lower(fn, [x], ir.FusionChoices())
        recomputed = _lower(fn, [x], Recompute())
        assert _pointwise_buffers(kept) == _pointwise_buffers(recomputed), fn.__name__


def test_a_returned_value_that_a_consumer_broadcasts_is_read_not_recomputed():
    """BatchNorm's invstd in training: the graph returns it (squeezed) and the normalisation broadcasts it
    over every pixel; recomputed there it put a division and an rsqrt on each element (train_resnet50)."""
    def bn_train_like(x, var):
        invstd = torch.rsqrt(var / 25 + 1e-5)
        return x * invstd, invstd.squeeze()

    def same_size(x, var):            # a consumer of the value's own size: still recomputed
        invstd = torch.rsqrt(var / 25 + 1e-5)
        return x[:1] * invstd, invstd.squeeze()

    inputs = [torch.randn(8, 6, 1, 1), torch.rand(1, 6, 1, 1) + 0.5]
    broadcast = _lower(bn_train_like, inputs, Recompute())
    ops = [op for op, _ in broadcast.lowered.inlined]
    assert not any("rsqrt" in op for op in ops), ops
    kept_inline = _lower(same_size, inputs, Recompute())
    assert any("rsqrt" in op for op, _ in kept_inline.lowered.inlined)

"""lowerings_view.view_strides agrees with torch's `Tensor.view` (ATen's computeStride) on strided tensors:
the same strides where the view exists (any stride on a size-1 dim), None where ATen needs a copy."""
from __future__ import annotations

import random

import sympy
import torch

from fuse_all_ir.lowerings_view import view_strides


def _random_shape(numel: int, rng: random.Random) -> list[int]:
    shape, rest = [], numel
    for factor in (2, 3, 4, 5, 6):
        while rest % factor == 0 and rng.random() < 0.4:
            shape.append(factor)
            rest //= factor
    shape.append(rest)
    shape += [1] * rng.randrange(2)
    rng.shuffle(shape)
    return shape


def test_view_strides_match_torch_on_permuted_and_narrowed_tensors():
    rng = random.Random(0)
    exists = 0
    for _ in range(2000):
        t = torch.empty(2, 3, 4, 6, 5)
        if rng.random() < 0.5:
            t = t.permute(*rng.sample(range(5), 5))
        if rng.random() < 0.5:
            d = rng.randrange(5)
            t = t.narrow(d, rng.randrange(2), max(1, t.shape[d] - 1))
        shape = _random_shape(t.numel(), rng)
        try:
            expected = t.view(shape).stride()
        except RuntimeError:
            expected = None
        got = view_strides(t.shape, t.stride(), shape)
        if expected is None:
            assert got is None, (t.shape, t.stride(), shape, got)
            continue
        exists += 1
        assert got is not None and all(int(g) == e or n == 1 for g, e, n in zip(got, expected, shape)), (
            t.shape, t.stride(), shape, expected, got)
    assert 200 < exists < 1800     # both outcomes were exercised


def test_symbolic_sizes_are_not_viewed():
    s = sympy.Symbol("s0", positive=True, integer=True)
    assert view_strides((s, 4), (8, 1), (4, s)) is None

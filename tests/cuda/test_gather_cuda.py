"""Gathers as indirect loads in Triton kernels compiled for the GPU (marker `cuda`;
fuse_all_ir/lowerings_gather.py): BERT's embeddings + LayerNorm as one kernel, advanced indexing with
negative and broadcast indices on non-contiguous inputs, int64 positions past 2**31 elements, masked reads
for out-of-range indices (BERT on the GPU: test_random_cuda.py).

    source bench/gpu_env.sh && python -m pytest tests/cuda/test_gather_cuda.py -m cuda -q
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fuse_all
from fuse_all_optest import check, extern_targets

pytestmark = pytest.mark.cuda
DEVICE = "cuda"
GATHERS = {"aten.embedding.default", "aten.index.Tensor", "aten.index_select.default"}


def test_embeddings_and_layer_norm_are_one_kernel_on_the_gpu():
    words = torch.randn(30522, 768, device=DEVICE)
    positions, types = torch.randn(512, 768, device=DEVICE), torch.randn(2, 768, device=DEVICE)
    ids = torch.randint(0, 30522, (8, 128), device=DEVICE)
    pos = torch.arange(128, device=DEVICE)[None]
    tt = torch.randint(0, 2, (8, 128), device=DEVICE)

    def fn(words, positions, types, ids, pos, tt):
        e = F.embedding(ids, words) + F.embedding(pos, positions) + F.embedding(tt, types)
        return F.layer_norm(e, [768])
    check(fn, words, positions, types, ids, pos, tt, codegen="triton")
    assert extern_targets(GATHERS, backward=False) == []
    assert len(fuse_all.compiled_graphs()[-1].kernels) == 1


def test_advanced_indexing_of_strided_inputs_with_negative_indices():
    x = torch.randn(64, 48, 40, device=DEVICE).transpose(0, 2)
    rows = torch.randint(-40, 40, (7, 1), device=DEVICE)
    cols = torch.randint(-48, 48, (1, 5), device=DEVICE)
    check(lambda x, r, c: x[r, c] * 2, x, rows, cols, codegen="triton")
    check(lambda x, c: torch.index_select(x, 1, c.flatten().abs()), x, cols, codegen="triton")
    assert extern_targets(GATHERS, backward=False) == []


def test_a_gather_past_two_to_the_31_elements_uses_64_bit_positions():
    rows = (1 << 31) // 256 + 64
    x = torch.empty(rows, 256, device=DEVICE, dtype=torch.float16)
    x[-8:] = torch.randn(8, 256, device=DEVICE, dtype=torch.float16)
    ids = torch.arange(rows - 8, rows, device=DEVICE)
    got = torch.compile(lambda x, i: F.embedding(i, x).float() * 2, backend="fuse_all")(x, ids)
    torch.testing.assert_close(got, x[-8:].float() * 2)
    del x


def test_out_of_range_indices_give_zero_rows():
    w = torch.randn(10, 4, device=DEVICE)
    got = torch.compile(lambda w, i: F.embedding(i, w) + 1, backend="fuse_all")(w, torch.tensor([[0, 10, -1, 9]], device=DEVICE))
    torch.cuda.synchronize()
    expected = torch.stack([w[0] + 1, torch.ones(4, device=DEVICE), torch.ones(4, device=DEVICE), w[9] + 1])[None]
    assert torch.equal(got, expected)

"""Gathers as indirect loads (fuse_all_ir/lowerings_gather.py; Triton's `gather_in_kernel`): embedding,
advanced indexing (`x[idx]`, `x[:, i, j]`, negative and broadcast indices, non-adjacent index tensors) and
index_select, against eager on random inputs and indices, in every input layout, low precision, symbolic
sizes and with gradients; each fused with its neighbours (no ATen call left), while the C++ target keeps
them in ATen (eager's IndexError for a bad index)."""
import pytest
import torch
import torch.nn.functional as F

import fuse_all
from fuse_all_optest import BOTH, check, compile_fn, extern_targets, make

GATHERS = {"aten.embedding.default", "aten.index.Tensor", "aten.index_select.default"}


def checked(fn, *inputs, codegen, **kw):
    fuse_all.reset()
    check(fn, *inputs, codegen=codegen, **kw)
    if codegen == "triton":
        assert extern_targets(GATHERS, backward=False) == [], "a gather ran as an ATen call instead of in the kernel"


def indices(high, shape, dtype=torch.int64, negative=False):
    low = -high if negative else 0
    return torch.randint(low, high, shape, dtype=dtype)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("codegen", BOTH)
def test_embedding_sum_layer_norm_is_one_kernel(codegen, layout):
    """BERT's embeddings: three lookups, their sum and LayerNorm."""
    words, positions = make((40, 24), layout=layout), make((16, 24))
    types = make((2, 24))
    ids, pos, tt = indices(40, (3, 9)), indices(16, (1, 9)), indices(2, (3, 9), dtype=torch.int32)

    def fn(words, positions, types, ids, pos, tt):
        e = F.embedding(ids, words) + F.embedding(pos, positions) + F.embedding(tt, types)
        return F.layer_norm(e, [24])
    checked(fn, words, positions, types, ids, pos, tt, codegen=codegen)
    if codegen == "triton":
        graph = fuse_all.compiled_graphs()[0]
        assert len(graph.kernels) == 1 and graph.externs == [], (graph.kernels, graph.externs)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int32, torch.bool], ids=str)
@pytest.mark.parametrize("codegen", BOTH)
def test_embedding_of_every_dtype_and_a_computed_weight(codegen, dtype):
    weight = make((30, 8), dtype)
    ids = indices(30, (5, 4))
    checked(lambda w, i: F.embedding(i, w * 2 if dtype != torch.bool else ~w), weight, ids, codegen=codegen)


@pytest.mark.parametrize("codegen", BOTH)
def test_embedding_gradients_with_padding_idx(codegen):
    weight = make((25, 6), requires_grad=True)
    ids = indices(25, (4, 7))
    ids[0, :3] = 3
    checked(lambda w, i: torch.tanh(F.embedding(i, w, padding_idx=3)), weight, ids, codegen=codegen, grad=True)


@pytest.mark.parametrize("codegen", BOTH)
def test_advanced_indexing_wraps_negative_indices_and_broadcasts(codegen):
    x = make((12, 10, 5))
    rows = indices(12, (4, 1), negative=True)
    cols = indices(10, (1, 6), negative=True)
    checked(lambda x, r, c: x[r, c] * 3, x, rows, cols, codegen=codegen)
    checked(lambda x, c: x[:, c].sum(-1), x, cols, codegen=codegen)


@pytest.mark.parametrize("layout", ["contiguous", "permuted", "sliced", "expanded"])
@pytest.mark.parametrize("codegen", BOTH)
def test_non_adjacent_index_tensors_put_their_dims_first(codegen, layout):
    x = make((6, 7, 8, 9), layout=layout)
    a, b = indices(6, (3, 2), negative=True), indices(8, (2,))
    checked(lambda x, a, b: x[a, :, b] + 1, x, a, b, codegen=codegen)
    checked(lambda x, b: x[..., b, :].relu(), x, b, codegen=codegen)


@pytest.mark.parametrize("codegen", BOTH)
def test_index_select_of_each_dim_and_a_0d_index(codegen):
    x = make((7, 5, 6), layout="transposed")
    for dim in range(3):
        idx = indices(x.shape[dim], (9,))
        checked(lambda x, i: torch.index_select(x, dim, i) - 1, x, idx, codegen=codegen)
    checked(lambda x, i: torch.index_select(x, 1, i), x, torch.tensor(3), codegen=codegen)


@pytest.mark.parametrize("codegen", BOTH)
def test_bert_attention_mask_by_indexing(codegen):
    """transformers' mask: a padding mask read at [batch index, key index], broadcast to (B, 1, Q, K)."""
    mask = torch.rand(2, 11) > 0.3

    def fn(mask):
        batch = torch.arange(2)[:, None, None, None]
        keys = torch.arange(11)[None, None, None, :]
        allowed = mask[batch, keys] & (keys >= 0)
        return torch.where(allowed, 0.0, -1e9).expand(2, 1, 11, 11) + 0
    checked(fn, mask, codegen=codegen)


@pytest.mark.parametrize("codegen", BOTH)
def test_gathers_under_symbolic_sizes(codegen):
    def fn(w, i, x, j):
        return F.embedding(i, w).sum(-1), x[j] * 2
    for n in (5, 9):
        checked(fn, make((20, 3 + n)), indices(20, (n,)), make((n + 2, 4)), indices(n + 2, (n, 2), negative=True),
                codegen=codegen, dynamic=True)


def test_a_gather_from_a_buffer_computed_in_the_graph_reads_it_after_it_is_written():
    def fn(x, i):
        y = torch.exp(x) * 2            # a kernel's result, then read at computed rows
        return y[i] + y[:1]
    checked(fn, make((40, 33)), indices(40, (17,), negative=True), codegen="triton")


def test_out_of_range_indices_read_nothing_and_give_zero():
    """Eager raises (CUDA: a device-side assert); a kernel cannot, so it masks the read: never memory
    outside the source."""
    fuse_all.reset()
    w = torch.randn(10, 4)
    fn = compile_fn(lambda w, i: F.embedding(i, w) + 1, "triton")
    got = fn(w, torch.tensor([[0, 10, -1, 9]]))
    expected = torch.stack([w[0] + 1, torch.ones(4), torch.ones(4), w[9] + 1])[None]
    assert torch.equal(got, expected)


def test_the_cpp_target_keeps_gathers_in_aten_and_eagers_index_error():
    fuse_all.reset()
    fn = compile_fn(lambda w, i: F.embedding(i, w) + 1, "cpp")
    w = torch.randn(10, 4)
    assert torch.equal(fn(w, torch.tensor([1, 2])), w[[1, 2]] + 1)
    assert extern_targets(GATHERS, backward=False) == ["aten.embedding.default"]
    with pytest.raises(IndexError):
        fn(w, torch.tensor([1, 10]))


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.triton
def test_embedding_gradient_is_a_scatter_add_fused_with_its_producer(dynamic):
    """The weight's gradient adds every token's row into its index's row (many tokens share an index here),
    in the kernel computing the gradient; the padding row gets none. Judged against float64, relative to
    eager's own error: the adds' order differs from ATen's."""
    weight = make((12, 20), requires_grad=True)
    ids = indices(12, (6, 9))
    ids[:, :3] = 5                  # duplicates: atomic adds into one row
    ids[0, 3:5] = 2                 # the padding row

    def fn(w, i):
        return F.layer_norm(F.embedding(i, w, padding_idx=2) * 3, [20])
    checked(fn, weight, ids, codegen="triton", grad=True, grad_vs_float64=True, dynamic=dynamic)
    assert "aten.embedding_dense_backward.default" not in extern_targets(backward=True)


@pytest.mark.triton
def test_embedding_gradient_stays_in_aten_under_deterministic_algorithms_and_for_half():
    weight = make((12, 8), requires_grad=True)
    ids = indices(12, (4, 5))
    try:
        torch.use_deterministic_algorithms(True)
        checked(lambda w, i: F.embedding(i, w).tanh(), weight, ids, codegen="triton", grad=True)
    finally:
        torch.use_deterministic_algorithms(False)
    assert extern_targets(backward=True) == ["aten.embedding_dense_backward.default"]
    half = make((12, 8), torch.float16, requires_grad=True)
    checked(lambda w, i: F.embedding(i, w).tanh(), half, ids, codegen="triton", grad=True)
    assert extern_targets(backward=True) == ["aten.embedding_dense_backward.default"]

"""transformers BertModel(BertConfig()) (random weights, eval mode) compiled with fuse_all on CPU.

Inputs have padding (attention mask zeros) and both token types, so masking and the token-type embedding
really take part. Three compiles: 1x12 and 4x128 with the default attention (SDPA: one ATen call, nothing
to fuse inside it), and 1x12 with `attn_implementation="eager"`, whose matmul -> scale -> mask -> softmax
is ordinary ATen ops: that is where the attention fusion is checked (many models still run it that way).
"""
import pytest
import torch

import fuse_all_model_testing as mt

pytestmark = pytest.mark.slow


def _bert(batch: int, seq: int, valid: list[int], **config):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig(**config)).eval()
    mt.randomize_norms(model)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    mask = (torch.arange(seq)[None, :] < torch.tensor(valid)[:, None]).long()    # row i: valid[i] tokens
    types = (torch.arange(seq)[None, :] >= seq // 2).long().expand(batch, seq).contiguous()

    def forward(input_ids, attention_mask, token_type_ids):
        return model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
    run = mt.compile_and_run(forward, ids, mask, types)
    run.layers = model.config.num_hidden_layers
    return run


@pytest.fixture(scope="module")
def bert_1x12():
    return _bert(1, 12, [9])


@pytest.fixture(scope="module")
def bert_4x128():
    return _bert(4, 128, [128, 100, 64, 17])


@pytest.fixture(scope="module")
def bert_eager_attention_1x12():
    return _bert(1, 12, [9], attn_implementation="eager")


CASES = ["bert_1x12", "bert_4x128", "bert_eager_attention_1x12"]


@pytest.mark.parametrize("case", CASES)
def test_matches_eager(case, request):
    mt.check_matches_eager(request.getfixturevalue(case), case)


@pytest.mark.parametrize("case", CASES)
def test_compiled_by_fuse_all(case, request):
    mt.assert_compiled(request.getfixturevalue(case).records, {"inference"})


def _one_graph(run):
    assert len(run.records) == 1, f"expected one graph (no graph break), got {mt.describe(run.records)}"
    return run.records[0]


def test_linear_gelu_epilogue(bert_1x12):
    """The intermediate layer's GELU is one kernel reading the linear's (addmm) result, its only reader."""
    mt.require_fuse_all()
    record = _one_graph(bert_1x12)
    matmul_outputs = {e.outputs[0] for e in record.externs if "mm" in e.target}
    gelus = [k for k in record.kernels if any("erf" in op or "gelu" in op for op in mt.ops(k))]
    assert len(gelus) == bert_1x12.layers, f"{len(gelus)} kernels compute GELU, expected one per layer " \
                                           f"({bert_1x12.layers}):\n{mt.show(gelus)}"
    for k in gelus:
        produced = [b for b in mt.reads(k) if b in matmul_outputs]
        assert len(produced) == 1, f"{k.name} reads {len(produced)} matmul results:\n{mt.show([k])}"
        readers = mt.consumers(record, produced[0])
        assert readers == [k], f"the linear before {k.name} is read by other kernels too:\n{mt.show(readers)}"


# layer norm as the IR may see it: decomposed (mean, var, rsqrt, ...) or lowered whole (native_layer_norm)
LAYER_NORM = ("rsqrt", "layer_norm")


def _assert_one_kernel_per_use(record, code: str, uses: int, must_have: tuple[tuple[str, ...], ...]):
    """`code`'s ops are in exactly `uses` kernels, each with an op matching every group of `must_have`."""
    found = mt.kernels_from_code(record, code)
    assert len(found) == uses, (f"{len(found)} kernels compute `{code}`, expected {uses} (one per use):\n"
                                + mt.show(found))
    for k in found:
        missing = [group for group in must_have if not any(part in op for part in group for op in mt.ops(k))]
        assert not missing, f"{k.name} lacks {missing}: {sorted(mt.ops(k))}\n{mt.show([k])}"


def test_add_layer_norm_one_kernel(bert_1x12):
    """Residual add + LayerNorm (mean, variance, normalize, affine) is one kernel per use."""
    mt.require_fuse_all()
    record = _one_graph(bert_1x12)
    # BertSelfOutput and BertOutput: `self.LayerNorm(hidden_states + input_tensor)`, twice per layer
    _assert_one_kernel_per_use(record, "self.LayerNorm(hidden_states + input_tensor)", 2 * bert_1x12.layers,
                               (("aten.add",), LAYER_NORM))
    _assert_one_kernel_per_use(record, "self.LayerNorm(embeddings)", 1, (LAYER_NORM,))


def test_attention_scale_mask_softmax_one_kernel(bert_eager_attention_1x12):
    """Eager attention: `matmul(q, k^T) * scaling`, `+ attention_mask`, `softmax` are one kernel per layer."""
    mt.require_fuse_all()
    run = bert_eager_attention_1x12
    record = _one_graph(run)
    softmaxes = mt.kernels_from_code(record, "softmax")
    assert len(softmaxes) == run.layers, (f"{len(softmaxes)} kernels compute the attention softmax, expected "
                                          f"one per layer ({run.layers}):\n{mt.show(softmaxes)}")
    for k in softmaxes:
        lines = mt.codes(k)
        assert any("scaling" in c for c in lines) and any("attention_mask" in c for c in lines), \
            f"{k.name} does not include the scale and the mask:\n{mt.show([k])}"

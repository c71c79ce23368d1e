"""A real model through capture: BERT from transformers (random weights, no download)."""
import os

import pytest
import torch

from fuse_all_capture import SOURCE_LOC, capture

transformers = pytest.importorskip("transformers")


@pytest.mark.slow
def test_bert_training_capture_keeps_attention_fused_and_points_into_modeling_bert():
    # No dropout: ATen's CPU flash kernel has none, so with dropout SDPA itself picks its math path
    # (bmm + softmax); CUDA's flash kernel has dropout.
    config = transformers.BertConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=4,
                                     intermediate_size=128, vocab_size=100, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)
    model = transformers.BertModel(config)
    ids = torch.randint(0, 100, (2, 16))
    forward, backward = capture(model, ids, training=True)

    modeling_bert = os.path.abspath(transformers.models.bert.modeling_bert.__file__)
    # BertModel.forward is wrapped by transformers' decorators; the record must name the real forward.
    assert forward.function.file == modeling_bert and forward.function.qualname == "BertModel.forward"
    assert backward.function == forward.function

    assert "aten._scaled_dot_product_flash_attention_for_cpu.default" in forward.aten_ops()
    assert "aten._scaled_dot_product_flash_attention_for_cpu_backward.default" in backward.aten_ops()
    assert "aten.embedding_dense_backward.default" in backward.aten_ops()
    for graph in (forward, backward):
        assert not any(op.startswith("prims.") or "layer_norm" in op or "gelu" in op for op in graph.aten_ops())
        computed = [n for n in graph.graph.nodes if n.op == "call_function" and "getitem" not in str(n.target)]
        located = [n for n in computed if SOURCE_LOC in n.meta]
        assert len(located) >= 0.9 * len(computed)
        files = {n.meta[SOURCE_LOC]["file"] for n in located}
        assert modeling_bert in files
        assert all("site-packages/torch/" not in f for f in files)

"""Random ops made in Triton kernels on the GPU (marker `cuda`): dropout, rand/randn(_like), bernoulli as
pointwise code on Philox numbers from a per-call seeds buffer (fuse_all_ir/lowerings_random.py). The
numbers cannot equal eager's, so each test checks what eager promises (distribution within 6 standard
errors on 2**22 elements, dropout's scale, mask and gradient agreeing), plus what the GPU adds: compiled
kernels (not the interpreter), the seeds drawn inside a captured CUDA graph (mode="reduce-overhead": every
replay must draw fresh seeds from the CUDA generator, and `torch.manual_seed` must make replays
reproducible), and BERT (train_bert_8x128's model) with its dropout fused.

    source bench/gpu_env.sh && python -m pytest tests/cuda/test_random_cuda.py -m cuda -q
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import fuse_all
from fuse_all_optest import extern_targets

pytestmark = pytest.mark.cuda
DEVICE = "cuda"
N = 1 << 22
FLOATS = (torch.float32, torch.float16, torch.bfloat16)
ULP = {torch.float32: 0.0, torch.float16: 2 ** -10, torch.bfloat16: 2 ** -7}


def within(observed: float, expected: float, sigma: float, n: int = N, k: float = 6.0) -> bool:
    return abs(observed - expected) <= k * sigma / math.sqrt(n)


def compiled(fn, **options):
    return torch.compile(fn, backend="fuse_all", options={"codegen": "triton", "autotune": False, **options})


def cudagraph_stats() -> list[tuple[str, dict]]:
    return [(g.kind, g.cudagraphs["stats"]) for g in fuse_all.compiled_graphs() if "stats" in g.cudagraphs]


def positive(shape, dtype=torch.float32, requires_grad=False):
    """Values in [1, 2): a zero in a result is a dropped element."""
    return (torch.rand(shape, device=DEVICE) + 1).to(dtype).requires_grad_(requires_grad)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_dropout_keeps_one_minus_p_scaled_and_fused(dtype):
    p = 0.3
    x = positive((1024, N // 1024), dtype)
    out, mask = compiled(lambda x: torch.native_dropout(x * 2, p, True))(x)
    assert extern_targets(backward=False) == ["aten.randint.low"]
    graph = fuse_all.compiled_graphs()[-1]
    assert len(graph.kernels) == 1 and "fa.rand(" in graph.kernel_sources[graph.kernels[0].name]
    assert within(mask.float().mean().item(), 1 - p, math.sqrt(p * (1 - p)))
    assert not bool(out[~mask].any())
    scaled = (x.float() * 2 * (1.0 / (1 - p))).to(dtype)
    torch.testing.assert_close(out[mask], scaled[mask], atol=0, rtol=ULP[dtype])


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_dropout_gradient_is_zero_exactly_where_the_output_is(dtype):
    p = 0.6
    x = positive((2048, N // 2048), dtype, requires_grad=True)
    grad = positive(x.shape, dtype)
    out = compiled(lambda x: F.dropout(x.sin(), p, training=True))(x)
    out.backward(grad)
    dropped = out == 0
    assert within(dropped.float().mean().item(), p, math.sqrt(p * (1 - p)))
    assert torch.equal(x.grad == 0, dropped)
    expected = (grad.float() * x.detach().float().cos() / (1 - p)).to(dtype)
    torch.testing.assert_close(x.grad[~dropped], expected[~dropped], atol=0, rtol=4 * ULP[dtype] + 1e-6)


def test_rand_randn_bernoulli_distributions():
    fn = compiled(lambda x: (torch.rand_like(x), torch.randn_like(x), torch.bernoulli(x),
                             torch.empty_like(x).bernoulli_(0.25), torch.rand_like(x, dtype=torch.float16)))
    probabilities = torch.full((N,), 0.7, device=DEVICE)
    u, z, b, b25, h = (t.double() for t in fn(probabilities))
    assert extern_targets(backward=False) == ["aten.randint.low"]
    assert 0 <= u.min().item() and u.max().item() < 1 and 0 <= h.min().item() and h.max().item() < 1
    assert within(u.mean().item(), 0.5, math.sqrt(1 / 12)) and within(u.var().item(), 1 / 12, math.sqrt(1 / 180))
    assert within(h.mean().item(), 0.5, math.sqrt(1 / 12))
    assert within(z.mean().item(), 0.0, 1.0) and within(z.var().item(), 1.0, math.sqrt(2.0))
    assert within(b.mean().item(), 0.7, math.sqrt(0.21)) and within(b25.mean().item(), 0.25, math.sqrt(0.1875))
    # five ops, five seeds: no two streams alike
    assert abs(torch.corrcoef(torch.stack([u, z]))[0, 1].item()) < 0.01


def test_reduce_overhead_replays_draw_fresh_numbers_and_follow_manual_seed():
    """The seeds are drawn inside the captured graph: each replay must advance the CUDA generator (new
    numbers every call), and a manual_seed before replays must give the same numbers again."""
    p = 0.5
    fn = compiled(lambda x: (F.dropout(x, p, training=True), torch.rand_like(x)), cudagraphs=True)
    x = positive((1024, 1024))
    for _ in range(4):   # warm-up and capture
        fn(x)

    def three_calls():
        return [tuple(t.clone() for t in fn(x)) for _ in range(3)]
    torch.manual_seed(7)
    first = three_calls()
    torch.manual_seed(7)
    second = three_calls()
    stats = cudagraph_stats()
    assert stats and sum(s["replays"] for _, s in stats) >= 6 and all(s["plain_calls"] == 0 for _, s in stats), stats
    for a, b in zip(first, second):
        assert all(torch.equal(u, v) for u, v in zip(a, b))
    for a, b in zip(first, first[1:]):
        assert not torch.equal(a[0], b[0]) and not torch.equal(a[1], b[1])
    for out, uniform in first:
        assert within((out != 0).float().mean().item(), 1 - p, 0.5, n=x.numel())
        assert within(uniform.double().mean().item(), 0.5, math.sqrt(1 / 12), n=x.numel())


def test_reduce_overhead_training_steps_keep_mask_and_gradient_together():
    """Forward and backward CUDA graphs over fresh batches: every step's gradient is zero exactly where
    that step's output is, and w * scale elsewhere."""
    p = 0.25
    w = torch.randn(512, device=DEVICE)
    fn = compiled(lambda x: F.dropout(x * w, p, training=True), cudagraphs=True)
    masks = []
    for step in range(8):
        x = positive((256, 512), requires_grad=True)
        out = fn(x)
        out.backward(torch.ones_like(out))
        dropped = out.detach() == 0
        assert torch.equal(x.grad == 0, dropped), step
        expected = (w / (1 - p)).expand_as(x)
        torch.testing.assert_close(x.grad[~dropped], expected[~dropped])
        masks.append(dropped)
    assert not torch.equal(masks[-1], masks[-2])
    stats = cudagraph_stats()
    assert sum(s["replays"] for kind, s in stats if kind == "backward") >= 3, stats
    assert all(s["plain_calls"] == 0 for _, s in stats), stats


# ---- BERT (bench train_bert_8x128's model) -------------------------------------------------------------

def _bert(dropout: float | None = None, config_kwargs: dict | None = None, tokens=(8, 128)):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    kwargs = dict(config_kwargs or {})
    if dropout is not None:
        kwargs.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    config = transformers.BertConfig(**kwargs)
    model = transformers.BertModel(config).to(DEVICE)
    ids = torch.randint(0, config.vocab_size, tokens, device=DEVICE)
    mask = torch.ones(tokens, dtype=torch.long, device=DEVICE)
    types = torch.zeros(tokens, dtype=torch.long, device=DEVICE)
    # a fixed random direction: the loss and every gradient depend on each hidden value (mean(h ** 2), the
    # bench's loss, is ~1 whatever LayerNorm's input, and so are its gradients ~0)
    target = torch.randn(*tokens, config.hidden_size, device=DEVICE)
    return model, (ids, mask, types, target)


def _loss(model):
    def loss(ids, mask, types, target):
        return (model(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state * target).mean()
    return loss


@pytest.fixture
def full_float32():
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved


def _gradients(model):
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def _gradient_norm(model) -> float:
    return math.sqrt(sum(float(g.double().pow(2).sum()) for g in _gradients(model).values()))


def test_bert_eval_matches_eager(full_float32):
    model, inputs = _bert()
    model.eval()
    with torch.no_grad():
        want = _loss(model)(*inputs)
        got = compiled(_loss(model), cudagraphs=True)(*inputs)
        got = compiled(_loss(model), cudagraphs=True)(*inputs)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-3)


def test_bert_training_with_dropout_off_matches_eager(full_float32):
    model, inputs = _bert(dropout=0.0)
    model.train()
    want = _loss(model)(*inputs)
    want.backward()
    eager_grads = _gradients(model)
    model.zero_grad(set_to_none=True)
    got = compiled(_loss(model))(*inputs)
    got.backward()
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-3)
    grads = _gradients(model)
    assert grads.keys() == eager_grads.keys()
    # each gradient within 1% of its own size, or of a 10**-4 share of the whole (the key bias's gradient is
    # 0 in exact arithmetic: softmax ignores a shift of every score of a row)
    total = math.sqrt(sum(float(g.double().pow(2).sum()) for g in eager_grads.values()))
    for name, grad in grads.items():
        want = eager_grads[name].double()
        error = float((grad.double() - want).norm())
        assert error <= 1e-2 * float(want.norm()) + 1e-4 * total, (name, error, float(want.norm()))


def test_bert_training_with_dropout_fuses_it_under_reduce_overhead(full_float32):
    """Default BertConfig (dropout 0.1, as bench's train_bert_8x128): no ATen dropout left in the forward
    graphs; the gradient's norm stays within 20% of eager's (other random numbers, same distribution: over
    8 x 128 tokens the norm hardly depends on the draw) and every gradient is finite, step after step, with
    the graphs replaying."""
    model, inputs = _bert()
    model.train()
    loss = _loss(model)
    eager_norms = []
    for _ in range(3):
        model.zero_grad(set_to_none=True)
        loss(*inputs).backward()
        eager_norms.append(_gradient_norm(model))
    eager_norm = sum(eager_norms) / len(eager_norms)
    fn = compiled(loss, cudagraphs=True)
    for step in range(6):
        model.zero_grad(set_to_none=True)
        fn(*inputs).backward()
        assert all(bool(g.isfinite().all()) for g in _gradients(model).values()), step
        assert abs(_gradient_norm(model) - eager_norm) < 0.2 * eager_norm, (step, _gradient_norm(model), eager_norms)
    externs = extern_targets(backward=False)
    assert "aten.native_dropout.default" not in externs and "aten.randint.low" in externs, externs
    stats = cudagraph_stats()
    assert all(s["plain_calls"] == 0 for _, s in stats), stats
    assert sum(s["replays"] for kind, s in stats if kind == "forward") >= 3, stats

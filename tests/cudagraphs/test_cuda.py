"""The real engine on a GPU (skipped elsewhere; bench/gpu_cudagraphs_check.py covers more, with timings)."""
import pytest
import torch

from fuse_all_cudagraphs import GraphPool, wrap

pytestmark = pytest.mark.cuda   # skipped without CUDA (tests/conftest.py)


def test_replays_read_the_callers_memory_and_copy_nothing():
    x = torch.randn(4096, device="cuda")
    g = wrap(lambda a: (a[0].cos().sin(),), [x])
    for _ in range(4):
        x.normal_()
        assert torch.allclose(g([x])[0], x.cos().sin())
    assert (g.stats["captures"], g.stats["replays"], g.stats["input_copies"]) == (1, 3, 0)


def test_a_kept_result_survives_later_replays():
    x = torch.ones(128, device="cuda")
    g = wrap(lambda a: (a[0] + 1,), [x])
    kept = [g([x])[0] for _ in range(3)]
    x.fill_(10.0)
    later = [g([x])[0] for _ in range(3)]
    assert all(torch.equal(k, torch.full_like(x, 2.0)) for k in kept)
    assert all(torch.equal(t, torch.full_like(x, 11.0)) for t in later)


def test_a_host_sync_inside_the_function_falls_back_and_the_next_capture_works():
    x = torch.randn(64, device="cuda")
    g = wrap(lambda a: (a[0] * a[0].max().item(),), [x])
    for _ in range(3):
        assert torch.allclose(g([x])[0], x * x.max().item())
    assert g.decisions[-1].kind == "fallback" and g.decisions[-1].reason.startswith("capture failed")
    h = wrap(lambda a: (a[0] * 2,), [x])
    for _ in range(3):
        assert torch.equal(h([x])[0], x * 2)
    assert h.stats["captures"] == 1


def test_training_steps_through_the_backend_match_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 1)).cuda()
    reference = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 1)).cuda()
    reference.load_state_dict(model.state_dict())
    torch.compiler.reset()
    compiled = torch.compile(model, backend="fuse_all_cudagraphs")
    for _ in range(6):
        x = torch.randn(16, 64, device="cuda")
        model.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)
        compiled(x).square().mean().backward()
        reference(x).square().mean().backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            assert torch.allclose(p.grad, q.grad, atol=1e-5, rtol=1e-4)


def test_graphs_chained_through_one_pool_pass_outputs_without_copies():
    pool = GraphPool()
    x = torch.randn(256, device="cuda")
    f = wrap(lambda a: (a[0].exp(),), [x], pool=pool, name="f")
    h = wrap(lambda a: (a[0].log(),), [x], pool=pool, name="h")
    for _ in range(4):
        assert torch.allclose(h([f([x])[0]])[0], x, atol=1e-5)
    assert pool.graph_names() == ["f", "h"]
    # h reads f's output where f's graph writes it: chained graphs copy nothing
    assert (f.stats["captures"], h.stats["captures"], h.stats["input_copies"]) == (1, 1, 0)


def test_fuse_all_reset_releases_the_graphs_of_reduce_overhead_compiles():
    import fuse_all
    torch.compiler.reset()
    compiled = torch.compile(lambda t: t.sin() * 2, backend="fuse_all", mode="reduce-overhead")
    x = torch.randn(64, device="cuda")
    for _ in range(3):
        compiled(x)
    stats = fuse_all.compiled_graphs()[-1].cudagraphs["stats"]
    assert stats["captures"] == 1
    fuse_all.reset()                       # Dynamo keeps the compiled code; its graphs are gone
    for _ in range(3):
        torch.testing.assert_close(compiled(x), x.sin() * 2)
    assert stats["captures"] == 2
    torch.compiler.reset()


def test_a_cpu_scalar_input_is_read_from_a_device_buffer_with_each_calls_value():
    x = torch.randn(256, device="cuda")
    g = wrap(lambda a: (a[0] * a[1] + a[1],), [x, torch.tensor(1.0)])
    for step in range(6):
        s = torch.tensor(step + 0.5)  # a CPU scalar with a new value on every call
        assert torch.allclose(g([x, s])[0], x * (step + 0.5) + (step + 0.5))
    assert (g.stats["plain_calls"], g.stats["captures"], g.stats["replays"]) == (0, 1, 5)


def test_the_attention_backward_with_dropout_replays_with_each_forwards_seed():
    """Efficient attention made its philox seed/offset on the CPU (a forward run without a graph); the
    backward, captured while the kernel reads seed/offset through device pointers, must see each call's
    values: the same dropout mask as eager, so the same gradients."""
    q, k, v = (torch.randn(2, 4, 16, 8, device="cuda") for _ in range(3))
    p = 0.3

    def forward():
        return torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, p)

    def backward(a):
        grad, out, lse, seed, offset = list(a)
        grads = torch.ops.aten._scaled_dot_product_efficient_attention_backward(
            grad, q, k, v, None, out, lse, seed, offset, p, [True, True, True, False])
        return tuple(grads[:3])

    out, lse, seed, offset = forward()
    assert seed.device.type == offset.device.type == "cpu" and seed.dim() == 0
    g = wrap(backward, [torch.empty_like(out), out, lse, seed, offset])
    seeds = set()
    for _ in range(6):
        out, lse, seed, offset = forward()  # dropout advances the RNG: a new offset on every call
        seeds.add((seed.item(), offset.item()))
        grad = torch.randn_like(out)
        want = backward([grad, out, lse, seed, offset])
        got = g([grad, out, lse, seed, offset])
        for name, w, o in zip("qkv", want, got):
            torch.testing.assert_close(o, w, atol=1e-5, rtol=1e-4, msg=lambda m, n=name: f"grad {n}: {m}")
        del got
    assert len(seeds) == 6
    assert g.stats["plain_calls"] == 0 and g.stats["replays"] >= 4, (g.stats, g.decisions)

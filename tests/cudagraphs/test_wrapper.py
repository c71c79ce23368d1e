"""The whole wrap() state machine on the CPU fake engine (see conftest.py): numbers, decisions, counters."""
import pytest
import torch

from fuse_all_cudagraphs import GraphedCallable, GraphPool, LiveOutputError, wrap


def cos_sin(args):
    return (torch.sin(torch.cos(args[0])),)


def kinds(graphed_fn):
    return [d.kind for d in graphed_fn.decisions]


def test_warm_up_then_capture_then_replay_reading_inputs_in_place(graphed, engine):
    x = torch.randn(8)
    g = graphed(cos_sin, [x])
    for _ in range(3):
        (y,) = g([x])
        assert torch.allclose(y, torch.sin(torch.cos(x)))
        del y
    x.copy_(torch.randn(8))  # same address, new data: the graph reads it in place, no copy
    (y,) = g([x])
    assert torch.allclose(y, torch.sin(torch.cos(x)))
    assert g.stats == {"calls": 4, "plain_calls": 0, "warmups": 1, "captures": 1, "replays": 3, "input_copies": 0}
    assert kinds(g) == ["capture"] and "1 read in place, 0 copied" in g.decisions[0].reason
    assert g._boxed_call is True


def test_an_input_that_moves_is_copied_from_then_on_and_never_runs_plainly(graphed):
    x = torch.randn(8)
    g = graphed(cos_sin, [x])
    g([x]), g([x])
    keep = [torch.randn(8) for _ in range(6)]  # all alive: six distinct addresses
    for step, other in enumerate([keep[0], keep[0], keep[1], keep[2], x, keep[3], keep[4], keep[5]]):
        (y,) = g([other])
        assert torch.allclose(y, torch.sin(torch.cos(other))), step
        del y
    assert kinds(g) == ["capture", "recapture"]
    assert "input(s) [0] moved since capture (a new tensor on each call)" in g.decisions[1].reason
    assert g.stats["plain_calls"] == 0 and g.stats["captures"] == 2 and g.stats["input_copies"] == 8


def test_an_output_held_across_calls_is_never_overwritten(graphed, fallback_log):
    x = torch.ones(4)
    g = graphed(lambda a: (a[0] * 2,), [x], name="double")
    g([x])
    (first,) = g([x])  # captured: an alias of the graph's output memory
    x.fill_(5.0)
    (second,) = g([x])  # `first` is alive: re-captured (first keeps its memory), copies from now on
    assert torch.equal(first, torch.full((4,), 2.0)) and torch.equal(second, torch.full((4,), 10.0))
    x.fill_(7.0)
    (third,) = g([x])
    assert torch.equal(first, torch.full((4,), 2.0)) and torch.equal(second, torch.full((4,), 10.0))
    assert torch.equal(third, torch.full((4,), 14.0))
    del first, second, third
    outputs = [g([x])[0] for _ in range(3)]  # all kept: copies
    assert all(torch.equal(o, torch.full((4,), 14.0)) for o in outputs)
    assert len({o.data_ptr() for o in outputs}) == 3
    assert kinds(g) == ["capture", "recapture"] and g.stats["plain_calls"] == 0
    assert "output(s) [0] of 'double' from an earlier call are still referenced" in g.decisions[1].reason
    del outputs
    ptrs = [g([x])[0].data_ptr() for _ in range(8)]  # results dropped at once: aliases again, no copies
    assert len(set(ptrs[-3:])) == 1 and len(set(ptrs)) > 1
    assert "running plainly" not in fallback_log.text


def test_on_live_output_error_says_what_to_do(graphed):
    x = torch.ones(4)
    g = graphed(lambda a: (a[0] * 2,), [x], on_live_output="error")
    g([x])
    (held,) = g([x])
    with pytest.raises(LiveOutputError, match=r"del out.*out = out.clone\(\)"):
        g([x])
    assert torch.equal(held, torch.full((4,), 2.0))
    with pytest.raises(ValueError, match="on_live_output"):
        graphed(cos_sin, [x], on_live_output="sometimes")


def double_in_place(args):
    args[0].mul_(2)
    return (args[0] + 1,)


def test_a_written_input_is_written_once_per_call_in_place_or_copied_back(graphed):
    xs = [torch.full((4,), float(i)) for i in range(1, 8)]
    g = graphed(double_in_place, [xs[0]])
    for x in [xs[0], xs[1], xs[2], xs[3], xs[4], xs[5], xs[6]]:  # ends with a copied input
        before = x.clone()
        (y,) = g([x])
        assert torch.equal(x, before * 2) and torch.equal(y, before * 2 + 1)
        del y
    assert g.stats["input_copies"] >= 2 and g._mutated == {0}


def test_declared_mutations_are_copied_back_too(graphed):
    xs = [torch.full((2,), float(i)) for i in range(6)]
    g = graphed(double_in_place, [xs[0]], mutated_input_indices=[0], warmup_calls=0)
    for x in xs:
        before = x.clone()
        g([x])
        assert torch.equal(x, before * 2)


def test_outputs_that_view_an_input_view_the_callers_tensor_even_when_it_is_copied(graphed):
    keep = [torch.arange(6.0) + i for i in range(6)]
    g = graphed(lambda a: (a[0][1:], a[0] * 2), [keep[0]])
    for x in keep:
        view, doubled = g([x])
        assert view.data_ptr() == x[1:].data_ptr() and torch.equal(doubled, x * 2)
        del view, doubled
    assert g.stats["input_copies"] >= 1


def test_a_moved_parameter_is_recaptured(graphed):
    x, w = torch.randn(3), torch.randn(3)
    g = graphed(lambda a: (a[0] * a[1],), [x, w], static_input_indices=[1])
    g([x, w]), g([x, w])
    w2 = torch.randn(3)
    (y,) = g([x, w2])
    assert torch.allclose(y, x * w2) and "static input(s) [1] moved" in g.decisions[-1].reason


def test_each_signature_gets_a_graph_up_to_the_limit(graphed):
    seen = []
    g = graphed(cos_sin, [torch.randn(2)], max_graphs=2, on_fallback=seen.append)
    xs = [torch.randn(n) for n in (2, 3, 4)]
    for _ in range(3):
        for x in xs:
            (y,) = g([x])
            assert torch.allclose(y, torch.sin(torch.cos(x)))
            del y
    assert g.stats["captures"] == 2 and g.stats["plain_calls"] == 3
    assert seen == ["3 distinct input signatures (shapes, strides, int inputs) exceed the limit of 2 graphs"]


def test_int_inputs_get_a_graph_per_value(graphed):
    x = torch.randn(4)
    g = graphed(lambda a: (a[0] * a[1],), [x, 2])
    for k in (2, 3, 2, 3, 2, 3):
        (y,) = g([x, k])
        assert torch.allclose(y, x * k)
        del y
    assert g.stats["captures"] == 2


def test_a_failed_capture_falls_back_with_its_reason(graphed, engine):
    engine.fail_capture = "RuntimeError: operation not permitted when stream is capturing"
    x = torch.randn(4)
    g = graphed(cos_sin, [x])
    for _ in range(3):
        assert torch.allclose(g([x])[0], torch.sin(torch.cos(x)))
    assert [d.reason for d in g.decisions] == [
        "capture failed: RuntimeError: operation not permitted when stream is capturing; this input signature "
        "runs plainly from now on"]


def test_grad_mode_with_inputs_that_require_grad_runs_plainly(graphed):
    x = torch.randn(3, requires_grad=True)
    g = graphed(cos_sin, [x])
    (y,) = g([x])
    y.sum().backward()  # autograd still works: plain execution
    assert x.grad is not None and "requires grad while grad mode is on" in g.decisions[0].reason
    with torch.no_grad():
        g([x]), g([x])
    assert g.stats["captures"] == 1


def test_graphs_sharing_a_pool_never_overwrite_each_others_held_outputs(graphed):
    pool = GraphPool(handle="shared")
    x = torch.ones(3)
    f = graphed(lambda a: (a[0] + 1,), [x], pool=pool, name="f")
    h = graphed(lambda a: (a[0] * 3,), [x], pool=pool, name="h")
    f([x]), h([x]), f([x])
    (held,) = h([x])  # h was captured after f: f's temporaries may lie under `held`
    assert torch.equal(f([x])[0], x + 1)
    assert "output(s) [0] of 'h' (captured later into the same pool)" in f.decisions[-1].reason
    assert torch.equal(h([x])[0], x * 3) and kinds(h)[-1] == "recapture"
    assert torch.equal(held, x * 3)
    assert pool.graph_names() == ["h (retired)", "f", "h"]


def test_outputs_held_across_another_graphs_replay_stay_copies(clobbering_engine):
    """`.grad` kept across the next forward: the backward graph's outputs are alive when the forward graph
    (captured earlier, so its temporaries may lie under them) replays. The forward is re-captured once
    and the backward hands copies out from then on, also after the caller dropped several in a row."""
    pool = GraphPool(handle="train")
    x = torch.ones(3)
    fw = GraphedCallable(lambda a: (a[0] + 1,), [x], pool=pool, name="fw", engine=clobbering_engine)
    bw = GraphedCallable(lambda a: (a[0] * 3,), [x], pool=pool, name="bw", engine=clobbering_engine)
    grad = None
    for step in range(10):
        (y,) = fw([x])                # `grad` of the previous step is still alive here
        grad = bw([y])[0]             # ... and dropped only now, before this graph's next call
        assert torch.equal(grad, (x + 1) * 3), step
        del y
    assert kinds(fw) == ["capture", "recapture"] and kinds(bw) == ["capture", "recapture"]
    assert "output(s) [0] of 'bw' (captured later into the same pool)" in fw.decisions[1].reason
    assert fw.stats["plain_calls"] == bw.stats["plain_calls"] == 0 and fw.stats["replays"] == 9


def test_a_forward_recaptured_at_the_same_addresses_keeps_handing_out_saved_tensors_in_place(clobbering_engine):
    """A re-captured forward graph usually gets its outputs at the very addresses it had (the pool hands
    the freed blocks out again in the same order). The backward graph then reads the saved tensors where it
    read them before, but it was captured earlier than the new forward graph, so it is re-captured; the
    saved tensors are its inputs, not results the caller keeps: they must stay aliases, not become copies."""
    slab = torch.zeros(4)  # stands for the pool memory every capture of the forward graph writes its output to

    def forward(args):
        return (slab.copy_(args[0] * 2),)

    pool = GraphPool(handle="same-addresses")
    x = torch.ones(4)
    fw = GraphedCallable(forward, [x], pool=pool, name="fw", engine=clobbering_engine)
    bw = GraphedCallable(lambda a: (a[0] + 1,), [x], pool=pool, name="bw", engine=clobbering_engine)
    batches = [torch.full((4,), float(step)) for step in range(8)]  # a new tensor each step: fw re-captures
    for step, batch in enumerate(batches):
        (saved,) = fw([batch])
        (grad,) = bw([saved])
        assert torch.equal(grad, batch * 2 + 1), step
        if step >= 2:
            assert saved.data_ptr() == slab.data_ptr(), step  # an alias of the graph's memory, no copy
        del saved, grad
    assert kinds(bw) == ["capture", "recapture"]
    assert "inputs of this call are outputs of 'fw', captured later into the same pool" in bw.decisions[1].reason
    assert bw.stats["input_copies"] == 0 and bw.stats["plain_calls"] == fw.stats["plain_calls"] == 0


def test_an_input_written_by_a_graph_of_another_pool_is_read_in_place(graphed):
    """Graph breaks: each Dynamo graph has its own pool, the second reads the first one's outputs."""
    x = torch.ones(4)
    first = graphed(lambda a: (a[0] * 2,), [x], pool=GraphPool(), name="first")
    second = graphed(lambda a: (a[0] + 1,), [x], pool=GraphPool(), name="second")
    batches = [torch.full((4,), float(step)) for step in range(6)]  # all alive: a new address each step
    for step, batch in enumerate(batches):
        (mid,) = first([batch])  # re-captured at step 2 (its input moves): its output moves too
        (out,) = second([mid])
        assert torch.equal(out, batch * 2 + 1), step
        del mid, out
    assert second.stats["input_copies"] == 0 and second.stats["plain_calls"] == 0
    assert [d.reason for d in second.decisions][1:] == [
        "input(s) [0] moved and stayed at the new address; re-capturing to read them there"]


def test_pool_reset_retires_every_member_and_forgets_the_handle(graphed):
    pool = GraphPool()
    x = torch.ones(3)
    f = graphed(lambda a: (a[0] + 1,), [x], pool=pool, name="f")
    h = graphed(lambda a: (a[0] * 3,), [x], pool=pool, name="h")
    f([x]), h([x]), f([x])
    (held,) = h([x])
    handle = pool.handle
    pool.reset()
    assert pool.graph_names() == ["h (retired)"]  # what the caller still holds stays tracked
    assert pool.handle != handle
    del held
    f([x]), f([x])
    assert f.stats["captures"] == 2 and pool.graph_names() == ["f"]


def test_cpu_inputs_fall_back_at_wrap_time_with_the_real_engine(fallback_log):
    seen = []
    x = torch.randn(5)
    g = wrap(cos_sin, [x], name="cpu_fn", on_fallback=seen.append)
    for _ in range(3):
        assert torch.allclose(g([x])[0], torch.sin(torch.cos(x)))
    assert seen == ["input 0 is on cpu; CUDA graphs need cuda tensors"]
    assert fallback_log.text.count("cpu_fn: running plainly: input 0 is on cpu") == 1
    assert g.stats["plain_calls"] == 3


def test_force_fallback_never_captures():
    g = wrap(cos_sin, [torch.randn(2)], force_fallback="op aten.nonzero cannot be captured")
    g([torch.randn(2)])
    assert [(d.kind, d.reason) for d in g.decisions] == [("fallback", "op aten.nonzero cannot be captured")]


def test_the_fake_engine_replays_memory_not_objects(engine):
    """The fake must behave like a graph, or the tests above prove nothing."""
    x = torch.ones(3)
    handle, (out,) = engine.capture(lambda a: (a[0] * 2,), [x], None, 0)
    x.fill_(4.0)
    engine.replay(handle)
    assert torch.equal(out, torch.full((3,), 8.0))  # read x's memory, wrote into the output's memory


def test_a_call_with_another_number_of_inputs_runs_plainly(graphed):
    x = torch.randn(3)
    g = graphed(lambda a: (a[0] * len(a),), [x])
    assert torch.allclose(g([x, x])[0], x * 2)
    assert g.decisions[-1].reason == "called with 2 inputs, wrapped with 1"


def test_reset_forgets_graphs_and_signatures(graphed):
    x = torch.randn(3)
    g = graphed(cos_sin, [x])
    g([x]), g([x])
    g.reset()
    assert g.pool.graph_names() == []
    g([x]), g([x])
    assert (g.stats["warmups"], g.stats["captures"]) == (2, 2)

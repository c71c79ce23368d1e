"""Output classification, liveness counting and hand-out, on CPU tensors (no CUDA calls in outputs.py)."""
import pytest
import torch

from fuse_all_cudagraphs.outputs import OutputPlan, UnsupportedOutputs
from fuse_all_cudagraphs.pool import GraphPool


def make_plan(outputs, inputs, copied_out=None):
    plan = OutputPlan(outputs, inputs, set() if copied_out is None else copied_out)
    del outputs
    plan.measure_baselines()
    return plan


def test_owned_outputs_are_handed_out_as_aliases_and_tracked():
    x = torch.ones(4)
    plan = make_plan((x * 2, x + 1), [x])
    a, b = plan.hand_out([x])
    static = [kind[2] for kind in plan.kinds]
    assert a.data_ptr() == static[0].data_ptr() and a is not static[0]
    assert [g.outputs for g in plan.groups] == [[0], [1]]
    assert plan.live_groups() == plan.groups  # both results are held
    del a
    assert plan.live_groups() == [plan.groups[1]]
    view = b[1:]  # a view keeps the storage alive although b itself is gone
    del b
    assert plan.live_groups() == [plan.groups[1]]
    del view
    assert plan.live_groups() == []


def test_copied_out_outputs_are_copies_and_never_live():
    x = torch.ones(3)
    sink = {0}
    plan = make_plan((x * 2,), [x], sink)
    (y,) = plan.hand_out([x])
    assert y.data_ptr() != plan.kinds[0][2].data_ptr() and torch.equal(y, x * 2)
    assert plan.live_groups() == []


def test_copies_stop_once_the_caller_keeps_dropping_them():
    x = torch.ones(3)
    sink = {0}
    plan = make_plan((x * 2,), [x], sink)
    static_ptr = plan.kinds[0][2].data_ptr()
    kept = [plan.hand_out([x])[0] for _ in range(6)]  # all held: copies, however long
    assert static_ptr not in {k.data_ptr() for k in kept} and sink == {0}
    ptrs = [plan.hand_out([x])[0].data_ptr() for _ in range(6)]  # each dropped before the next
    assert ptrs[-1] == static_ptr and static_ptr not in ptrs[:4] and sink == set()


def test_mark_copied_out_remembers_indices_for_the_next_capture():
    x = torch.ones(3)
    sink: set[int] = set()
    y = x * 2
    plan = make_plan((y, y.view(3, 1), x + 1), [x], sink)
    assert [g.outputs for g in plan.groups] == [[0, 1], [2]]  # views of one storage: one group
    plan.groups[0].mark_copied_out()
    assert sink == {0, 1}


def test_outputs_that_view_an_input_are_rebuilt_on_the_callers_tensor():
    x = torch.arange(12.0).view(3, 4)
    plan = make_plan((x[1], x.t(), x.view(torch.int32)[0]), [x])
    assert [kind[0] for kind in plan.kinds] == ["view", "view", "view"] and plan.groups == []
    other = torch.arange(100.0, 112.0).view(3, 4)
    row, transposed, ints = plan.hand_out([other])
    assert torch.equal(row, other[1]) and row.data_ptr() == other[1].data_ptr()
    assert torch.equal(transposed, other.t()) and transposed.stride() == (1, 4)
    assert torch.equal(ints, other.view(torch.int32)[0])


def test_constants_and_container_types_are_preserved():
    x = torch.ones(2)
    assert isinstance(make_plan([x + 1, 5, None], [x]).hand_out([x]), list)
    out = make_plan((x + 1, 7), [x]).hand_out([x])
    assert isinstance(out, tuple) and out[1] == 7
    single = make_plan(x + 1, [x]).hand_out([x])
    assert isinstance(single, torch.Tensor)


def test_an_output_reaching_outside_its_input_is_refused():
    base = torch.arange(10.0)
    x = base[2:5]
    with pytest.raises(UnsupportedOutputs, match="outside that input"):
        OutputPlan((base[:4],), [x], set())


def test_release_leaves_only_the_callers_references():
    x = torch.ones(2)
    plan = make_plan((x + 1,), [x])
    (held,) = plan.hand_out([x])
    plan.release()
    assert plan.live_groups() == plan.groups
    del held
    assert plan.live_groups() == []


def test_pool_conflicts_follow_capture_order():
    x = torch.ones(2)
    pool = GraphPool(handle="test")
    first = pool.register("fw", make_plan((x + 1,), [x]))
    second = pool.register("bw", make_plan((x + 2,), [x]))
    (fw_out,) = first.outputs.hand_out([x])
    (bw_out,) = second.outputs.hand_out([x])
    own, later = pool.conflicts(first)
    assert own == first.outputs.groups and later == [("bw", second.outputs.groups[0])]
    own, later = pool.conflicts(second)  # fw was captured before bw: its outputs are safe from bw
    assert own == second.outputs.groups and later == []
    del fw_out
    pool.retire(second)
    assert pool.graph_names() == ["fw", "bw (retired)"]
    assert pool.conflicts(first) == ([], [("bw", second.outputs.groups[0])])  # still held by the caller
    del bw_out
    assert pool.conflicts(first) == ([], [])
    pool.retire(first)
    assert pool.graph_names() == []


def test_pool_of_a_handle_is_always_the_same_pool():
    assert GraphPool.of((7, 9)) is GraphPool.of((7, 9))
    own = GraphPool()
    assert GraphPool.of(own) is own and GraphPool.of(None) is not GraphPool.of(None)

"""The pure-Python rules: what may be captured, where inputs are read, what happens to held outputs."""
import logging

import torch

from fuse_all_cudagraphs.policy import (Action, AddressPlan, DecisionLog, InputMode, LiveGroup, SignatureTable,
                                        TensorMeta, describe, is_dense, resolve_live_outputs, unsafe_reason)

S, B, C = InputMode.STATIC, InputMode.BORROWED, InputMode.COPIED


def cuda_meta(index=0, requires_grad=False, strided=True):
    return TensorMeta("cuda", index, torch.float32, (2, 3), (3, 1), strided, requires_grad)


def test_describe_reads_metadata_and_passes_scalars_through():
    meta = describe(torch.zeros(2, 3).t())
    assert (meta.device_type, meta.shape, meta.stride, meta.dtype) == ("cpu", (3, 2), (1, 3), torch.float32)
    assert describe(7) == 7 and describe(None) is None


def test_unsafe_reason_accepts_cuda_tensors_and_scalars():
    assert unsafe_reason([cuda_meta(), 3, None, 1.5, True], grad_enabled=True) is None


def test_unsafe_reason_names_the_input_and_the_problem():
    cpu = TensorMeta("cpu", None, torch.float32, (2,), (1,))
    assert unsafe_reason([cuda_meta(), cpu], grad_enabled=False) == (
        "input 1 is on cpu; CUDA graphs need cuda tensors")
    assert "several cuda devices" in unsafe_reason([cuda_meta(0), cuda_meta(1)], grad_enabled=False)
    assert "input 0 requires grad" in unsafe_reason([cuda_meta(requires_grad=True)], grad_enabled=True)
    assert unsafe_reason([cuda_meta(requires_grad=True)], grad_enabled=False) is None
    assert "not a strided tensor" in unsafe_reason([cuda_meta(strided=False)], grad_enabled=False)
    assert "input 1 is a dict" in unsafe_reason([cuda_meta(), {}], grad_enabled=False)
    assert "no cuda tensor" in unsafe_reason([1, 2], grad_enabled=False)


def test_is_dense():
    assert is_dense((2, 3), (3, 1)) and is_dense((2, 3), (1, 2)) and is_dense((4, 1), (1, 7))
    assert not is_dense((2, 3), (0, 1))  # expanded: elements share memory
    assert not is_dense((2, 3), (6, 1))  # sliced: gaps


def plan(modes, ptrs, copyable=None):
    return AddressPlan(modes, ptrs, copyable or [m is not None for m in modes])


def test_inputs_at_their_captured_address_replay_without_copies():
    p = plan([S, B, None, C], [100, 200, None, 300])
    verdict = p.classify([100, 200, None, 300])
    assert verdict.action is Action.REPLAY and verdict.copies == ()
    verdict = p.classify([100, 200, None, 999])  # a copied input elsewhere: copied into the buffer
    assert verdict.action is Action.REPLAY and verdict.copies == (3,)


def test_a_moved_static_input_is_recaptured_never_copied():
    verdict = plan([S, B], [100, 200]).classify([111, 200])
    assert verdict.action is Action.RECAPTURE and verdict.new_modes == (S, B)
    assert "static input(s) [0] moved" in verdict.reason


def test_a_callers_input_that_moves_is_copied_from_then_on_without_a_plain_run():
    """The next batch, the backward graph's incoming gradient: a new tensor on every call is the rule."""
    verdict = plan([S, B], [100, 200]).classify([100, 222])
    assert verdict.action is Action.RECAPTURE and verdict.new_modes == (S, C)
    assert "input(s) [1] moved since capture (a new tensor on each call); re-capturing with static buffers" \
        in verdict.reason


def test_a_moving_input_that_cannot_be_copied_into_is_read_where_it_settles():
    p = plan([S, B], [100, 200], copyable=[True, False])  # e.g. expanded: copy_ into it is not allowed
    first = p.classify([100, 222])
    assert first.action is Action.PLAIN and "input(s) [1] moved since capture; running plainly until" in first.reason
    second = p.classify([100, 222])
    assert second.action is Action.RECAPTURE and second.new_modes == (S, B)
    assert "stayed at the new address" in second.reason
    p.classify([100, 301]), p.classify([100, 302])
    assert p.classify([100, 303]).new_modes == (S, B)  # never copied


def owned_plan(ptr=100):
    return AddressPlan([B], [ptr], [True], owned_at_capture=frozenset({0}))


def test_an_input_that_moves_twice_then_settles_is_read_in_place():
    """The backward graph's saved tensors: captured at A, one plain forward gives P, then the re-captured
    forward writes them at B for good. Copying them on every call from then on would be the wrong call."""
    p = owned_plan()
    assert p.classify([500]).action is Action.PLAIN
    assert p.classify([700]).action is Action.PLAIN
    verdict = p.classify([700])
    assert verdict.action is Action.RECAPTURE and verdict.new_modes == (B,)


def test_an_input_that_moved_into_graph_owned_memory_is_read_there_at_once():
    p = plan([B, B], [100, 200])
    assert p.classify([100, 300], graph_owned=frozenset({1})).new_modes == (B, B)


def test_an_input_captured_in_graph_owned_memory_is_not_copied_after_a_few_plain_producer_runs():
    p = owned_plan()
    for address in range(500, 500 + AddressPlan.MOVES_BEFORE_COPY_OWNED - 1):
        assert p.classify([address]).action is Action.PLAIN
    verdict = p.classify([900])  # the producer stopped replaying: copy after all
    assert verdict.new_modes == (C,) and "move on every call" in verdict.reason


def test_a_borrowed_input_that_comes_back_is_replayed_and_forgotten():
    p = owned_plan()
    assert p.classify([150]).action is Action.PLAIN
    assert p.classify([100]).action is Action.REPLAY and p.pending == {}
    assert p.classify([150]).action is Action.PLAIN  # a new first move, not "stayed"


def test_live_outputs_policy():
    own_new = LiveGroup("fw", (0,), was_copied_out=False)
    own_old = LiveGroup("fw", (1, 2), was_copied_out=True)
    later = LiveGroup("bw", (3,), was_copied_out=False)
    assert resolve_live_outputs("fw", [], [], "copy").action is Action.REPLAY
    held = resolve_live_outputs("fw", [own_new], [], "copy")  # never a plain run: the caller keeps the memory
    assert held.action is Action.RECAPTURE and "output(s) [0] of 'fw' from an earlier call" in held.reason
    assert "copied out from now on" in held.reason
    assert "long after" in resolve_live_outputs("fw", [own_old], [], "copy").reason
    verdict = resolve_live_outputs("fw", [], [later], "copy")
    assert verdict.action is Action.RECAPTURE and "'bw' (captured later into the same pool)" in verdict.reason
    consumed = LiveGroup("fw2", (4,), was_copied_out=False, consumed=True)  # this call's own inputs
    verdict = resolve_live_outputs("bw", [], [consumed], "error")  # nothing the caller did wrong: no error
    assert verdict.action is Action.RECAPTURE and "inputs of this call are outputs of 'fw2'" in verdict.reason
    assert "'bw' (captured later" in resolve_live_outputs("fw", [], [consumed, later], "copy").reason
    error = resolve_live_outputs("fw", [own_new], [], "error")
    assert error.action is Action.ERROR and "out.clone()" in error.reason and "on_live_output='copy'" in error.reason


def test_decision_log_records_each_reason_once_on_one_line(caplog):
    caplog.set_level(logging.INFO, logger="fuse_all.cudagraphs")
    seen = []
    decisions = DecisionLog("g", on_fallback=seen.append)
    assert decisions.record("fallback", "input 0 is\non cpu")
    assert not decisions.record("fallback", "input 0 is on cpu")
    assert decisions.record("capture", "graph 1 captured")
    assert seen == ["input 0 is on cpu"]
    assert [(d.kind, d.reason) for d in decisions.decisions] == [
        ("fallback", "input 0 is on cpu"), ("capture", "graph 1 captured")]
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["g: running plainly: input 0 is on cpu", "g: capture: graph 1 captured"]


def test_signature_table_limits():
    table = SignatureTable(max_graphs=2, max_recaptures=1)
    assert table.add("a", None).plain_reason is None
    assert table.add("cpu", "input 0 is on cpu").plain_reason == "input 0 is on cpu"  # costs no graph
    assert table.add("b", None).plain_reason is None
    third = table.add("c", None)
    assert "exceed the limit of 2 graphs" in third.plain_reason
    state = table.get("a")
    assert table.may_recapture(state) and state.plain_reason is None
    assert not table.may_recapture(state) and "re-capture limit (1)" in state.plain_reason

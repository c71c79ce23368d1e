"""The harness itself: `check` must catch a backend that is wrong in each way the suite relies on (values,
dtype, strides, aliasing, input mutations, gradients) and `check_ops` must name the culprit op. These use
deliberately broken eager-based backends, so they run the same whatever FUSE_ALL_TEST_BACKEND says."""
import pytest
import torch
import torch.utils._pytree as pytree
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

from fuse_all_optest import check, check_ops, clone_inputs, make, on_device


def _dynamo_backend(transform_out=None, clone_args=False, only_if=None):
    """A Dynamo-level backend that runs the graph eagerly, then damages the outputs (or the inputs)."""
    def backend(gm, example_inputs):
        active = only_if is None or any(n.target is only_if for n in gm.graph.nodes)

        def run(*args):
            if clone_args and active:
                args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            out = gm(*args)
            if transform_out and active:
                out = pytree.tree_map(lambda t: transform_out(t) if isinstance(t, torch.Tensor) else t, out)
            return out
        return run
    return backend


def test_correct_backend_passes():
    check(lambda x: (x.t().sin(), x[1:].add_(1)), make((4, 5), layout="sliced"), backend=_dynamo_backend())


def test_catches_wrong_values():
    bad = _dynamo_backend(lambda t: t + 1e-3 if t.is_floating_point() else t)
    with pytest.raises(AssertionError, match="Tensor-likes are not close"):
        check(torch.sin, make((4, 5)), backend=bad)


def test_catches_wrong_dtype():
    with pytest.raises(AssertionError, match="dtype"):
        check(torch.sin, make((4, 5)), backend=_dynamo_backend(lambda t: t.double()))


def test_catches_wrong_strides():
    with pytest.raises(AssertionError, match="strides"):
        check(lambda x: x + 1, make((2, 3, 4, 5), layout="channels_last"),
              backend=_dynamo_backend(lambda t: t.contiguous()))


def test_catches_lost_aliasing():
    with pytest.raises(AssertionError, match="aliasing"):
        check(lambda x: x.t(), make((4, 5)), backend=_dynamo_backend(lambda t: t.clone()))


def test_catches_lost_input_mutation():
    with pytest.raises(AssertionError, match="input storage"):
        check(lambda x: x.mul_(2).sum(), make((4, 5), layout="transposed"),
              backend=_dynamo_backend(clone_args=True))


def test_catches_wrong_gradients():
    def bad_bw(gm, example_inputs):
        def run(args):
            return [g * 1.01 if isinstance(g, torch.Tensor) else g for g in gm(*args)]
        run._boxed_call = True
        return run

    backend = aot_autograd(fw_compiler=lambda gm, ex: make_boxed_func(gm), bw_compiler=bad_bw)
    with pytest.raises(AssertionError, match="gradient"):
        check(lambda x: x.sin().sum(), make((4, 5), requires_grad=True), grad=True, backend=backend)


def test_catches_second_call_only_bug():
    """A backend that is right on the first call and wrong afterwards (e.g. baked-in values)."""
    def backend(gm, example_inputs):
        first = []

        def run(*args):
            out = gm(*args)
            if first:
                return pytree.tree_map(lambda t: t * 0 if isinstance(t, torch.Tensor) else t, out)
            first.append(1)
            return out
        return run

    with pytest.raises(AssertionError, match="second call"):
        check(torch.exp, make((4, 5)), backend=backend)


def test_check_ops_names_the_culprit():
    bad = _dynamo_backend(lambda t: t + 1, only_if=torch.cos)
    with pytest.raises(AssertionError) as info:
        check_ops({"good_sin": torch.sin, "bad_cos": torch.cos, "good_exp": torch.exp}, make((4, 5)), backend=bad)
    text = str(info.value)
    assert "bad_cos:" in text and "good_sin:" not in text and "good_exp:" not in text, text


@pytest.mark.parametrize("layout", ["channels_last", "sliced", "expanded", "transposed"])
def test_copies_to_the_reference_device_keep_the_layout(layout):
    """`reference_device` (eager on another device) relies on copies with the same strides, storage offset
    and aliasing; "meta" stands in for the other device here."""
    x = make((3, 4, 5, 6), layout=layout, requires_grad=True)
    (moved,) = clone_inputs([x], {}, device="meta")
    again = on_device({"x": x}, "meta")["x"]
    for y in (moved, again):
        assert y.device.type == "meta"
        assert (y.shape, y.stride(), y.storage_offset()) == (x.shape, x.stride(), x.storage_offset())
    assert moved.requires_grad
    a, b, c = clone_inputs([x, x[1:], x.clone()], {}, device="meta")

    def storage(t):   # meta storages have no addresses: compare the storage objects themselves
        return t.untyped_storage()._cdata
    assert storage(a) == storage(b) != storage(c)            # aliasing between inputs kept, and only that


def test_reference_device_with_float64_gradients():
    check(lambda x: x.sin().sum(0), make((4, 5), layout="transposed", requires_grad=True), grad=True,
          grad_vs_float64=True, reference_device="cpu", backend=_dynamo_backend())


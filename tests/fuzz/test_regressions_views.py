"""The fuzzer's regressions about outputs that are views (of inputs, of computed values, broadcast, under dynamic
shapes): eager returns them as views with its strides, so must the compiled graph. See test_regressions.py for
how each names the fuzz program it came from."""
import pytest
import torch

from fuse_all_optest import BOTH, assert_same, compile_fn, make
from regression_helpers import run_calls


@pytest.mark.parametrize("codegen", BOTH)
def test_view_of_an_offset_input_returned_under_dynamic_shapes(codegen):
    """Both codegens: a graph output that is a view of an input (here `narrow`) was returned as a fresh
    copy; under dynamic shapes AOTAutograd rebuilds an input's alias from the returned tensor's storage
    offset, so for an input with a storage offset the result read the wrong elements (got a[0:2], eager
    a[1:3]), silently. Views of inputs are now returned as views (lowering._lower_output); the output
    must also share the input's storage at eager's offset. Fuzz: seed 13 index 336 (both)."""
    def fn(a):
        return a.narrow(0, 1, a.shape[0] - 2), a + 1
    base = torch.arange(100)
    run_calls(fn, [[base[5:5 + n]] for n in (2, 4, 6)], codegen, dynamic=True)
    compiled = compile_fn(fn, codegen, dynamic=True)
    a = base[7:7 + 9]
    view, _ = compiled(a)
    assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    assert view.storage_offset() == fn(a)[0].storage_offset() == 8


@pytest.mark.parametrize("codegen", BOTH)
def test_a_view_of_a_stride_0_input_stays_a_view_under_dynamic_shapes(codegen):
    """`a.flatten(0, 2)` of an input with strides (0, 0, 0) and a storage offset: under dynamic shapes the
    view lowering cannot express the reshape, so the output was a copy with stride 1, and AOTAutograd, which
    regenerates an output aliasing an input from the returned strides and offset, read base[5:8] instead of
    base[5] three times. Fuzz: seed 46 index 782."""
    def fn(a):
        return a.flatten(0, 2), a + 1
    base = make((20,))
    compiled = compile_fn(fn, codegen, dynamic=True)
    for n, offset in ((3, 5), (4, 7)):
        a = torch.as_strided(base, (1, n, 1), (0, 0, 0), offset)
        got, want = compiled(a), fn(a)
        for g_, w_ in zip(got, want):
            torch.testing.assert_close(g_, w_, rtol=0, atol=0)
        assert got[0].stride() == want[0].stride() and got[0].data_ptr() == want[0].data_ptr()


BROADCAST_VIEW_OUTPUTS = {
    # fuzz seed 51 index 921: a slice of an expand
    "slice": (lambda a: (torch.hypot(a, a * 2).expand(-1, 3, -1)[:, 0:5:2],), [(16, 1, 64)]),
    # seed 51 index 3222: narrow of unsqueeze + expand
    "narrow": (lambda a: (torch.nn.functional.softplus(a).unsqueeze(1).expand(-1, 3, -1, -1)
                          .narrow(0, 1, a.shape[0] - 2),), [(7, 5, 7)]),
    # seed 45 index 1144: select of a transposed expand, the broadcast dim in the middle
    "select_mT": (lambda a, b: (torch.minimum(a, b).unsqueeze(1).expand(-1, 2, -1, -1, -1).mT.select(2, -1),),
                  [(7, 2, 16, 3), (7, 2, 16, 3)]),
    # seed 46 index 174: a piece of split (a getitem of a multi-output view) of an expanded pad
    "split": (lambda a: (torch.nn.functional.pad(a, [1, 0, 1, 2]).expand(-1, 2).split(3, 0)[0],), [(13, 0)]),
    # seed 88 index 2153: expand of a keepdim reduction (a buffer already; its size-1 dim's stride differs)
    "keepdim_reduction": (lambda a: (a.amin((0, 1), keepdim=True).amax(1, keepdim=True).unsqueeze(2)
                                     .expand(-1, -1, 3, -1),), [(11, 13, 2)]),
    # seed 108 index 129: a full step-1 slice traces as aten.alias, which the chain's second lowering (after
    # the walk) took for a copy: it saw the graph's last op, not itself
    "alias": (lambda a: (torch.stack([a, a * 2], 0)[:, 0::1].unsqueeze(2).expand(-1, -1, 2, -1, -1),),
              [(3, 4, 5)]),
    # the same: a slice in the chain took its length from the last op's traced shape (a later output of as
    # many dims): a (4, 7, 5) view out of the (4, 2, 5) value's bounds, the compiled call raised
    "slice_then_a_later_op": (lambda a, b: ((a * 2).expand(4, 6, 5)[:, 1:3], b + 1), [(1, 6, 5), (4, 7, 5)]),
    # seed 109 index 366: a stack of a permuted value traces as cat + view of a non-contiguous buffer, which
    # the view lowering kept as a view only for a contiguous source
    "stack_of_a_permuted_value": (lambda a: (torch.stack([a.permute(0, 3, 1, 2) * 2] * 2, 3).unsqueeze(1)
                                             .expand(-1, 2, -1, -1, -1, -1)[..., 1:], a.sum()), [(5, 5, 2, 31)]),
}


@pytest.mark.parametrize("codegen", BOTH)
@pytest.mark.parametrize("case", sorted(BROADCAST_VIEW_OUTPUTS))
def test_a_broadcast_view_of_a_computed_value_is_returned_as_a_view(codegen, case):
    """An output that is a chain of views with an expand in it over a computed value was written out
    element by element: a copy whose strides differ from eager's and the traced graph's in every dim, n
    times the memory, writable where eager's raises. The value is now a buffer and the output a stride-0
    view of it, as in eager."""
    fn, shapes = BROADCAST_VIEW_OUTPUTS[case]
    inputs = [torch.randn(s) for s in shapes]
    expected = fn(*inputs)
    assert 0 in expected[0].stride()
    actual = compile_fn(fn, codegen)(*inputs)
    assert_same(actual, expected, atol=1e-6, rtol=1e-6)       # strides included


@pytest.mark.parametrize("codegen", BOTH)
def test_a_broadcast_view_of_a_stacked_permuted_value_is_a_view_under_dynamic_shapes(codegen):
    """The stack_of_a_permuted_value case above with symbolic sizes, where the strides of the view of the
    non-contiguous cat cannot be decided from the sizes: they are the traced view's, as the cat is laid out
    as traced (without that, a copy with contiguous strides)."""
    fn, _ = BROADCAST_VIEW_OUTPUTS["stack_of_a_permuted_value"]
    calls = [[torch.randn(s)] for s in [(5, 5, 2, 31), (4, 3, 2, 7)]]
    for (a,) in calls:
        assert 0 in fn(a)[0].stride()
    run_calls(fn, calls, codegen, dynamic=True)


@pytest.mark.parametrize("codegen", BOTH)
@pytest.mark.parametrize("case", ["reshape", "slice", "transpose"])
def test_a_view_chain_of_an_expanded_input_stays_a_view_under_dynamic_shapes(codegen, case):
    """`a0.view(-1).reshape(2, -1)` of a fully expanded input under dynamic shapes: the view lowerings
    could not express the flatten of stride-0 dims of symbolic sizes, so the output was a contiguous copy,
    and AOTAutograd, which rebuilds an output that aliases an input from its strides on the input's
    storage, raised "setStorage ... out of bounds". The view is now taken from the traced metadata relative
    to the nearest source in the chain that is a view of the input. Fuzz: seed 101 index 630 (cpp)."""
    tail = {"reshape": lambda v: v.reshape(2, -1), "slice": lambda v: v[3::2],
            "transpose": lambda v: v.view(2, -1).t()}[case]

    def fn(a0):
        v0 = a0.view(-1)
        return tail(v0), v0.argmax(0, keepdim=True)

    def expanded(rows, cols):
        return torch.randint(-8, 8, (3,), dtype=torch.int32)[1:2].view(1, 1).expand(rows, cols)
    compiled = compile_fn(fn, codegen, dynamic=True)
    for shape in ((32, 34), (34, 32)):
        a0 = expanded(*shape)
        (view, _), (expected, _) = compiled(a0), fn(a0)
        assert torch.equal(view, expected) and view.stride() == expected.stride()
        assert view.untyped_storage().data_ptr() == a0.untyped_storage().data_ptr()


@pytest.mark.parametrize("codegen", BOTH)
def test_a_broadcast_view_output_also_squeezed_into_another_output_stays_a_view(codegen):
    """`v7 = v6.unsqueeze(3).expand(-1, -1, -1, 3, -1)` returned together with `v7.squeeze()`: the squeezed
    output is a stride-0 view as in eager, but v7 itself came back a contiguous copy (strides (2112, 192,
    192, 64, 1), eager (704, 64, 64, 0, 1)): the first output's view chain realized the shared base, and the
    second took the realized base for a view of something else. Fuzz: seed 122 index 664 (cpp)."""
    def fn(a, b):
        v7 = torch.hypot(a.sin(), b).unsqueeze(3).expand(-1, -1, -1, 3, -1)
        return v7.squeeze(), v7
    a, b = torch.rand(1, 11, 1, 64), torch.rand(64)
    got, want = compile_fn(fn, codegen)(a, b), fn(a, b)
    assert [t.stride() for t in got] == [t.stride() for t in want]



@pytest.mark.parametrize("codegen", BOTH)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dynamic", [False, True])
def test_the_gradient_through_a_view_of_an_expanded_input_is_the_views_own(codegen, dtype, dynamic):
    """`a0.narrow(3, 1, n)` of an input expanded along dim 3 (stride 0), beside another output that needs a
    training graph: the output went back as `as_strided` of the input, AOTAutograd rebuilt the alias by
    replaying that as_strided, and as_strided's gradient sums what the overlapping elements receive, so
    every element of a row got the row's sum where eager gives [0, g1, .., gn, 0]. The output is now the
    traced view ops replayed on the input (lowering_outputs.input_view_replay). Inductor returns
    as_strided too and gets the same wrong gradient. Fuzz: seed 130 index 2547 (C++), seed 127 index 337."""
    def fn(a0, a1):
        return torch.tanh(a1 * 2), a0.narrow(3, 1, a0.shape[3] - 2)
    compiled = compile_fn(fn, codegen, dynamic=dynamic)
    for shape in ((2, 1, 3, 5), (3, 1, 4, 7)):
        a0 = make((*shape[:3], 1)).to(dtype).expand(shape).detach().requires_grad_(True)
        a1 = make((shape[3],)).to(dtype).requires_grad_(True)
        got, want = compiled(a0, a1), fn(a0, a1)
        cotangents = [make(tuple(w.shape)).to(dtype) for w in want]
        for g, w in zip(torch.autograd.grad(got, [a0, a1], cotangents),
                        torch.autograd.grad(want, [a0, a1], cotangents)):
            assert_same(g, w)
        assert got[1].untyped_storage().data_ptr() == a0.untyped_storage().data_ptr()


@pytest.mark.parametrize("codegen", BOTH)
def test_checking_an_output_views_base_for_overlap_does_not_specialize_its_sizes(codegen):
    """The check that picks the view replay above read the base's sizes with `int()`, which on a SymInt adds a
    guard and makes the size a constant in the middle of the compile: the graph's saved values then kept the
    old symbols and an expanded input's gradient came back wrong (64.4 off on the first call; fuzz seed 131
    index 686, Triton). The check now reads the sizes' expressions."""
    def fn(a0, a1, a2):
        v0 = torch.hypot(a2, a0)
        return v0 * 0.5, v0, a1.select(0, 0)
    compiled = compile_fn(fn, codegen, dynamic=True)
    for shape in ((13, 8, 7), (12, 9, 4)):
        a0 = make(shape).to(torch.bfloat16).requires_grad_(True)
        a1 = (make((1, shape[1], 3 * shape[0])) > 0)[:, :, ::3].permute(2, 1, 0)
        a2 = make((*shape[:2], 1)).to(torch.bfloat16).expand(shape).detach().requires_grad_(True)
        got, want = compiled(a0, a1, a2), fn(a0, a1, a2)
        cotangents = [make(shape).to(torch.bfloat16) for _ in range(2)]
        assert_same(torch.autograd.grad(got[:2], [a0, a2], cotangents),
                    torch.autograd.grad(want[:2], [a0, a2], cotangents))

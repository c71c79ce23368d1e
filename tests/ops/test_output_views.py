"""Graph outputs that are views, held to eager *including where they point*: for every output that shares
storage with an input, the same storage, the same byte offset into it (`data_ptr`, `storage_offset`) and
the same strides; stride-0 outputs (expand) stay stride 0. Static, dynamic=True and automatic-dynamic
compiles; inputs with and without a storage offset, contiguous or strided; both codegens.

Under dynamic shapes AOTAutograd rebuilds an output that aliases an input from the returned tensor's own
storage offset, so an output returned as a copy read the wrong elements of an offset input (fuzz seed 13
index 336); tests/fuzz/test_regressions.py keeps the minimal case."""
import pytest
import torch

from fuse_all_optest import BOTH, assert_same, compile_fn

OUTPUT_VIEWS = {
    "narrow": lambda a: (a.narrow(0, 1, a.shape[0] - 2), a + 1),
    "slice_step": lambda a: (a[1::2], a * 2),
    "transpose_and_reduction": lambda a: (a.t(), a.sum()),
    "select": lambda a: (a[1], a - 1),
    "unsqueeze": lambda a: (a.unsqueeze(1),),
    "reshape": lambda a: (a.reshape(-1),),              # a view of contiguous inputs, a copy of strided ones
    "two_views_of_one_input": lambda a: (a[1:], a[:, 2:]),
    "unbind": lambda a: a.unbind(1),
    "diagonal": lambda a: (a[:, :a.shape[0] // 2].diagonal(), a.cos()),
    "input_itself": lambda a: (a, a.sin()),
    "expand_of_input": lambda a: (a[:, :1].expand(-1, 4),),
    "expand_of_reduction": lambda a: (a.sum(1, keepdim=True).expand(-1, 5),),
    "expand_of_pointwise": lambda a: ((a[0] + 1).expand(3, -1), a * 3),
    "expand_of_returned_pointwise": lambda a: (lambda y: (y, y.expand(2, -1, -1)))(a.exp()),
    "expand_of_unsqueezed_pointwise": lambda a: ((a[:, 0] * 2)[:, None].expand(-1, 3),),
    "view_of_intermediate": lambda a: (lambda y: (y, y[1:], y.t()))(a.sin()),
}


def _offset_input(n):
    return torch.randn(8 * 6 + 20)[7:7 + n * 6].view(n, 6)


def _contiguous_input(n):
    return torch.randn(n, 6)


def _strided_offset_input(n):
    return torch.randn(n + 2, 13)[1:1 + n, 1::2]


INPUTS = {"offset": _offset_input, "contiguous": _contiguous_input, "strided_offset": _strided_offset_input}
DYNAMIC = {"static": False, "dynamic": True, "automatic": None}


def _assert_points_like_eager(actual, expected, inputs, label):
    """Shares storage with the same input as eager, at the same place, with the same strides."""
    for j, x in enumerate(inputs):
        eager_shares = expected.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        compiled_shares = actual.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        assert compiled_shares == eager_shares, f"{label}: shares input {j}'s storage: {compiled_shares}, eager {eager_shares}"
        if eager_shares:
            assert actual.data_ptr() == expected.data_ptr(), f"{label}: points elsewhere in input {j}'s storage"
            assert actual.storage_offset() == expected.storage_offset(), label
            assert actual.stride() == expected.stride(), f"{label}: strides {actual.stride()}, eager {expected.stride()}"
    if 0 in expected.stride() and expected.numel() > 1:
        assert actual.stride() == expected.stride(), f"{label}: strides {actual.stride()}, eager {expected.stride()}"


def _assert_outputs_alias_like_eager(actual, expected, label):
    def sharing(outputs):
        ptrs = [t.untyped_storage().data_ptr() for t in outputs]
        return [[j for j in range(i) if ptrs[j] == p] for i, p in enumerate(ptrs)]
    assert sharing(actual) == sharing(expected), f"{label}: outputs sharing storage differ from eager"


@pytest.mark.parametrize("dynamic", list(DYNAMIC))
@pytest.mark.parametrize("layout", list(INPUTS))
@pytest.mark.parametrize("codegen", BOTH)
def test_returned_views_point_where_eager_points(codegen, layout, dynamic):
    for name, fn in OUTPUT_VIEWS.items():
        torch._dynamo.reset()
        compiled = compile_fn(fn, codegen, dynamic=DYNAMIC[dynamic])
        for n in (4, 6, 8):      # the third call reuses the automatic-dynamic graph
            a = INPUTS[layout](n)
            expected, actual = fn(a), compiled(a)
            label = f"{name} (n={n})"
            assert_same(actual, expected, what=label)
            for i, (got, want) in enumerate(zip(actual, expected)):
                _assert_points_like_eager(got, want, [a], f"{label} output {i}")
            _assert_outputs_alias_like_eager(actual, expected, label)


def test_expand_of_computed_value_is_not_materialised():
    """The (3, n) expand of a computed row is returned as eager returns it: a stride-0 view of an n-element
    buffer, not a (3, n) copy."""
    compiled = compile_fn(lambda x: (x + 1).expand(3, -1), "cpp", dynamic=True)
    out = compiled(torch.randn(7))
    assert out.stride() == (0, 1) and out.untyped_storage().nbytes() == 7 * 4

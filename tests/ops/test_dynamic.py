"""Dynamic shapes: one function called with three sizes. Dynamo compiles a static graph for the first size,
a dynamic one (SymInt sizes) for the second, and must NOT recompile for the third: the backend's kernels
have to take sizes as arguments. Every call is compared to eager."""
import pytest
import torch
import torch.nn.functional as F

from fuse_all_optest import CountingBackend, assert_same, clone_inputs, compile_options, make, params

SIZES = (5, 8, 33)  # not 0/1 (specialized), crossing vector widths


def pointwise_broadcast(x, y):
    return (x * y + 1).sigmoid() - y.exp()


def reduce_dynamic_dim(x, y):
    return x.sum(0), x.amax(1), torch.softmax(x, 0), x.var(0), x.argmax(0)


def softmax_last_dynamic(x, y):
    return torch.log_softmax(x.t(), -1), F.layer_norm(x.t(), (x.shape[0],))


def views_dynamic(x, y):
    n = x.shape[0]
    return x.view(n, 13).t() + 1, x.reshape(-1)[2:], x[1:-1, ::2] * 2, x.unsqueeze(0).expand(3, -1, -1).sum(0)


def cat_pad_dynamic(x, y):
    return torch.cat([x, x * 2], 0), F.pad(x, (1, 2, 0, 3)), torch.stack([x, -x], -1)


def layer_norm_batch(x, y):
    return F.gelu(F.layer_norm(x, (13,), y, None)), (x @ x.t()).relu()


def transposed_input(x, y):
    return x.exp() + x.sum(1, keepdim=True), torch.arange(x.shape[0]) * 2


def inplace_dynamic(x, y):
    x.mul_(2)
    x[:, 0] = x.shape[0]
    return x + y


CASES = {
    "pointwise_broadcast": (pointwise_broadcast, "contiguous"),
    "reduce_dynamic_dim": (reduce_dynamic_dim, "contiguous"),
    "softmax_last_dynamic": (softmax_last_dynamic, "contiguous"),
    "views_dynamic": (views_dynamic, "contiguous"),
    "cat_pad_dynamic": (cat_pad_dynamic, "contiguous"),
    "layer_norm_batch": (layer_norm_batch, "contiguous"),
    "transposed_input": (transposed_input, "transposed"),
    "inplace_dynamic": (inplace_dynamic, "sliced"),
}


def _call_and_compare(compiled, fn, x, y):
    e_memo, c_memo = {}, {}
    e_in, c_in = clone_inputs([x, y], e_memo), clone_inputs([x, y], c_memo)
    expected = fn(*e_in)
    actual = compiled(*c_in)
    assert_same(actual, expected, atol=1e-4, rtol=1e-5)
    for key in e_memo:
        assert_same(c_memo[key], e_memo[key], what="input storage after the call")


def _has_symbolic_sizes(example_inputs):
    def symbolic(v):
        if isinstance(v, torch.SymInt):
            return True
        if isinstance(v, torch.Tensor):
            return any(isinstance(s, torch.SymInt) for s in v.shape)
        return False
    return any(symbolic(v) for v in example_inputs)


@pytest.mark.parametrize("name,codegen", params(list(CASES), triton=lambda n: n in ("pointwise_broadcast",
                                                                                   "reduce_dynamic_dim")))
def test_three_sizes_two_compiles(name, codegen):
    fn, layout = CASES[name]
    torch._dynamo.reset()
    backend = CountingBackend(codegen)
    compiled = torch.compile(fn, backend=backend, fullgraph=True)
    for k, n in enumerate(SIZES):
        x = make((n, 13), torch.float32, layout)
        y = make((13,), torch.float32)
        _call_and_compare(compiled, fn, x, y)
        if k == 0:
            assert backend.frame_count == 1
        if k == 1:
            assert backend.frame_count == 2, f"expected a dynamic recompile on the 2nd size, got {backend.frame_count}"
            assert _has_symbolic_sizes(backend.example_inputs[1]), "the second graph is not dynamic"
    assert backend.frame_count == 2, (f"recompiled for the third size ({backend.frame_count} compiles for "
                                      f"sizes {SIZES}): kernels must take sizes as arguments")


@pytest.mark.parametrize("codegen", ["cpp", pytest.param("triton", marks=pytest.mark.triton)])
def test_dynamic_true_compiles_once(codegen):
    """dynamic=True from the start: one compile serves every size (here a reduction over the dynamic dim)."""
    torch._dynamo.reset()
    backend = CountingBackend(codegen)
    fn = reduce_dynamic_dim
    compiled = torch.compile(fn, backend=backend, fullgraph=True, dynamic=True)
    for n in SIZES:
        _call_and_compare(compiled, fn, make((n, 13)), make((13,)))
    assert backend.frame_count == 1
    assert _has_symbolic_sizes(backend.example_inputs[0])


def test_two_dynamic_dims():
    """Both dims change: reduction length and row count are both symbolic."""
    torch._dynamo.reset()
    backend = CountingBackend()

    def fn(x, y):
        return torch.softmax(x, -1) * x.sum(0), x.t().contiguous()

    compiled = torch.compile(fn, backend=backend, fullgraph=True)
    for n, m in ((5, 7), (8, 12), (33, 19)):
        _call_and_compare(compiled, fn, make((n, m)), make((1,)))
    assert backend.frame_count == 2


def test_counting_backend_forwards_codegen_option():
    """The counting wrapper passes the same options torch.compile would (the Triton spelling)."""
    b = CountingBackend("triton")
    opts = compile_options("triton")
    assert b.kwargs == ({"options": opts} if opts else {})
    if opts:
        assert opts["codegen"] == "triton"

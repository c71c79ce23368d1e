"""View lowerings against eager: outputs that are views of inputs (values, strides, and storage sharing
with the input, which AOTAutograd guarantees by regenerating output views of inputs), views of
intermediates, views followed by compute, reshape of non-contiguous tensors (a copy), multi-output views."""
import pytest
import torch

from fuse_all_optest import BOTH, check, check_ops, make, params

V4 = (4, 6, 5, 8)
LAYOUTS = ("contiguous", "transposed", "sliced", "expanded", "channels_last")

# views that are valid on any layout (reshape/flatten copy when they must)
VIEWS_OF_INPUT = {
    "identity": lambda x: x,
    "transpose": lambda x: x.transpose(0, 2),
    "permute": lambda x: x.permute(2, 0, 3, 1),
    "t_of_select": lambda x: x[0, 0].t(),
    "mT": lambda x: x.mT,
    "slice_step": lambda x: x[::2, 1:, ::3],
    "slice_negative": lambda x: x[-2:, :-1, -4:-1],
    "slice_step_negative_start": lambda x: x[:, -5::2],
    "select": lambda x: x[1],
    "select_negative": lambda x: x[:, -1],
    "select_last_dim": lambda x: x[..., 3],
    "narrow": lambda x: x.narrow(2, 1, 3),
    "unsqueeze": lambda x: x.unsqueeze(1),
    "unsqueeze_last": lambda x: x.unsqueeze(-1),
    "squeeze_dim": lambda x: x[:, :1].squeeze(1),
    "squeeze_all": lambda x: x[:1, :, :1].squeeze(),
    "expand": lambda x: x[:, :1].expand(-1, 5, -1, -1),
    "expand_new_dim": lambda x: x[0].expand(3, -1, -1, -1),
    "reshape": lambda x: x.reshape(24, 40),       # a view when possible, else a copy: eager decides
    "reshape_merge_last": lambda x: x.reshape(4, 6, 40),
    "flatten": lambda x: x.flatten(),
    "flatten_12": lambda x: x.flatten(1, 2),
    "unflatten": lambda x: x.unflatten(-1, (2, 4)),
    "movedim": lambda x: x.movedim(1, -1),
    "diagonal": lambda x: x[0].diagonal(0, 1, 2),
}


@pytest.mark.parametrize("layout,codegen", params(list(LAYOUTS), triton=lambda lay: lay in ("contiguous",
                                                                                              "transposed")))
def test_views_of_input(layout, codegen):
    """Returned directly: values and strides like eager, and the same storage sharing with the input."""
    check_ops(VIEWS_OF_INPUT, make(V4, torch.float32, layout), codegen=codegen)


MULTI = {
    "chunk": lambda x: x.chunk(3, dim=1),
    "chunk_uneven": lambda x: torch.chunk(x, 3, dim=-1),
    "split": lambda x: x.split(2, dim=0),
    "split_sizes": lambda x: torch.split(x, [1, 3, 2], dim=1),
    "unbind": lambda x: x.unbind(2),
    "tensor_split": lambda x: x.tensor_split(3, dim=3),
}


@pytest.mark.parametrize("layout,codegen", params(["contiguous", "channels_last", "sliced"], triton=(0,)))
def test_multi_output_views(layout, codegen):
    check_ops(MULTI, make(V4, torch.float32, layout), codegen=codegen)


VIEW_CONTIGUOUS = {
    "view": lambda x: x.view(24, 40),
    "view_infer": lambda x: x.view(-1, 8),
    "view_flat": lambda x: x.view(-1),
    "view_split_dim": lambda x: x.view(2, 2, 6, 5, 8),
    "as_strided": lambda x: x.as_strided((3, 4), (8, 2)),
    "as_strided_offset": lambda x: torch.as_strided(x, (2, 3, 2), (40, 1, 5), 7),
    "view_as": lambda x: x.view_as(torch.empty(6, 4, 40)),
    "view_dtype_bitcast": lambda x: x.view(torch.int32),
}


@pytest.mark.parametrize("codegen", BOTH)
def test_view_of_contiguous_input(codegen):
    check_ops(VIEW_CONTIGUOUS, make(V4, torch.float32, "contiguous"), codegen=codegen)


VIEWS_THEN_COMPUTE = {
    "transpose_add": lambda x, y: x.transpose(0, 2) + 1,
    "permute_mul_input": lambda x, y: x.permute(0, 2, 3, 1) * y.permute(0, 2, 3, 1),
    "slice_step_exp": lambda x, y: x[::2, 1:, ::3].exp(),
    "select_plus_slice": lambda x, y: x[1] + y[-1],
    "narrow_sum": lambda x, y: x.narrow(3, 2, 5).sum(-1),
    "reshape_sin": lambda x, y: x.reshape(24, 40).sin(),
    "flatten_mean": lambda x, y: x.flatten(1).mean(-1),
    "expand_add": lambda x, y: x[:, :1].expand(-1, 6, -1, -1) + y,
    "unsqueeze_broadcast": lambda x, y: x[:, 0].unsqueeze(1) * y,
    "squeeze_relu": lambda x, y: x[:, :1].squeeze(1).relu(),
    "t_matmul_free": lambda x, y: (x[0, 0].t() * 2).sum(0),
    "view_of_intermediate": lambda x, y: (x + y).transpose(1, 3),
    "slice_of_intermediate": lambda x, y: (x * 2)[1:, ::2],
    "permute_of_intermediate": lambda x, y: x.exp().permute(3, 1, 0, 2),
    "reshape_of_transposed_intermediate": lambda x, y: (x + 1).transpose(1, 2).reshape(4, 30, 8),
    "flatten_of_permuted_input": lambda x, y: x.permute(0, 2, 3, 1).flatten(2) * 3,
    "unflatten_compute": lambda x, y: x.flatten(2).unflatten(2, (8, 5)).cos(),
    "chained_views": lambda x, y: x.transpose(0, 1)[2:, ::2].unsqueeze(0).squeeze(0).reshape(-1) + 1,
    "select_of_expand": lambda x, y: x[:1].expand(3, -1, -1, -1)[2] - y[0],
    "as_strided_compute": lambda x, y: (x + 0).as_strided((5, 4), (1, 5)) * 2,
}


@pytest.mark.parametrize("layout,codegen", params(list(LAYOUTS), triton=lambda lay: lay in ("contiguous",
                                                                                              "channels_last")))
def test_views_then_compute(layout, codegen):
    check_ops(VIEWS_THEN_COMPUTE, make(V4, torch.float32, layout), make(V4, torch.float32, "contiguous"),
              codegen=codegen)


OUTPUT_VIEWS = {
    # outputs that alias each other (views of one intermediate) as well as the intermediate itself
    "base_and_views": lambda x: (lambda y: (y, y.view(-1), y[1:], y.transpose(0, 1)))(x.sin()),
    "chunks_of_intermediate": lambda x: (x * 3).chunk(2, dim=0),
    "unbind_of_intermediate": lambda x: (x + 1).unbind(1),
    "input_and_its_view": lambda x: (x, x[0], x.sum()),
}


@pytest.mark.parametrize("name,codegen", params(list(OUTPUT_VIEWS), triton=lambda n: n == "base_and_views"))
def test_output_aliasing(name, codegen):
    check(OUTPUT_VIEWS[name], make((4, 6, 5), torch.float32, "contiguous"), codegen=codegen)


def test_mutating_returned_view_writes_through_to_input():
    """A view of the input returned by the compiled function is a real view: writing to it changes the
    input like in eager (AOTAutograd regenerates output views of inputs)."""
    from fuse_all_optest import compile_fn

    def fn(x):
        return x.t()[1:]

    x_e = make((5, 7))
    x_c = x_e.clone()
    out_e = fn(x_e)
    out_c = compile_fn(fn)(x_c)
    assert out_c.untyped_storage().data_ptr() == x_c.untyped_storage().data_ptr()
    assert out_c.data_ptr() == out_e.data_ptr() - x_e.data_ptr() + x_c.data_ptr()
    out_e.mul_(-2)
    out_c.mul_(-2)
    torch.testing.assert_close(x_c, x_e)


INT_VIEWS = {
    "transpose": lambda i, b: i.transpose(0, 1) * 2,
    "slice": lambda i, b: i[:, ::2] + 1,
    "bool_select_not": lambda i, b: ~b[1],
    "bool_reshape": lambda i, b: b.reshape(-1, 8),
    "flip": lambda i, b: i.flip(0, 3) - 1,
    "int_flatten_sum": lambda i, b: i.flatten(1).sum(1),
}


@pytest.mark.parametrize("layout,codegen", params(["transposed", "sliced"], triton=()))
def test_int_bool_views(layout, codegen):
    check_ops(INT_VIEWS, make(V4, torch.int64, layout), make(V4, torch.bool, layout), codegen=codegen)


@pytest.mark.parametrize("codegen", BOTH)
def test_where_over_an_expanded_permuted_input_is_laid_out_as_traced(codegen):
    """The graph's `where`/`add` of an (11,) tensor and a (64, 1, 3, 11) one of strides (1, 1, 0, 64) are
    (1, 192, 64, 192) as Dynamo traces them (Python meta functions), (3, 1, 1, 192) in eager: the compiled
    graph follows the graph, as Inductor does, and `traced_layout` must judge by the same meta functions
    (fuzz seed 105 index 264)."""
    def fn(a0, a1):
        v0 = a1 > 0
        v1 = torch.where(v0, a1, a0)
        return torch.where(v0, v1, a1).clamp(-1.0, 1.0) * 0.5 + 1.0, v1, a0 + a1
    a0 = torch.rand(11, 1, 64, 1, dtype=torch.float64).permute(2, 3, 1, 0).expand(64, 1, 3, 11)
    check(fn, a0, torch.randn(11, dtype=torch.float64), codegen=codegen, traced_layout=True)

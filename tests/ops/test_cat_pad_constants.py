"""cat/stack (promotion, non-contiguous pieces, channels-last), constant_pad_nd / F.pad, and tensor
constants created inside the compiled function (full/zeros/ones/arange/linspace/eye/*_like/torch.tensor)."""
import pytest
import torch
import torch.nn.functional as F

from fuse_all_optest import BOTH, check_ops, make, params

CAT = {
    "cat_d1": lambda a, b, c, d: torch.cat([a, b], 1),
    "cat_promote_int_float": lambda a, b, c, d: torch.cat([a, c], dim=1),
    "cat_promote_f32_f64": lambda a, b, c, d: torch.cat([a, d], 1),
    "cat_d0_same": lambda a, b, c, d: torch.cat([a, a * 2], 0),
    "cat_dlast": lambda a, b, c, d: torch.cat([a, a.flip(-1)], -1),
    "cat_three_computed": lambda a, b, c, d: torch.cat([a.sin(), b * 2, c + 1], 1),
    "cat_transposed_pieces": lambda a, b, c, d: torch.cat([a.transpose(0, 2), b.transpose(0, 2)], 1),
    "cat_sliced_pieces": lambda a, b, c, d: torch.cat([a[:, ::2], b[:, 1:]], 1),
    "cat_one": lambda a, b, c, d: torch.cat([b]),
    "cat_with_empty": lambda a, b, c, d: torch.cat([a, a[:, :0]], 1),
    "cat_then_reduce": lambda a, b, c, d: torch.cat([a, b], 1).sum(1),
    "stack_d0": lambda a, b, c, d: torch.stack([a, a + 1]),
    "stack_d1_promote": lambda a, b, c, d: torch.stack([a[:, :2], c], 1),
    "stack_dlast": lambda a, b, c, d: torch.stack([a, a.exp(), -a], -1),
    "hstack": lambda a, b, c, d: torch.hstack([a, b]),
    "vstack": lambda a, b, c, d: torch.vstack([a, a]),
}


@pytest.mark.parametrize("layout,codegen", params(["contiguous", "transposed", "sliced"], triton=(0,)))
def test_cat_stack(layout, codegen):
    a = make((4, 6, 5), torch.float32, layout)
    b = make((4, 3, 5), torch.float32, "contiguous" if layout == "sliced" else "sliced")
    c = make((4, 2, 5), torch.int32, layout)
    d = make((4, 1, 5), torch.float64)
    check_ops(CAT, a, b, c, d, codegen=codegen)


CAT4D = {
    "cat_channels": lambda x, y: torch.cat([x, y], 1),
    "cat_batch": lambda x, y: torch.cat([x, x], 0),
    "cat_width": lambda x, y: torch.cat([x, x.relu()], 3),
    "cat_mixed_formats": lambda x, y: torch.cat([x, y.contiguous()], 1),
    "stack": lambda x, y: torch.stack([x, x], 2),
}


@pytest.mark.parametrize("codegen", BOTH)
def test_cat_channels_last(codegen):
    """Eager keeps channels-last when the pieces are channels-last: the output strides are observable."""
    check_ops(CAT4D, make((2, 3, 5, 7), layout="channels_last"), make((2, 4, 5, 7), layout="channels_last"),
              codegen=codegen)


PAD = {
    "pad_last": lambda x, i, b: F.pad(x, (1, 2)),
    "pad_last2_value": lambda x, i, b: F.pad(x, (1, 1, 2, 0), value=-1.5),
    "pad_negative_crop": lambda x, i, b: F.pad(x, (-1, 2, 0, -2)),
    "pad_all_dims": lambda x, i, b: F.pad(x, (1, 0, 0, 1, 2, 2, 1, 1), value=3.0),
    "constant_pad_nd": lambda x, i, b: torch.constant_pad_nd(x, (2, 1), 0.5),
    "pad_int": lambda x, i, b: F.pad(i, (1, 1), value=7),
    "pad_bool": lambda x, i, b: F.pad(b, (0, 2), value=True),
    "pad_then_compute": lambda x, i, b: F.pad(x.exp(), (1, 1, 1, 1)).sum(-1),
    "pad_reflect": lambda x, i, b: F.pad(x, (2, 1, 1, 2), mode="reflect"),
    "pad_replicate": lambda x, i, b: F.pad(x, (1, 3, 2, 0), mode="replicate"),
    "pad_circular": lambda x, i, b: F.pad(x, (1, 2, 2, 1), mode="circular"),
}


@pytest.mark.parametrize("layout,codegen", params(["contiguous", "channels_last", "transposed"], triton=(0,)))
def test_pad(layout, codegen):
    check_ops(PAD, make((2, 3, 5, 7), torch.float32, layout), make((2, 3, 5, 7), torch.int64, layout),
              make((2, 3, 5, 7), torch.bool, layout), codegen=codegen)


CONSTANTS = {
    "full": lambda x: torch.full((3, 4), 2.5),
    "full_int": lambda x: torch.full((2, 3), 7, dtype=torch.int32),
    "full_bool": lambda x: torch.full((2, 2), True),
    "zeros": lambda x: torch.zeros(5, dtype=torch.int64),
    "ones": lambda x: torch.ones(2, 3, dtype=torch.float64),
    "zeros_like": lambda x: torch.zeros_like(x) + x,
    "ones_like": lambda x: torch.ones_like(x),
    "full_like_int": lambda x: torch.full_like(x, 7, dtype=torch.int32),
    "empty_like_fill": lambda x: torch.empty_like(x).fill_(3.0),
    "arange": lambda x: torch.arange(10),
    "arange_start_step": lambda x: torch.arange(2, 20, 3),
    "arange_float": lambda x: torch.arange(0, 1, 0.1),
    "arange_neg_step": lambda x: torch.arange(5, -5, -1.5),
    "arange_dtype": lambda x: torch.arange(6, dtype=torch.float32) * 0.5,
    "arange_broadcast": lambda x: torch.arange(x.shape[-1]) + x,
    "linspace": lambda x: torch.linspace(0, 1, 7),
    "linspace_neg": lambda x: torch.linspace(-5, 5, 11, dtype=torch.float64),
    "linspace_int": lambda x: torch.linspace(0, 10, 4, dtype=torch.int64),
    "eye": lambda x: torch.eye(4),
    "eye_rect": lambda x: torch.eye(3, 5, dtype=torch.int64),
    "tensor_vec_times_input": lambda x: torch.tensor([1.0, -2.0, 3.0, 0.5, 4.0]) * x,
    "tensor_0d": lambda x: x + torch.tensor(3),
    "tensor_int_matrix": lambda x: torch.tensor([[1, 2], [3, 4]], dtype=torch.int32) * 2,
    "scalar_tensor": lambda x: torch.scalar_tensor(1.5) + x.sum(),
    "tril_of_ones": lambda x: torch.ones(4, 4).tril(),
}


@pytest.mark.parametrize("codegen", BOTH)
def test_constants_in_graph(codegen):
    check_ops(CONSTANTS, make((3, 5), torch.float32, "transposed"), codegen=codegen)

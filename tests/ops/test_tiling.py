"""Tiled kernels (fuse_all_ir.tiling) against eager on both codegens: pointwise kernels whose loads and
stores disagree on the contiguous dim (transposes, permutes, channels-last <-> contiguous copies, sliced and
broadcast operands, odd sizes, dynamic shapes) and reductions along a strided dim (column sums, norms over
channels-last tensors). Each case also checks that the kernel really got the plan it tests."""
import pytest
import torch
import torch.nn.functional as F

import fuse_all
from fuse_all_optest import BOTH, check, make

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _plans(fn, inputs, codegen, dynamic=None) -> list[str]:
    """The tile plans of every kernel fuse_all compiles for `fn` (and checks the result against eager)."""
    fuse_all.reset()
    check(fn, *inputs, codegen=codegen, dynamic=dynamic)
    plans = []
    for graph in fuse_all.compiled_graphs():
        assert graph.fallback_reason is None, graph.fallback_reason
        plans += [k.tiling.kind if k.tiling is not None else "none" for k in graph.kernels]
    return plans


TRANSPOSED = {
    "t_add": (lambda x, y: x.t() + y, lambda: (make((37, 1029)), make((1029, 37)))),
    "t_add_square": (lambda x, y: x.t() + y, lambda: (make((64, 64)), make((64, 64)))),
    # a stride of 256 elements: the C++ tile is 64 x 128 (full and partial blocks)
    "t_add_aliasing_stride": (lambda x, y: x.t() - y, lambda: (make((300, 256)), make((256, 300)))),
    "batched_transpose": (lambda x, y: x.transpose(1, 2) * y, lambda: (make((3, 70, 40)), make((3, 40, 70)))),
    "permute_3d": (lambda x: x.permute(2, 0, 1).contiguous() * 2, lambda: (make((19, 33, 40)),)),
    "nchw_to_nhwc": (lambda x: x.permute(0, 2, 3, 1).contiguous(), lambda: (make((2, 24, 5, 7)),)),
    "channels_last_to_contiguous": (lambda x: x.contiguous() + 1,
                                    lambda: (make((2, 20, 6, 5)).to(memory_format=torch.channels_last),)),
    "contiguous_to_channels_last": (lambda x: (x * 3).to(memory_format=torch.channels_last),
                                    lambda: (make((3, 17, 9, 4)),)),
    "sliced_transposed": (lambda x, y: x[::2, 1:].t() + y, lambda: (make((80, 41)), make((40, 40)))),
    "broadcast_and_transposed": (lambda x, b, y: x.t() * b + y,
                                 lambda: (make((48, 65)), make((65, 1)), make((65, 48)))),
    "int_transposed": (lambda x, y: x.t() + y, lambda: (make((33, 20), torch.int32), make((20, 33), torch.int32))),
    "half_transposed": (lambda x, y: x.t() * y, lambda: (make((40, 36), torch.float16), make((36, 40), torch.float16))),
    # pure copies: full blocks go through register transposes straight into the output (4-byte types)
    "nchw_to_nhwc_full_blocks": (lambda x: x.permute(0, 2, 3, 1).contiguous(), lambda: (make((2, 64, 9, 20)),)),
    "int_to_channels_last": (lambda x: x.to(memory_format=torch.channels_last), lambda: (make((2, 40, 7, 9), torch.int32),)),
    "half_nchw_to_nhwc": (lambda x: x.permute(0, 2, 3, 1).contiguous(), lambda: (make((2, 48, 9, 20), torch.float16),)),
    # convolution weights between NCHW and channels-last: one side walks runs of only k*k (a short tile dim)
    "weight_3x3_to_channels_last": (lambda w: w.contiguous(memory_format=torch.channels_last),
                                    lambda: (make((40, 24, 3, 3)),)),
    "weight_3x3_to_nchw": (lambda w: w.contiguous() * 2,
                           lambda: (make((40, 24, 3, 3)).to(memory_format=torch.channels_last),)),
    "grouped_weight_2x2_to_channels_last": (lambda w: w.contiguous(memory_format=torch.channels_last),
                                            lambda: (make((64, 17, 2, 2)),)),
    "weight_5x5_sliced_to_channels_last": (lambda w: w[:, 1:].contiguous(memory_format=torch.channels_last),
                                           lambda: (make((20, 33, 5, 5)),)),
}


@pytest.mark.parametrize("codegen", BOTH)
@pytest.mark.parametrize("case", list(TRANSPOSED))
def test_transpose_tiles(case, codegen):
    fn, inputs = TRANSPOSED[case]
    assert "transpose" in _plans(fn, inputs(), codegen)


@pytest.mark.parametrize("codegen", BOTH)
def test_transpose_tiles_dynamic_shapes(codegen):
    fn = lambda x, y: x.t() + y   # noqa: E731
    for rows, cols in ((37, 53), (70, 29)):
        assert "transpose" in _plans(fn, (make((rows, cols)), make((cols, rows))), codegen, dynamic=True)


@pytest.mark.parametrize("codegen", BOTH)
def test_short_dims_keep_the_flat_loop(codegen):
    """NCHW -> NHWC with 3 channels: the 3 planes are read as 3 sequential streams; no tile."""
    plans = _plans(lambda x: x.permute(0, 2, 3, 1).contiguous(), (make((2, 3, 20, 20)),), codegen)
    assert "transpose" not in plans
    # both dims short (a 9 x 9 transpose): nothing to gain from a tile either
    assert "transpose" not in _plans(lambda x: x.t() + 1, (make((9, 9)),), codegen)


COLUMNS = {
    "sum_dim0": (lambda x: x.sum(0), lambda: (make((300, 37)),)),
    "mean_dim0_odd": (lambda x: x.mean(0), lambda: (make((1029, 37)),)),
    "amax_dim0": (lambda x: x.amax(0), lambda: (make((77, 130)),)),
    "batchnorm_channels_last": (
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        lambda: (make((4, 24, 5, 7)).to(memory_format=torch.channels_last), make((24,)), make((24,)))),
    "layernorm_over_channels_nchw": (
        lambda x, w, b: F.layer_norm(x.permute(0, 2, 3, 1), (24,), w, b).permute(0, 3, 1, 2),
        lambda: (make((2, 24, 6, 5)), make((24,)), make((24,)))),
}



def _ln_channels(x, w, b):
    return F.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1],), w, b).permute(0, 3, 1, 2)


# column reductions whose last phase stores along the reduction dim (the output walks the channels
# contiguously): the C++ tile stages rows and transposes them out; odd channel counts leave a partial block
# of rows, odd column counts partial 8-column blocks
STORES_ALONG_REDUCTION = {
    "layernorm_channels_odd": (_ln_channels, lambda: (make((2, 13, 7, 9)), make((13,)), make((13,)))),
    "layernorm_channels_wide": (_ln_channels, lambda: (make((1, 40, 33, 35)), make((40,)), make((40,)))),
    "layernorm_channels_half": (_ln_channels, lambda: (make((2, 20, 6, 7), torch.float16), make((20,), torch.float16),
                                                       make((20,), torch.float16))),
    "layernorm_channels_double": (_ln_channels, lambda: (make((2, 19, 5, 8), torch.float64), make((19,), torch.float64),
                                                         make((19,), torch.float64))),
    "centered_to_nhwc": (lambda x: (x - x.mean(1, keepdim=True)).permute(0, 2, 3, 1).contiguous(),
                         lambda: (make((3, 17, 11, 6)),)),
    "int_centered_to_nhwc": (lambda x: (x - x.amax(1, keepdim=True)).permute(0, 2, 3, 1).contiguous(),
                             lambda: (make((2, 16, 9, 8), torch.int32),)),
    "layernorm_ncl": (lambda x, w, b: F.layer_norm(x.transpose(1, 2), (x.shape[1],), w, b).transpose(1, 2),
                      lambda: (make((3, 27, 50)), make((27,)), make((27,)))),
}
COLUMNS.update(STORES_ALONG_REDUCTION)


@pytest.mark.parametrize("codegen", BOTH)
@pytest.mark.parametrize("case", list(COLUMNS))
def test_column_reductions(case, codegen):
    fn, inputs = COLUMNS[case]
    assert "column" in _plans(fn, inputs(), codegen)


@pytest.mark.parametrize("codegen", BOTH)
def test_layernorm_over_channels_of_a_channels_last_tensor_reads_rows(codegen):
    """The same function on a channels-last input reduces along contiguous rows: no column tile."""
    inputs = (make((2, 24, 6, 5)).to(memory_format=torch.channels_last), make((24,)), make((24,)))
    assert _plans(_ln_channels, inputs, codegen) == ["none"]


@pytest.mark.parametrize("codegen", BOTH)
def test_layernorm_over_channels_dynamic_shapes(codegen):
    for n, c, h, w in ((2, 13, 7, 9), (1, 24, 5, 11)):
        plans = _plans(_ln_channels, (make((n, c, h, w)), make((c,)), make((c,))), codegen, dynamic=True)
        assert "column" in plans


def test_cpp_stores_along_the_reduction_are_transposed_out():
    """LayerNorm over NCHW channels: the normalising phase stages 8 rows of the tile and writes them with
    8x8 register transposes (float) or element by element (float16), and computes the mean and
    1/sqrt(var + eps) once per column before its loop, not once per element."""
    for case, transposed in (("layernorm_channels_odd", True), ("layernorm_channels_half", False)):
        fn, inputs = STORES_ALONG_REDUCTION[case]
        _plans(fn, inputs(), "cpp")
        (graph,) = fuse_all.compiled_graphs()
        (source,) = graph.kernel_sources.values()
        assert "rows staged, then transposed into the outputs" in source
        assert ("fa_transpose8x8_b32(&fa_st0[fa_j]" in source) == transposed
        normalising = source[source.index("rows staged"):]
        assert "__builtin_sqrtf" not in normalising and "__builtin_sqrtf" in source


def test_cpp_full_blocks_transpose_in_registers():
    """The C++ tile stages the transposed operand of a full block through 8x8 register transposes (4-byte
    types), 2-byte types through a plain copy; odd sizes leave partial blocks on the direct path."""
    for case, staged in (("t_add_aliasing_stride", "fa_transpose8x8_b32("), ("half_transposed", "fa_tb0[fa_j * ")):
        fn, inputs = TRANSPOSED[case]
        _plans(fn, inputs(), "cpp")
        (graph,) = fuse_all.compiled_graphs()
        source = "\n".join(graph.kernel_sources.values())
        assert staged in source and "// a full block" in source and "else {" in source


def test_cpp_pure_copies_transpose_straight_into_the_output():
    """A permuted copy of a 4-byte type needs no staging buffer: each full block is 8x8 register transposes
    from the input to the output; 2-byte types and blocks at the edges keep the element loops."""
    for case, direct in (("nchw_to_nhwc_full_blocks", True), ("int_to_channels_last", True),
                         ("half_nchw_to_nhwc", False), ("t_add_aliasing_stride", False)):
        fn, inputs = TRANSPOSED[case]
        assert "transpose" in _plans(fn, inputs(), "cpp")
        (graph,) = fuse_all.compiled_graphs()
        source = "\n".join(graph.kernel_sources.values())
        assert ("straight into the outputs" in source) == direct, case
        assert ("fa_tb0" in source) != direct, case


def test_cpp_phased_column_tiles_fit_one_phase_in_l2():
    """A column reduction with several phases (a norm) narrows its tile so one phase's rows stay in L2:
    64 channels -> 512 columns, 256 channels -> 128; a one-phase column mean keeps 1024."""
    for channels, tile in ((64, 512), (256, 128)):
        inputs = (make((1, channels, 4, 80)), make((channels,)), make((channels,)))
        assert "column" in _plans(_ln_channels, inputs, "cpp")
        (graph,) = fuse_all.compiled_graphs()
        (source,) = graph.kernel_sources.values()
        assert f"fa_tile_width(320, 1, {tile})" in source
    _plans(lambda x: x.mean(0), (make((300, 37)),), "cpp")
    (graph,) = fuse_all.compiled_graphs()
    assert "fa_tile_width(37, 1, 1024)" in "".join(graph.kernel_sources.values())

"""Split column reductions (fuse_all_ir.column_split) through the Triton codegen (interpreter on CPU), against
eager and a float64 reference: column sums, means, max/min/any, var and BatchNorm training statistics,
channels-last BatchNorm forward and backward, odd sizes whose rows do not divide into the chunks, dynamic
shapes. Small shapes are forced through the split with FUSE_ALL_COLUMN_SPLITS; each case checks that the
kernels really were split (a variance is one split phase: Welford partials, issue 11). The decision itself (`choose_column_splits`) is checked on the GPU sizes."""
import pytest
import torch
import torch.nn.functional as F

import fuse_all
import fuse_all_ir as ir
from fuse_all_ir.column_split import FORCE_ENV
from fuse_all_optest import assert_near_float64, check, make

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _kernel_names(fn, inputs, codegen="triton", dynamic=None, **kw) -> list[str]:
    fuse_all.reset()
    check(fn, *inputs, codegen=codegen, dynamic=dynamic, **kw)
    names = []
    for graph in fuse_all.compiled_graphs():
        assert graph.fallback_reason is None, graph.fallback_reason
        names += [k.name for k in graph.kernels]
    return names


def _split_count(names) -> int:
    return sum("_part" in n for n in names)


CASES = {
    # 37 rows in 4 chunks of 10: the last chunk is 7 rows long (masked)
    "sum_dim0_odd": (lambda x: x.sum(0), lambda: (make((37, 1029)),), 1),
    "mean_dim0": (lambda x: x.mean(0), lambda: (make((300, 37)),), 1),
    "amax_dim0": (lambda x: x.amax(0), lambda: (make((77, 130)),), 1),
    "amin_dim0_negative": (lambda x: x.amin(0), lambda: (make((45, 19), low=-9, high=-1),), 1),
    "any_dim0": (lambda x: (x > 1.5).any(0), lambda: (make((61, 33)),), 1),
    "int_sum_dim0": (lambda x: x.sum(0), lambda: (make((53, 40), torch.int32),), 1),
    "half_sum_dim0": (lambda x: x.sum(0), lambda: (make((90, 33), torch.float16),), 1),
    "prod_dim0": (lambda x: x.prod(0), lambda: (make((23, 31), low=0.8, high=1.25),), 1),
    "var_mean_dim0": (lambda x: torch.var_mean(x, 0), lambda: (make((203, 48)),), 1),
    "sum_two_dims_channels_last": (lambda x: x.sum((0, 2, 3)),
                                   lambda: (make((3, 5, 7, 11)).to(memory_format=torch.channels_last),), 1),
    "batchnorm_channels_last": (
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        lambda: (make((4, 24, 5, 7)).to(memory_format=torch.channels_last), make((24,)), make((24,))), 1),
    # a pointwise value the kernel also stores (for another consumer) and sums: the partial kernel stores
    # it; 37 rows in 4 or 7 chunks leave a short tail chunk whose stores past the rows are masked off
    "stored_and_summed_odd": (lambda x: (torch.relu(x - 0.5) * 3, (torch.relu(x - 0.5) * 3).sum(0)),
                              lambda: (make((37, 129)),), 1),
    "batchnorm_channels_last_odd": (
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        lambda: (make((3, 5, 7, 11)).to(memory_format=torch.channels_last), make((5,)), make((5,))), 1),
}


# reductions along the contiguous dim (few long rows): the same split
CONTIGUOUS = {
    "full_sum_odd": (lambda x: x.sum(), lambda: (make((1001,)),), 1),
    "mean_last_dim": (lambda x: x.mean(-1), lambda: (make((3, 1029)),), 1),
    "var_mean_full": (lambda x: torch.var_mean(x), lambda: (make((31, 17)),), 1),
    "logsumexp_last_dim": (lambda x: torch.logsumexp(x, -1), lambda: (make((2, 517)),), 2),
    "stored_and_summed_last_dim": (lambda x: (x.exp(), x.exp().sum(-1)), lambda: (make((3, 1029)),), 1),
    # NCHW statistics: reduction dims N and H*W do not merge, chunks cut across images
    "batchnorm_nchw": (
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        lambda: (make((3, 4, 9, 11)), make((4,)), make((4,))), 1),
}


@pytest.mark.triton
@pytest.mark.parametrize("splits", [4, 7])
@pytest.mark.parametrize("case", list(CONTIGUOUS))
def test_split_contiguous_reductions(case, splits, monkeypatch):
    monkeypatch.setenv(FORCE_ENV, str(splits))
    monkeypatch.setenv("FUSE_ALL_VALIDATE", "1")
    fn, inputs, phases = CONTIGUOUS[case]
    assert _split_count(_kernel_names(fn, inputs())) >= phases


@pytest.mark.triton
def test_split_batchnorm_nchw_backward(monkeypatch):
    monkeypatch.setenv(FORCE_ENV, "4")
    bn = torch.nn.BatchNorm2d(5)
    torch.nn.init.uniform_(bn.weight, 0.5, 1.5)
    x = make((2, 5, 6, 7), requires_grad=True)
    # forward: one Welford phase; backward: both sums over one input in one split kernel (sibling fusion)
    assert _split_count(_kernel_names(bn, (x,), grad=True, grad_vs_float64=True)) >= 2


@pytest.mark.triton
def test_split_full_sum_dynamic_shapes(monkeypatch):
    monkeypatch.setenv(FORCE_ENV, "4")
    for n in (1001, 777):
        assert _split_count(_kernel_names(lambda x: (x * 2).sum(), (make((n,)),), dynamic=True)) >= 1


@pytest.mark.triton
@pytest.mark.parametrize("splits", [4, 7])
@pytest.mark.parametrize("case", list(CASES))
def test_split_column_reductions(case, splits, monkeypatch):
    monkeypatch.setenv(FORCE_ENV, str(splits))
    monkeypatch.setenv("FUSE_ALL_VALIDATE", "1")
    fn, inputs, phases = CASES[case]
    assert _split_count(_kernel_names(fn, inputs())) >= phases


@pytest.mark.triton
def test_split_dynamic_shapes(monkeypatch):
    monkeypatch.setenv(FORCE_ENV, "4")
    fn = lambda x: torch.var_mean(x, 0)   # noqa: E731
    for rows, cols in ((37, 53), (70, 29)):
        assert _split_count(_kernel_names(fn, (make((rows, cols)),), dynamic=True)) == 1   # one Welford phase


def _partial_stores() -> int:
    """How many split partial kernels store more than their partials (a per-element output)."""
    return sum(1 for graph in fuse_all.compiled_graphs() for k in graph.kernels
               if "_part" in k.name and any(not out.startswith(k.name.split("_part")[0]) for out in k.outputs))


@pytest.mark.triton
def test_split_keeps_a_stored_pointwise_producer(monkeypatch):
    """A linear layer's backward after a GELU: the GELU backward is both the matmuls' input and the sum
    that is the first layer's bias gradient. It is computed once, in the split sum's partial kernel, which stores it
    (issue 11: one launch and one pass over the gradient fewer per linear layer); dynamic row counts."""
    monkeypatch.setenv(FORCE_ENV, "4")
    for rows in (37, 70):
        model = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.GELU(), torch.nn.Linear(40, 8))
        x = make((rows, 24), requires_grad=True)
        names = _kernel_names(model, (x,), grad=True, grad_vs_float64=True, dynamic=True)
        assert _split_count(names) >= 1
        assert _partial_stores() >= 1


@pytest.mark.triton
def test_split_chunks_of_whole_images_index_rows_directly(monkeypatch):
    """A channels-last sum over (N, H, W) with an operand broadcast over H, W (average pooling's gradient in
    a ResNet backward) keeps N and H*W apart; a chunk of 2 images then reads row `r` of the chunk as
    `8*r`, not `72*(r // 9) + 8*(r % 9)`: no division per element."""
    monkeypatch.setenv(FORCE_ENV, "2")
    fn = lambda x, g: (x * g[:, :, None, None]).sum((0, 2, 3))   # noqa: E731
    x = make((4, 8, 3, 3)).to(memory_format=torch.channels_last)
    names = _kernel_names(fn, (x, make((4, 8))))
    assert _split_count(names) == 1
    (partial,) = [k for g in fuse_all.compiled_graphs() for k in g.kernels if "_part" in k.name]
    indices = [st.index for st in partial.statements() if isinstance(st, ir.Load)]
    affine = [i for i in indices if i.has(ir.rvar(0)) and not i.has(ir.FloorDiv, ir.ModularIndexing)]
    assert len(affine) == 1 and affine[0].coeff(ir.rvar(0)) == 8, indices      # x's
    assert any(i.has(ir.FloorDiv) for i in indices), indices                     # g's: one row per image


@pytest.mark.triton
def test_split_batchnorm_channels_last_backward(monkeypatch):
    """Training BatchNorm forward and backward on a channels-last tensor: the statistics and the weight /
    bias gradients (sums over N*H*W per channel) are split column reductions."""
    monkeypatch.setenv(FORCE_ENV, "4")
    bn = torch.nn.BatchNorm2d(6)
    torch.nn.init.uniform_(bn.weight, 0.5, 1.5)
    torch.nn.init.uniform_(bn.bias, -0.5, 0.5)
    x = make((3, 6, 5, 7), requires_grad=True).to(memory_format=torch.channels_last).detach().requires_grad_()
    names = _kernel_names(bn, (x,), grad=True, grad_vs_float64=True)
    assert _split_count(names) >= 2     # statistics (one Welford phase) and the backward's sums (one kernel)


@pytest.mark.triton
def test_argmax_is_not_split(monkeypatch):
    """argmax/argmin would need partial indices: the kernel stays whole, and right."""
    monkeypatch.setenv(FORCE_ENV, "4")
    names = _kernel_names(lambda x: x.argmax(0), (make((300, 37)),))
    assert names and _split_count(names) == 0
    assert [k.tiling.kind for g in fuse_all.compiled_graphs() for k in g.kernels] == ["column"]


@pytest.mark.triton
def test_per_element_stores_are_not_split(monkeypatch):
    """A softmax's last phase stores every element: the kernel stays whole, and right."""
    monkeypatch.setenv(FORCE_ENV, "4")
    names = _kernel_names(lambda x: torch.softmax(x, -1), (make((3, 700)),))
    assert names and _split_count(names) == 0


@pytest.mark.triton
def test_a_forced_split_never_cuts_chunks_of_one_row(monkeypatch):
    """FUSE_ALL_COLUMN_SPLITS=3 on reductions of 2 and 4 elements (fuzz seed 161, forced splits): chunks
    of one row would leave a length-1 "reduction" rendered as pointwise (a host program naming `rmask`,
    a clean fallback). The 2-row products stay whole, the 4-row mean is split in chunks of 2."""
    monkeypatch.setenv(FORCE_ENV, "3")
    fn = lambda a, b: ((torch.clamp(a + 2 * b, -1, 1) * 0.5 + 1).prod(-1).mean(),)   # noqa: E731
    names = _kernel_names(fn, (make((4, 2)), make((4, 1))))
    assert _split_count(names) == 1


def test_cpp_is_not_split(monkeypatch):
    monkeypatch.setenv(FORCE_ENV, "4")
    # a sum of 300 terms: the C++ order differs from eager's by ~1e-5 (tolerance for the order, not the split)
    names = _kernel_names(lambda x: x.sum(0), (make((300, 37)),), codegen="cpp", atol=1e-4, rtol=1e-5)
    assert names and _split_count(names) == 0


@pytest.mark.triton
@pytest.mark.parametrize("splits", [8, 64])
def test_split_sums_against_float64(splits, monkeypatch):
    """Long columns (8192 rows) of positive values (errors add up): the split sum, mean and variance stay
    within eager's error against float64."""
    monkeypatch.setenv(FORCE_ENV, str(splits))
    x = make((8192, 24), low=0.5, high=1.5) * 3 + 100
    compiled = torch.compile(lambda t: (t.sum(0), t.mean(0), torch.var(t, 0)), backend="fuse_all",
                             options={"codegen": "triton"})
    actual = compiled(x)
    eager = (x.sum(0), x.mean(0), torch.var(x, 0))
    x64 = x.double()
    reference = (x64.sum(0), x64.mean(0), torch.var(x64, 0))
    for label, a, e, r in zip(("sum", "mean", "var"), actual, eager, reference):
        assert_near_float64(a, e, r, label, atol=1e-6 * r.abs().max().item())
    names = [k.name for g in fuse_all.compiled_graphs() for k in g.kernels]
    assert _split_count(names) >= 1     # sum, mean (the same Reduce) and the Welford variance: one kernel


def test_choose_column_splits():
    # BatchNorm stats over 64x256x64x64 channels-last: 4 blocks of 64 columns, 262144 rows
    assert ir.choose_column_splits(256, 262144) == 256
    # train_resnet50's BatchNorms: 512 channels x 25088 rows -> 128 chunks of 196 rows (Inductor: 196 of
    # 128), the stem's 64 x 401408 -> 1024 chunks of 392 (Inductor's too)
    assert ir.choose_column_splits(512, 25088) == 128
    assert ir.choose_column_splits(64, 401408) == 1024
    # train_resnet50's 256 x 100352: 256 chunks of 392 rows (512 chunks of 196 were slower than 128 of 784)
    assert ir.choose_column_splits(256, 100352) == 256
    # x.sum(0) of 8192 x 8192: 128 blocks -> 8 chunks of 1024 rows
    assert ir.choose_column_splits(8192, 8192) == 8
    # enough column blocks already: no split
    assert ir.choose_column_splits(64 * 600, 8192) == 1
    # short columns: too little work, or chunks would be under 128 rows
    assert ir.choose_column_splits(256, 300) == 1
    assert ir.choose_column_splits(256, 1024) == 8
    # 16 columns of 2048 rows: one program walks 32768 elements, not worth two launches
    assert ir.choose_column_splits(16, 2048) == 1


def test_choose_row_splits():
    # BatchNorm stats of a 32x64x112x112 NCHW tensor: 64 rows of 401408 -> 16 chunks
    assert ir.choose_row_splits(64, 32 * 112 * 112) == 16
    # a full sum of 2**26 elements: 1024 chunks (the cap; 128 left the H200 at 1.9 TB/s), and shorter sums
    # as many chunks of at least 8192 elements as fit
    assert ir.choose_row_splits(1, 2**26) == 1024
    assert ir.choose_row_splits(1, 2**20) == 128
    assert ir.choose_row_splits(2, 2**26) == 512
    # enough rows, or rows too short to cut
    assert ir.choose_row_splits(4096, 4096) == 1
    assert ir.choose_row_splits(8, 8191) == 1
    # a row of 50257 (a vocabulary): one program finishes it in microseconds, no extra launches
    assert ir.choose_row_splits(8, 50257) == 1
    assert ir.choose_row_splits(8, 1 << 16) == 8

"""Extern calls (mm/bmm/addmm/linear/conv2d) inside graphs with fused prologues/epilogues, and ops with no
lowering (cumsum, sort, topk, embedding, gather/index, fft with complex results) that must fall back to
ATen and still match eager."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fuse_all_optest import BOTH, check, check_ops, make, params

MATMUL = {
    "mm": lambda a, b, bias, x3, w: torch.mm(a, b),
    "mm_transposed_operand": lambda a, b, bias, x3, w: a @ a.t(),
    "matmul_3d_2d": lambda a, b, bias, x3, w: torch.matmul(x3, b),
    "bmm": lambda a, b, bias, x3, w: torch.bmm(x3, x3.transpose(1, 2)),
    "baddbmm": lambda a, b, bias, x3, w: torch.baddbmm(x3[:, :, :5], x3, x3.transpose(1, 2)[:, :, :5],
                                                        beta=0.5, alpha=2),
    "addmm": lambda a, b, bias, x3, w: torch.addmm(bias, a, b),
    "addmm_beta_alpha": lambda a, b, bias, x3, w: torch.addmm(bias, a, b, beta=0.5, alpha=-2.0),
    "linear_gelu": lambda a, b, bias, x3, w: F.gelu(F.linear(x3, w, bias)),
    "linear_no_bias_relu": lambda a, b, bias, x3, w: F.relu(F.linear(a, w)),
    "prologue_mm_epilogue": lambda a, b, bias, x3, w: (torch.mm(a.sin() * 2, b + 1) + bias).tanh(),
    "attention": lambda a, b, bias, x3, w: torch.softmax(x3 @ x3.transpose(-1, -2) / math.sqrt(9), -1) @ x3,
    "mv": lambda a, b, bias, x3, w: torch.mv(a, b[:, 0]),
    "dot": lambda a, b, bias, x3, w: torch.dot(a[0], a[1]),
    "einsum": lambda a, b, bias, x3, w: torch.einsum("bij,jk->bik", x3, b).relu(),
    # the Triton target splits an addmm whose product only feeds pointwise code into mm + a fused bias add
    "linear_residual_layernorm": lambda a, b, bias, x3, w: F.layer_norm(F.linear(x3, w, bias) + x3[..., :7], (7,)),
    "addmm_view_pointwise": lambda a, b, bias, x3, w: torch.addmm(bias, a, b).view(5, 7, 1).sigmoid() * 3,
    "addmm_2d_bias": lambda a, b, bias, x3, w: torch.addmm(a[:, :7], a, b).relu(),
    "addmm_returned_and_pointwise": lambda a, b, bias, x3, w: (lambda y: (y, y.relu()))(torch.addmm(bias, a, b)),
}


@pytest.mark.parametrize("dtype,layout,codegen", params(
    [(torch.float32, "contiguous"), (torch.float32, "transposed"), (torch.float64, "sliced")], triton=(0,)))
def test_matmul_family(dtype, layout, codegen):
    a = make((5, 9), dtype, layout)
    b = make((9, 7), dtype, layout)
    bias = make((7,), dtype)
    x3 = make((3, 5, 9), dtype, layout)
    w = make((7, 9), dtype, layout)
    check_ops(MATMUL, a, b, bias, x3, w, codegen=codegen, atol=1e-4, rtol=1e-5)


CONV = {
    "conv": lambda x, w, b, wg: F.conv2d(x, w, b),
    "conv_stride_pad_relu": lambda x, w, b, wg: F.relu(F.conv2d(x, w, b, stride=2, padding=1)),
    "conv_groups_dilation": lambda x, w, b, wg: F.conv2d(x, wg, None, padding=2, dilation=2, groups=2),
    "prologue_conv_epilogue": lambda x, w, b, wg: F.silu(F.conv2d(x * 0.5 + 1, w, b, padding=1)) * 2,
    "conv_then_reduce": lambda x, w, b, wg: F.conv2d(x, w, b).mean((2, 3)),
}


@pytest.mark.parametrize("layout,codegen", params(["contiguous", "channels_last"], triton=(0,)))
def test_conv2d(layout, codegen):
    x = make((2, 4, 9, 10), torch.float32, layout)
    w = make((6, 4, 3, 3), torch.float32, layout)
    b = make((6,))
    wg = make((6, 2, 3, 3))
    check_ops(CONV, x, w, b, wg, codegen=codegen, atol=1e-4, rtol=1e-5)


class ConvBnRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.act = nn.ReLU()
        with torch.no_grad():
            self.bn.running_mean.normal_()
            self.bn.running_var.uniform_(0.5, 2)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.normal_()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(9, 16)
        self.fc2 = nn.Linear(16, 5)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


@pytest.mark.parametrize("mode,layout,codegen", params(
    [("eval", "contiguous"), ("eval", "channels_last"), ("train", "contiguous"), ("train", "channels_last")],
    triton=(0,)))
def test_conv_bn_relu_module(mode, layout, codegen):
    """conv -> batch_norm -> relu; train mode also updates the running stats like eager."""
    m = ConvBnRelu().train(mode == "train")
    check(m, make((2, 4, 9, 10), torch.float32, layout), codegen=codegen, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("codegen", BOTH)
def test_mlp_module(codegen):
    check(MLP(), make((3, 4, 9), torch.float32, "transposed"), codegen=codegen, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("codegen", BOTH)
def test_ffn_block_gradients(codegen):
    """A transformer FFN in training: the first product is saved for GELU's backward (keeps its addmm), the
    second only feeds the residual add (Triton: mm + bias add in the LayerNorm kernel)."""
    w1, b1 = make((16, 8), requires_grad=True), make((16,), requires_grad=True)
    w2, b2 = make((8, 16), requires_grad=True), make((8,), requires_grad=True)
    x = make((4, 8), requires_grad=True)

    def ffn(x, w1, b1, w2, b2):
        return F.layer_norm(F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2) + x, (8,))
    check(ffn, x, w1, b1, w2, b2, codegen=codegen, grad=True, atol=1e-4, rtol=1e-5)


FALLBACK = {
    "cumsum": lambda x, idx, w: torch.cumsum(x, 1),
    "cumsum_fused_around": lambda x, idx, w: (x * 2).cumsum(-1).sin() + 1,
    "sort_values_indices": lambda x, idx, w: torch.sort(x, dim=-1, stable=True),
    "sort_descending_plus": lambda x, idx, w: torch.sort(x.abs(), dim=0, descending=True, stable=True).values + 1,
    "topk": lambda x, idx, w: torch.topk(x, 3, dim=-1),
    "topk_indices_used": lambda x, idx, w: torch.topk(x.exp(), 2, dim=1, largest=False).indices * 2,
    "embedding": lambda x, idx, w: F.embedding(idx, w),
    "embedding_padding_epilogue": lambda x, idx, w: F.embedding(idx, w, padding_idx=0).relu() * 3,
    "index_select": lambda x, idx, w: torch.index_select(w, 0, idx.flatten()),
    "advanced_index": lambda x, idx, w: w[idx] + 1,
    "gather": lambda x, idx, w: torch.gather(x, 1, idx[:, :4].remainder(4).unsqueeze(-1).expand(-1, -1, 6)),
    "argsort": lambda x, idx, w: torch.argsort(x, dim=-1, stable=True),
    "flip_cummax": lambda x, idx, w: torch.cummax(x.flip(-1), -1).values,
    "nonzero_free_masked_sum": lambda x, idx, w: torch.where(x > 0, x, 0).sum(),
    "scatter_add": lambda x, idx, w: torch.zeros(6, 4).scatter_add(0, idx[:, :4] % 6, x[:, :4, 0]),
}


@pytest.mark.parametrize("layout,codegen", params(["contiguous", "transposed"], triton=(0,)))
def test_ops_without_lowering(layout, codegen):
    x = make((3, 4, 6), torch.float32, layout)
    idx = make((3, 5), torch.int64, low=0, high=10)
    w = make((10, 4), torch.float32, layout)
    check_ops(FALLBACK, x, idx, w, codegen=codegen, atol=1e-5, rtol=1e-5)


COMPLEX = {
    "fft": lambda x: torch.fft.fft(x),
    "fft_abs": lambda x: torch.fft.fft(x).abs(),
    "rfft_angle_plus": lambda x: torch.fft.rfft(x * 2, dim=0).angle() + 1,
    "view_as_real": lambda x: torch.view_as_real(torch.fft.fft(x)) * 2,
    "complex_pointwise": lambda x: torch.fft.fft(x) * (1 + 2j) + torch.fft.fft(x).conj(),
    "real_imag": lambda x: (lambda c: (c.real + 1, c.imag * c.real))(torch.fft.fft(x.sin())),
    "roundtrip": lambda x: torch.fft.ifft(torch.fft.fft(x)).real - x,
    "complex_mul_abs_sum": lambda x: (torch.fft.fft(x) * torch.fft.fft(x.flip(-1))).abs().sum(-1),
}


@pytest.mark.parametrize("codegen", BOTH)
def test_complex_falls_back(codegen):
    """fft produces complex64: complex tensors must fall back to ATen cleanly, around fused real kernels.
    (A whole-graph ATen fallback with a one-line reason is allowed here.)"""
    check_ops(COMPLEX, make((4, 8), torch.float32, "transposed"), codegen=codegen, atol=1e-5, rtol=1e-5,
              allow_fallback=True)


def test_records_list_kernels_and_aten_calls_in_run_order():
    """`CompiledGraph.steps`: what the host program runs, in order (the distributed tests read collectives'
    positions from it)."""
    import fuse_all
    torch._dynamo.reset()
    fuse_all.reset()
    x, w = torch.randn(8, 16), torch.randn(16, 4)
    out = torch.compile(lambda x, w: torch.tanh(torch.relu(x * 2) @ w) + 1, backend="fuse_all")(x, w)
    torch.testing.assert_close(out, torch.tanh(torch.relu(x * 2) @ w) + 1)
    (record,) = fuse_all.compiled_graphs()
    kinds = [getattr(step, "target", None) or "kernel" for step in record.steps]
    assert kinds == ["kernel", "aten.mm.default", "kernel"], kinds
    assert record.externs == [s for s in record.steps if not hasattr(s, "kernel")]
    assert [s.kernel for s in record.steps if hasattr(s, "kernel")] == [k.name for k in record.kernels]


def test_kernel_feeding_an_aten_call_keeps_its_own_origins():
    """A value realized because an ATen call needs it in memory is credited to the ops that computed it, not
    to the ATen call (the fusion report and the editor showed `@` as a source of the pointwise kernel)."""
    import fuse_all
    torch._dynamo.reset()
    fuse_all.reset()
    torch.compile(lambda x, w: torch.relu(x * 2 + 1) @ w, backend="fuse_all")(torch.randn(8, 16), torch.randn(16, 4))
    (record,) = fuse_all.compiled_graphs()
    (kernel,) = record.kernels
    assert {o.aten_op for o in kernel.origins} == {"aten.mul.Tensor", "aten.add.Tensor", "aten.relu.default"}
    assert "aten.mm.default" not in record.report.groups[0]["aten_ops"]


@pytest.mark.parametrize("codegen", BOTH)
def test_linear_epilogue_under_dynamic_shapes(codegen):
    """The mm + fused bias rewrite on symbolic sizes (its new values take the addmm's own strides: no guards)."""
    w, b = make((7, 9)), make((7,))
    check(lambda x: F.gelu(F.linear(x, w, b)) + 1, make((5, 9)), codegen=codegen, dynamic=True, atol=1e-4, rtol=1e-5)


def test_attention_heads_split_off_one_matmul_reach_attention_as_views():
    """q, k, v split off one addmm output and reshaped to heads (a view of a strided view: GPT-2's
    attention) are passed to the attention call as views of the matmul output, as in eager, not copied into
    three buffers by a kernel; the output's transpose + reshape back stays a view too."""
    import fuse_all
    from pathlib import Path

    w, b = torch.randn(64, 192), torch.randn(192)

    def attn(x):
        qkv = torch.addmm(b, x.view(-1, 64), w)
        q, k, v = (t.view(2, 16, 4, 16).transpose(1, 2) for t in qkv.split(64, dim=-1))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 16, 64)

    x = torch.randn(2, 16, 64)
    compiled = torch.compile(attn, backend="fuse_all", options={"fallback": False}, dynamic=False)
    with torch.no_grad():
        ours, eager = compiled(x), attn(x)
    torch.testing.assert_close(ours, eager, rtol=1e-5, atol=1e-5)
    assert ours.stride() == eager.stride()
    record = fuse_all.compiled_graphs()[-1]
    source = Path(record.output_code).read_text()
    call = source[source.index("def call"):source.index("def _call_profiled")]
    assert "kernel_" not in call, call
    assert call.count("reinterpret_tensor(buf1, (2, 4, 16, 16), (3072, 16, 192, 1)") == 3, call

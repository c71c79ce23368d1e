"""Every kernel shape stays right after its first call. The first call of a Triton kernel goes through the
general launcher; later calls through the generated fast launcher (`runtime.fast_launcher_source`), which
computes its own grid. A grid that covers less than the general path's leaves part of the output as the
previous call wrote it: close to right, and silent. So each case runs four times on fresh random inputs,
each call checked against eager."""
from __future__ import annotations

import pytest
import torch

import fuse_all_optest as ot

pytestmark = pytest.mark.cuda
DEVICE = "cuda"


def _bn_train_stats(x):
    return torch.nn.functional.batch_norm(x, None, None, training=True)


CASES = {
    "transposed_add": (lambda x, y: x.t() + y, [(300, 257), (257, 300)], None),
    "permuted_copy": (lambda x: x.permute(0, 2, 3, 1).contiguous(), [(3, 37, 19, 23)], None),
    "to_channels_last": (lambda x: (x * 2).contiguous(memory_format=torch.channels_last), [(4, 40, 17, 9)], None),
    "column_sum": (lambda x: x.sum(0), [(3000, 77)], None),
    "column_sum_split": (lambda x: x.sum(0), [(70000, 40)], None),
    "row_sum_split": (lambda x: x.sum(), [(1 << 21,)], None),
    "layernorm_channels": (lambda x: torch.nn.functional.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1],)),
                           [(2, 48, 15, 13)], None),
    "batchnorm_channels_last_train": (_bn_train_stats, [(8, 96, 32, 32)], torch.channels_last),
    "batchnorm_nchw_train": (_bn_train_stats, [(8, 32, 33, 31)], None),
    "softmax_rows": (lambda x: torch.softmax(x, -1), [(513, 1000)], None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_later_calls_match_eager(name):
    fn, shapes, memory_format = CASES[name]
    compiled = ot.compile_fn(fn, "triton")
    for call in range(4):
        inputs = [torch.randn(s, device=DEVICE) for s in shapes]
        if memory_format is not None:
            inputs = [x.contiguous(memory_format=memory_format) for x in inputs]
        expected, actual = fn(*inputs), compiled(*inputs)
        torch.testing.assert_close(actual, expected, atol=2e-4, rtol=2e-4, msg=lambda m: f"call {call}: {m}")


def test_training_steps_of_a_channels_last_conv_block_match_eager():
    """Forward and backward of Conv-BN-ReLU on channels-last activations, three steps on fresh inputs."""
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Conv2d(48, 96, 3, padding=1, bias=False), torch.nn.BatchNorm2d(96),
                                torch.nn.ReLU()).to(DEVICE).to(memory_format=torch.channels_last)
    reference = [p.detach().clone().requires_grad_() for p in block.parameters()]
    compiled = ot.compile_fn(block, "triton")
    for call in range(3):
        x = torch.randn(4, 48, 24, 24, device=DEVICE).contiguous(memory_format=torch.channels_last)
        out = compiled(x)
        grads = torch.autograd.grad(out.square().sum(), list(block.parameters()))
        eager_out = torch.func.functional_call(block, dict(zip([n for n, _ in block.named_parameters()], reference)),
                                               (x,))
        eager_grads = torch.autograd.grad(eager_out.square().sum(), reference)
        torch.testing.assert_close(out, eager_out, atol=1e-3, rtol=1e-3, msg=lambda m: f"call {call}: {m}")
        for got, want in zip(grads, eager_grads):
            torch.testing.assert_close(got, want, atol=1e-2, rtol=1e-3, msg=lambda m: f"call {call} grad: {m}")

"""Small pointwise values read by several consumers: the Triton target recomputes them in each consumer
(`lowering._recomputable`, Inductor's realize thresholds) instead of writing them to memory and reading
them back; the C++ target keeps them as buffers. Both must match eager, including where a consumer is an
ATen call or the graph output (the value then needs a buffer)."""
import pytest
import torch

from fuse_all_optest import BOTH, check, make

SHARED = {
    # BatchNorm-backward's shape: a masked gradient and a centred input, each read by per-channel sums and by
    # the input-gradient expression
    "bn_backward_like": lambda g, out, x, mean: (
        lambda m, c: (m.sum((0, 2, 3)), (m * c).sum((0, 2, 3)), m * 2 - c * (m * c).mean((0, 2, 3), keepdim=True))
    )(torch.where(out <= 0, 0, g), x - mean),
    "two_reductions_over_other_dims": lambda g, out, x, mean: (lambda s: (s.sum(1), s.amax(0), s.sin()))(g * x + 1),
    "shared_value_is_an_output": lambda g, out, x, mean: (lambda s: (s, s.sum(), s.exp()))(g - x),
    "shared_value_feeds_a_matmul": lambda g, out, x, mean: (
        lambda s: (s.flatten(2) @ s.flatten(2).transpose(1, 2), s.cos()))(g.relu() * 3),
    "chain_of_shared_values": lambda g, out, x, mean: (
        lambda a: (lambda b: (a.sum(0), b.sum(1), (a * b).tanh()))(a * x - 1))(g + out),
}


@pytest.mark.parametrize("name", list(SHARED))
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("codegen", BOTH)
def test_shared_pointwise_values(name, layout, codegen):
    g, out, x = (make((4, 6, 5, 7), layout=layout) for _ in range(3))
    mean = make((1, 6, 1, 1))
    check(SHARED[name], g, out, x, mean, codegen=codegen, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("codegen", BOTH)
def test_batchnorm_relu_training_gradients(codegen):
    model = torch.nn.Sequential(torch.nn.BatchNorm2d(6), torch.nn.ReLU())
    x = make((4, 6, 5, 7), layout="channels_last", requires_grad=True)
    check(model, x, codegen=codegen, grad=True, atol=1e-4, rtol=1e-4)

"""A small program for the tooling tests: an ATen call (mm), a fused reduction chain, a graph break, and
a training step (forward and backward graphs)."""
import torch


def layer(x, w):
    a = torch.relu(x @ w)
    b = a.sum(-1, keepdim=True)
    return torch.softmax(a - b, -1).cos() + x.mean()


def with_break(x):
    y = x.sin()
    torch._dynamo.graph_break()
    return y * 2


def main():
    torch.manual_seed(0)
    x, w = torch.randn(8, 16), torch.randn(16, 16, requires_grad=True)
    compiled_layer = torch.compile(layer, backend="fuse_all")
    compiled_layer(x, w).sum().backward()
    with torch.no_grad():
        compiled_layer(x, w)
    torch.compile(with_break, backend="fuse_all")(torch.randn(5))
    print("sample done")


if __name__ == "__main__":
    main()

"""A small ResNet-like network (conv-BN-ReLU stem, basic blocks with identity and strided shortcuts) with
BatchNorm statistics that are not the identity: in inference every BatchNorm(+ReLU, + residual) is a
pointwise kernel over a convolution's output. Shared by tests/ops and tests/cuda."""
import torch.nn as nn
import torch.nn.functional as F


def _randomise_batch_norms(module: nn.Module) -> nn.Module:
    """Running statistics and affine parameters that are not the identity (the defaults would hide a
    normalisation that read the wrong element)."""
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_()
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.normal_()
            m.bias.data.normal_()
    return module.eval()


class ConvBnRelu(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class BasicBlock(nn.Module):
    """ResNet's basic block: conv-bn-relu, conv-bn, + identity (or a strided 1x1 conv-bn), relu."""

    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.first = ConvBnRelu(cin, cout, stride)
        self.conv = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        return F.relu(self.bn(self.conv(self.first(x))) + identity)


def tiny_resnet() -> nn.Module:
    return _randomise_batch_norms(nn.Sequential(ConvBnRelu(3, 8), BasicBlock(8, 8), BasicBlock(8, 16, stride=2),
                                                BasicBlock(16, 16), nn.AdaptiveAvgPool2d(1), nn.Flatten()))

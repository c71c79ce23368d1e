"""torchvision ResNet50 with fuse_all (the guide's example).

The guide loads pretrained weights from the hub (needs a network):
    model = torch.hub.load('pytorch/vision:v0.10.0', 'resnet50', pretrained=True)
Offline, random weights give the same graph: `python examples/resnet50.py`.
"""
import torch
import torchvision

model = torchvision.models.resnet50(weights=None).eval()
opt_model = torch.compile(model, backend="fuse_all")
x = torch.randn(1, 3, 64, 64)
with torch.no_grad():
    out = opt_model(x)
    torch.testing.assert_close(out, model(x), rtol=1e-3, atol=1e-3)
print("resnet50 output", tuple(out.shape), "matches eager")
